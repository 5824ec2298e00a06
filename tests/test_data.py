"""Data pipelines: disk datasets built once and read back identical, repaired when corrupt;
augmentation switches; loader-only and model-only measurement modes."""


import nibabel as nib
import numpy as np
import pytest
import torch

from harness.workload import datasets
from harness.workload.data import augment_switches, build_dataset, build_loader
from harness.workload.volumes import make_volume
from harness.config.workload import builtin
from tests.conftest import tiny_config, tiny_model_config

UNET, RESNET = builtin("unet3d"), builtin("resnet50")


def _disk(tmp_path, **overrides):
    cfg = tiny_config(data__source="disk", data__cache="none", data__num_items=3, data__cache_dir=str(tmp_path),
                      **overrides)
    workload = cfg.workload
    return cfg, workload, datasets.ensure(datasets.spec_for(cfg, workload), tmp_path, log=lambda *_: None)


def test_nifti_dataset_reads_back_what_was_written(tmp_path):
    cfg, _, ds = _disk(tmp_path)
    assert len(ds.items) == 3
    image = nib.load(ds.items[1]["image"]).get_fdata(dtype=np.float32)
    expected, label = make_volume(ds.spec.item_shape, np.random.default_rng([cfg.seed, 1]))
    np.testing.assert_allclose(image, expected, rtol=1e-6)
    assert np.array_equal(np.asarray(nib.load(ds.items[1]["label"]).dataobj), label.astype(np.uint8))


def test_dataset_is_reused_and_rebuilt_only_when_its_settings_change(tmp_path):
    _, _, first = _disk(tmp_path)
    mtime = (first.root / "manifest.json").stat().st_mtime_ns
    _, _, again = _disk(tmp_path)
    assert again.root == first.root and (again.root / "manifest.json").stat().st_mtime_ns == mtime
    _, _, other = _disk(tmp_path, seed=1)
    assert other.root != first.root


def test_a_corrupt_cached_file_is_reported_with_its_path_and_rewritten(tmp_path):
    _, _, ds = _disk(tmp_path)
    broken = ds.items[0]["image"]
    with open(broken, "wb") as f:
        f.write(b"not a nifti")
    messages = []
    repaired = datasets.ensure(ds.spec, tmp_path, log=messages.append)
    assert repaired.repaired == [broken] and broken in messages[0]
    assert nib.load(broken).shape == ds.spec.item_shape


def test_a_cache_without_space_fails_before_writing(tmp_path, monkeypatch):
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage(10, 10, 1000))
    with pytest.raises(OSError, match=r"has 0.00 GiB free; the dataset needs up to"):
        _disk(tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


def test_disk_volumes_go_through_monai_loadimage_and_crop_to_the_patch(tmp_path):
    cfg, workload, _ = _disk(tmp_path)
    x, y = build_dataset(cfg, workload)[0]
    assert x.shape == y.shape == (1, 32, 32, 32) and x.dtype == torch.float32 and y.dtype == torch.uint8


def test_jpeg_images_are_decoded_per_sample(tmp_path):
    cfg, workload, ds = _disk(tmp_path, workload="resnet50")
    assert ds.items[0]["image"].endswith(".jpg")
    x, label = build_dataset(cfg, workload)[0]
    assert x.shape == (3, 64, 64) and x.dtype == torch.float32 and 0 <= label < 1000


def test_mixup_makes_soft_labels_for_2d():
    cfg = tiny_config(workload="resnet50", data__augment="heavy", batch_size=4)
    loader = build_loader(cfg, build_dataset(cfg, RESNET), RESNET)
    _, y = next(iter(loader))
    assert y.shape == (4, 1000) and torch.allclose(y.sum(1), torch.ones(4))


def test_augment_presets_and_switches():
    assert augment_switches(tiny_config(data__augment="heavy"))["elastic"] is True
    assert augment_switches(tiny_config(data__augment="heavy", data__elastic=False))["elastic"] is False
    light = dict(flip=True, noise=True, rotate=False, elastic=False, mixup=False)
    assert augment_switches(tiny_config(data__augment="light")) == light
    with pytest.raises(ValueError, match=r"data.elastic=true applies to 3D workloads only"):
        tiny_config(workload="resnet50", data__elastic=True)
    with pytest.raises(ValueError, match=r"data.cache=none needs data.source=disk"):
        tiny_config(data__cache="none")


def test_heavy_augmentation_changes_the_patch():
    plain = build_dataset(tiny_config(), UNET)[0][0]
    heavy = build_dataset(tiny_config(data__augment="heavy"), UNET)[0][0]
    assert plain.shape == heavy.shape and not torch.equal(plain, heavy)


def test_loader_mode_measures_batches_without_a_model():
    from harness.run.child.measure import train_and_measure

    # items that take 50 ms to read: the step is the loader's wait and next to nothing else, on a busy machine too
    m, extras = train_and_measure(tiny_config(measure__mode="loader", data__read_latency_ms=50.0), UNET,
                                  lambda *a, **k: None)
    assert len(m.step_ms) == 3 and m.loss_last is None
    assert sum(m.data_wait_ms) == pytest.approx(sum(m.step_ms), rel=0.2)


def test_model_mode_never_waits_for_data(monkeypatch):
    from harness.run.child import measure

    asked, real = [], measure.endless

    def counted(loader):
        for batch in real(loader):
            asked.append(1)
            yield batch

    monkeypatch.setattr(measure, "endless", counted)
    m, _ = measure.train_and_measure(tiny_model_config(measure__mode="model"), tiny_model_config().workload,
                                     lambda *a, **k: None)
    # one batch taken from the loader while setting up, kept on the device: the steps never ask the loader again
    # (their data wait is one call of an iterator over that batch; how long it took is the machine's business)
    assert asked == [1] and len(m.data_wait_ms) == len(m.step_ms) == 3 and m.loss_last is not None


def test_per_worker_memory_is_reported(results):
    from harness.run.parent import runner
    from harness.run.parent import env as env_mod

    # The parent samples from outside every sample_interval_s; the steps' sleep keeps the workers alive
    # for several periods, however fast or slow the machine is.
    cfg = tiny_model_config(results_dir=str(results), data__num_workers=2, data__persistent_workers=True,
                            debug__slowdown_ms=400, measure__sample_interval_s=0.1)
    env, key = env_mod.environment(cfg.device)
    record = runner.run_and_store(cfg, env, key)
    assert record.status == "ok", record.error
    # each loader process seen is listed (a worker the loader replaced is a process of its own): at least the two
    assert len(record.worker_rss_bytes) >= 2 and all(r > 10e6 for r in record.worker_rss_bytes[:2])
    assert record.peak_host_rss_bytes > record.peak_main_rss_bytes


def test_diagnosis_verdicts_from_rates():
    from harness.analysis.views.diagnosis import diagnose

    rec = lambda sps, wait=0.0: {"status": "ok", "samples_per_s": sps, "batch_size": 2, "data_wait_frac": wait}  # noqa: E731
    slow_loader = diagnose(rec(6.2), rec(22.8), rec(5.0, 0.72), "cuda", 0, True)
    assert slow_loader.verdict == "data-bound"
    assert "the loader delivers 3.10 batches/s, the model could take 11.40" in slow_loader.text
    assert "the training loop is blocked on the loader 72% of the time" in slow_loader.text
    assert "GPU waits" not in slow_loader.text and any("data.cache=ram" in a for a in slow_loader.advice)
    assert diagnose(rec(100.0), rec(10.0), rec(9.0, 0.05), "cpu", 0, False).verdict == "compute-bound"
    assert diagnose(rec(10.0), rec(10.5), rec(6.0, 0.5), "cpu", 0, False).verdict == "balanced"
    assert diagnose({"status": "oom"}, rec(1.0), rec(1.0), "cpu", 0, False).verdict == "unknown"
