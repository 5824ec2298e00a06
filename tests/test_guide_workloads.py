"""The workloads that stand in for the guides' own jobs: the SEResNet speech model (spectrograms computed per item
in the loader) and DETR (Hungarian matching, L1 + GIoU + CE, CLAHE and motion blur as switches)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from harness import config as config_mod
from harness.config import workload as workloads
from tests.conftest import harness_cli, tiny_config


def test_the_speech_dataset_computes_a_normalised_log_spectrogram_per_item(tmp_path):
    from harness_models.speech import SpeechSpectrograms, spectrogram_shape

    data = SpeechSpectrograms(patch_size=[101], num_clips=4, cache_dir=str(tmp_path))
    x, y = data[1]
    assert list(x.shape) == [257, 101] == spectrogram_shape(seconds=1.0) and x.dtype == torch.float32
    assert int(y) == 1 and torch.allclose(x.mean(dim=1), torch.zeros(257), atol=1e-4)
    assert torch.equal(data[1][0], x) and not torch.equal(data[2][0], x)  # seeded per item: reproducible, not constant
    image = SpeechSpectrograms(patch_size=[257, 101], num_clips=2, spatial_dims=2, source="memory")[0][0]
    assert list(image.shape) == [1, 257, 101]
    with pytest.raises(ValueError, match=r"patch_size=\[128, 101\]: the frequency side must be n_fft // 2 \+ 1 = 257"):
        SpeechSpectrograms(patch_size=[128, 101], spatial_dims=2)


def test_speech_items_are_decoded_from_flac_files_written_once_and_rewritten_when_torn(tmp_path):
    import soundfile

    from harness_models.speech import SpeechSpectrograms

    data = SpeechSpectrograms(patch_size=[101], num_clips=4, cache_dir=str(tmp_path))
    assert len(data.files) == 4 and data.clips is None
    info = soundfile.info(data.files[0])
    assert (info.format, info.subtype, info.samplerate, info.channels) == ("FLAC", "PCM_16", 16000, 1)
    assert info.frames == data.length == 100 * 160 + 8000  # a 1 s item's samples and half a second to crop from
    first = [data[i][0] for i in range(4)]
    # the same clips in RAM give the same items, to 16-bit quantisation
    memory = SpeechSpectrograms(patch_size=[101], num_clips=4, source="memory")
    assert all(torch.allclose(a, memory[i][0], atol=0.2) for i, a in enumerate(first))
    # the two classes' chirps differ: their mean spectra over the items of each are far apart
    by_class = [torch.stack([data[i][0] for i in range(4) if int(data[i][1]) == c]).mean(0) for c in (0, 1)]
    assert (by_class[0] - by_class[1]).abs().mean() > 0.1
    written = {f: Path(f).stat().st_mtime_ns for f in data.files}
    Path(data.files[1]).write_bytes(Path(data.files[1]).read_bytes()[:1000])  # torn
    Path(data.files[2]).unlink()  # missing
    again = SpeechSpectrograms(patch_size=[101], num_clips=4, cache_dir=str(tmp_path))
    assert again.files == data.files and soundfile.info(data.files[1]).frames == data.length
    assert [Path(f).stat().st_mtime_ns == written[f] for f in (data.files[0], data.files[3])] == [True, True]
    assert all(torch.equal(again[i][0], a) for i, a in enumerate(first))  # seeded: the same items again
    with pytest.raises(ValueError, match=r"source='tape' is not valid for the speech data set: use one of"):
        SpeechSpectrograms(patch_size=[101], source="tape")


def test_speech_clips_that_would_not_fit_are_refused_before_any_file_is_written(tmp_path, monkeypatch):
    import shutil

    from harness_models.speech import SpeechSpectrograms

    class Usage:
        free = 50_000  # bytes: 4 clips of 24,000 16-bit samples need up to 192,000

    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage)
    cache = tmp_path / "cache"
    with pytest.raises(OSError, match=r"data cache .*cache has 0\.0 MiB free; the speech clips need up to 0\.2 MiB\. "
                                      r"Free space or set data.cache_dir"):
        SpeechSpectrograms(patch_size=[101], num_clips=4, cache_dir=str(cache))
    assert not cache.exists()


def test_the_speech_seresnet_is_monais_in_1d_and_2d():
    from monai.networks.nets import SEResNet50

    from harness_models.speech import seresnet

    one = seresnet(spatial_dims=1, in_channels=257)
    assert isinstance(one, SEResNet50) and one(torch.randn(2, 257, 40)).shape == (2, 2)
    assert seresnet(spatial_dims=2, in_channels=1)(torch.randn(2, 1, 64, 40)).shape == (2, 2)
    with pytest.raises(ValueError, match="spatial_dims=3 is not valid for the speech SEResNet: use 1 or 2"):
        seresnet(spatial_dims=3)


def test_hungarian_matching_finds_the_queries_that_predict_each_box():
    from harness_models.detr import HungarianLoss

    loss = HungarianLoss(num_classes=2)
    targets = torch.full((1, 4, 5), -1.0)
    targets[0, 0] = torch.tensor([1, 0.2, 0.3, 0.1, 0.1])
    targets[0, 1] = torch.tensor([0, 0.7, 0.6, 0.05, 0.08])
    out = torch.zeros(1, 6, 3 + 4)
    out[0, :, 2] = 5.0  # every query says "no object"...
    out[0, :, 3:] = torch.tensor([0.5, 0.5, 0.2, 0.2])
    out[0, 4, :3], out[0, 4, 3:] = torch.tensor([0.0, 5.0, 0.0]), targets[0, 0, 1:]  # ...but query 4 finds box 0
    out[0, 1, :3], out[0, 1, 3:] = torch.tensor([5.0, 0.0, 0.0]), targets[0, 1, 1:]  # and query 1 box 1
    image, query, row = loss.match(out[..., :3], out[..., 3:], targets)
    assert sorted(zip(query.tolist(), row.tolist())) == [(1, 1), (4, 0)] and image.tolist() == [0, 0]
    perfect = float(loss(out, targets))
    out[0, 4, 3:] = torch.tensor([0.8, 0.8, 0.1, 0.1])  # the box moved away: L1 and GIoU grow
    assert perfect < 0.1 < float(loss(out, targets))


def _match_per_image(loss, logits, boxes, targets):
    """The matcher as it was before the batched one: costs per image, each image's costs copied to the host alone."""
    from scipy.optimize import linear_sum_assignment
    from torchvision.ops import generalized_box_iou

    from harness_models.detr import box_xyxy

    prob = logits.float().softmax(-1)
    found = []
    for i in range(len(targets)):
        valid = torch.nonzero(targets[i, :, 0] >= 0).flatten()
        if valid.numel() == 0:
            continue
        classes, tboxes = targets[i, valid, 0].long(), targets[i, valid, 1:].float()
        cost = (-loss.cost_class * prob[i][:, classes] + loss.cost_bbox * torch.cdist(boxes[i].float(), tboxes, p=1)
                - loss.cost_giou * generalized_box_iou(box_xyxy(boxes[i].float()), box_xyxy(tboxes)))
        q, t = linear_sum_assignment(cost.cpu().numpy())
        found += [(i, int(a), int(valid[b])) for a, b in zip(q, t)]
    return found


@pytest.mark.parametrize("seed", range(5))
def test_batched_hungarian_matching_assigns_as_matching_image_by_image_did(seed, monkeypatch):
    """Random outputs and targets (some images with no box at all): the same assignments as the per-image matcher,
    with ONE copy to the host for the whole batch (the per-image one made two an image)."""
    from harness_models.detr import HungarianLoss

    gen = torch.Generator().manual_seed(seed)
    batch, queries, slots = 6, 30, 8
    logits = torch.randn(batch, queries, 3, generator=gen) * 3
    boxes = torch.rand(batch, queries, 4, generator=gen) * torch.tensor([1.0, 1.0, 0.2, 0.2]) + \
        torch.tensor([0.0, 0.0, 0.01, 0.01])
    targets = torch.full((batch, slots, 5), -1.0)
    for i, count in enumerate(torch.randint(0, slots + 1, (batch,), generator=gen).tolist()):
        where = torch.randperm(slots, generator=gen)[:count]  # boxes in any slots, padding between them
        targets[i, where, 0] = torch.randint(0, 2, (count,), generator=gen).float()
        targets[i, where, 1:3] = torch.rand(count, 2, generator=gen) * 0.8 + 0.1
        targets[i, where, 3:] = torch.rand(count, 2, generator=gen) * 0.05 + 0.01
    targets[seed % batch] = -1.0  # an image without boxes
    loss = HungarianLoss(num_classes=2)
    expected = _match_per_image(loss, logits, boxes, targets)
    copies = []
    to_host = torch.Tensor.cpu
    monkeypatch.setattr(torch.Tensor, "cpu", lambda self, *a, **k: copies.append(self.shape) or to_host(self, *a, **k))
    image, query, row = loss.match(logits, boxes, targets)
    assert list(zip(image.tolist(), query.tolist(), row.tolist())) == expected and len(expected) >= 5
    assert copies == [torch.Size([batch, queries + 1, slots])]


def test_clahe_is_opencvs_and_spreads_a_low_contrast_image():
    import cv2

    from harness_models.detr import clahe

    rng = np.random.default_rng(0)
    gray = rng.integers(100, 120, size=(64, 80)).astype(np.uint8)
    out = clahe(gray)
    assert np.array_equal(out, cv2.createCLAHE(clipLimit=2.0, tileGridSize=(8, 8)).apply(gray))
    assert out.shape == gray.shape and out.dtype == np.uint8 and out.std() > 2 * gray.std()
    assert np.ptp(out) > 3 * np.ptp(gray)


@pytest.mark.parametrize("angle,line", [(0, "row"), (90, "column"), (45, "diagonal"), (135, "antidiagonal")])
def test_the_motion_blur_kernel_is_a_normalised_line_at_its_angle(angle, line):
    from harness_models.detr import motion_kernel

    kernel = motion_kernel(5, angle)
    assert kernel.shape == (5, 5) and kernel.dtype == np.float32 and float(kernel.sum()) == pytest.approx(1.0)
    rows, cols = np.nonzero(kernel)
    on_line = {"row": rows == 2, "column": cols == 2, "diagonal": rows == cols, "antidiagonal": rows + cols == 4}[line]
    assert on_line.all() and kernel[2, 2] > 0  # through the centre, along its line only
    assert len(rows) == (5 if line in ("row", "column") else 3)  # length 4 (size - 1): 3 pixels on a slant
    assert np.allclose(kernel[rows, cols], 1 / len(rows))  # equal weights


def test_motion_blur_spreads_a_bright_pixel_along_its_line_through_filter2d():
    import cv2

    from harness_models.detr import motion_blur, motion_kernel

    image = np.zeros((15, 15), dtype=np.uint8)
    image[7, 7] = 250
    flat = motion_blur(image, 5, 0)
    assert flat.dtype == np.uint8 and np.array_equal(flat, cv2.filter2D(image, -1, motion_kernel(5, 0)))
    assert flat[7, 5:10].tolist() == [50] * 5 and int(flat.sum()) == 250  # five pixels of the row, nothing else
    tall = motion_blur(image, 5, 90)
    assert tall[5:10, 7].tolist() == [50] * 5 and int(tall.sum()) == 250
    with pytest.raises(ValueError, match=r"motion blur size=4 is not valid: use an odd number of pixels, 3 or more"):
        motion_kernel(4, 0)


def test_opencv_runs_on_the_calling_thread_in_the_loader():
    import cv2

    import harness_models.detr  # noqa: F401  (sets OpenCV's threads on import)

    assert cv2.getNumThreads() == 1  # setNumThreads(0): no pool of OpenCV's own beside the loader's workers


def test_detr_items_hold_tiny_boxes_padded_with_class_minus_one_and_augmentations_switch_off():
    from harness_models.detr import SyntheticDetection

    item, target = SyntheticDetection(patch_size=[64, 96], max_boxes=5)[3]
    assert list(item.shape) == [3, 64, 96] and list(target.shape) == [5, 5]
    boxes = target[target[:, 0] >= 0]
    assert len(boxes) >= 1 and (target[len(boxes):, 0] == -1).all()
    assert ((boxes[:, 3:] > 0) & (boxes[:, 3:] <= 0.06)).all() and ((boxes[:, 1:3] > 0) & (boxes[:, 1:3] < 1)).all()
    items = {(c, b): SyntheticDetection(patch_size=[64, 96], max_boxes=5, clahe=c, motion_blur=b)[3]
             for c in (False, True) for b in (False, True)}
    assert torch.equal(items[True, True][0], item)  # both on by default
    for x, y in items.values():
        assert list(x.shape) == [3, 64, 96] and x.dtype == torch.float32 and torch.equal(y, target)
    pictures = [x for x, _ in items.values()]
    assert all(not torch.equal(a, b) for i, a in enumerate(pictures) for b in pictures[i + 1:])  # each switch acts
    plain, clahe_only = items[False, False][0], items[True, False][0]
    assert float(clahe_only.std()) > float(plain.std())  # CLAHE raised the contrast


def test_detr_items_decode_their_image_from_an_encoded_jpeg_each_time(monkeypatch):
    import cv2

    import harness_models.detr as detr

    data = detr.SyntheticDetection(patch_size=[64, 96], max_boxes=5, num_backgrounds=2)
    assert len(data.encoded) == 2 and all(e.dtype == np.uint8 and e[:2].tolist() == [0xFF, 0xD8] for e in data.encoded)
    calls = []
    real = cv2.imdecode
    monkeypatch.setattr(detr.cv2, "imdecode", lambda buf, flags: calls.append(flags) or real(buf, flags))
    first, again = data[3], data[3]
    assert calls == [cv2.IMREAD_COLOR, cv2.IMREAD_COLOR]  # a three-channel decode per item, never cached
    assert torch.equal(first[0], again[0]) and list(first[0].shape) == [3, 64, 96]


@pytest.mark.parametrize("name,first_loss", [("seresnet_speech", 0.69), ("detr", 10.0)])
def test_the_guide_workloads_train_a_step_at_the_cpu_size(name, first_loss):
    from harness.run.child.measure import model_flops_per_sample
    from harness.workload.data import build_dataset, build_loader
    from harness.workload.knobs import prepare

    cfg = tiny_config(workload=name)
    assert workloads.is_builtin(cfg.workload)
    torch.manual_seed(cfg.seed)
    prep = prepare(cfg, cfg.workload)
    x, y = next(iter(build_loader(cfg, build_dataset(cfg, cfg.workload), cfg.workload)))
    assert list(x.shape[1:]) == cfg.workload.sample_shape("smoke")
    loss = prep.loss_fn(prep.model(x), y)
    loss.backward()
    assert math.isfinite(float(loss.detach())) and float(loss.detach()) == pytest.approx(first_loss, rel=0.5)
    assert (model_flops_per_sample(cfg, cfg.workload) or 0) > 0


def test_dataset_settings_hand_the_patch_size_and_leave_old_hashes_alone():
    spec = workloads.builtin("custom")
    assert "dataset_settings" not in spec.hashed()  # absent, every custom workload hashes as before the field
    cfg = tiny_config(workload="seresnet_speech", data__patch_size=[51])
    from harness.workload.data import build_dataset

    assert list(build_dataset(cfg, cfg.workload)[0][0].shape) == [257, 51]
    bad = config_mod.RunConfig()
    config_mod.set_key(bad, "workload", "seresnet_speech")
    config_mod.set_key(bad, "workload.dataset_settings", {"patch_size": "data.patch"})
    with pytest.raises(ValueError, match=r"data\.patch"):
        config_mod.resolve(bad, cuda_available=False)


def test_detr_validates_on_its_eval_transforms_while_training_keeps_its_augmentation():
    from harness.run.child.measure import validation_loader
    from harness.workload.data import build_dataset

    cfg = tiny_config(workload="detr", val__every_n_steps=5, val__steps=1)
    assert cfg.workload.val_dataset == {"clahe": False, "motion_blur": False}
    train = build_dataset(cfg, cfg.workload).dataset  # Repeat(SyntheticDetection)
    val = validation_loader(cfg, cfg.workload).dataset.dataset
    assert (train.clahe, train.motion_blur) == (True, True) and (val.clahe, val.motion_blur) == (False, False)
    assert cfg.workload.dataset["clahe"] is True  # the training spec is left as it was
    assert (val.size, val.max_boxes, val.num_classes) == (train.size, train.max_boxes, train.num_classes) == \
        ((64, 64), 20, 2)
    off = tiny_config(workload="detr", workload__dataset__clahe=False)  # a rung's switch leaves validation as it is
    assert build_dataset(off, off.workload).dataset.clahe is False
    assert validation_loader(off, off.workload).dataset.dataset.motion_blur is False
    assert workloads.builtin("resnet50").for_validation() == workloads.builtin("resnet50")  # nothing to change


@pytest.mark.parametrize("workload,val_dataset,message", [
    ("detr", {"clahee": False}, r"unknown workload\.val_dataset key \(an argument workload\.dataset sets\) 'clahee'\. "
     r"Did you mean 'clahe'\? Valid choices: clahe, max_boxes, motion_blur, num_classes"),
    ("resnet50", {"clahe": False}, r"workload\.val_dataset=\{'clahe': False\} changes the arguments of "
     r"workload\.dataset, but workload 'resnet50' has none"),
])
def test_a_bad_val_dataset_is_refused_by_name_before_anything_runs(workload, val_dataset, message):
    bad = config_mod.RunConfig()
    config_mod.set_key(bad, "workload", workload)
    config_mod.set_key(bad, "workload.val_dataset", val_dataset)
    with pytest.raises(ValueError, match=message):
        config_mod.resolve(bad, cuda_available=False)


def test_val_dataset_leaves_old_hashes_alone():
    assert "val_dataset" not in workloads.builtin("custom").hashed()
    assert workloads.builtin("detr").hashed()["val_dataset"] == {"clahe": False, "motion_blur": False}


@pytest.mark.slow
@pytest.mark.parametrize("ladder,footer", [("detr_guide", "Total: measured")])  # seresnet: test_guide_sweeps.py
def test_the_guide_workloads_climb_their_ladders_at_the_cpu_size(ladder, footer, results):
    from harness.store import load_runs

    out = harness_cli("sweep", f"+ladder={ladder}", "measure.steps=3", "measure.warmup_steps=1", "sweep.repeats=1",
                      "sweep.remeasure_busy=false", f"results_dir={results}")
    assert out.returncode == 0, out.stdout + out.stderr
    frame = load_runs(results)
    assert set(frame["status"]) <= {"ok", "skipped"} and (frame["status"] == "ok").sum() >= 5
    assert footer in out.stdout  # the guide's total claim (the SEResNet guide's is a group of its rungs)


@pytest.mark.parametrize("persistent,val_workers,expected", [(True, 2, True), (True, 0, False), (False, 2, False)])
def test_the_validation_loader_is_persistent_when_training_workers_are(persistent, val_workers, expected):
    """The SEResNet speech guide makes "all DataLoader instantiations" persistent: the evaluation loader's workers
    then live from one pass to the next (a loader with no workers has none to keep)."""
    from harness.run.child.measure import validation_loader

    cfg = tiny_config(val__every_n_steps=5, val__steps=1, val__num_workers=val_workers,
                      data__num_workers=1, data__persistent_workers=persistent)
    assert validation_loader(cfg, cfg.workload).persistent_workers is expected


def test_the_connectomics_cached_loaders_stand_in_crops_views_of_preloaded_volumes_and_keeps_uint8_labels():
    """The framework's CachedVolumeDataset as a workload's own dataset: a unet3d run with
    workload.dataset._target_=harness_models.segmentation3d.CachedVolumeCrops reads dict batches of float32 images
    and uint8 labels (measure.mode=loader compares it with the harness's own in-RAM crops)."""
    from harness.workload.build import build_user_dataset
    from harness.workload.data import build_loader
    from harness_models.segmentation3d import CachedVolumeCrops

    data = CachedVolumeCrops(patch_size=(16, 24, 32), length=5, num_volumes=2)
    item = data[0]
    assert item["image"].shape == item["label"].shape == (1, 16, 24, 32) and item["label"].dtype == np.uint8
    assert item["image"].base is not None  # a view of the preloaded volume, not a copy
    assert data.images[0].shape == (1, 24, 36, 48) and len(data) == 5
    cfg = tiny_config(workload="unet3d", workload__dataset={
        "_target_": "harness_models.segmentation3d.CachedVolumeCrops", "_partial_": True, "patch_size": [16, 16, 16]})
    batch = next(iter(build_loader(cfg, build_user_dataset(cfg.workload, cfg))))
    assert batch["image"].dtype == torch.float32 and batch["label"].dtype == torch.uint8
    assert list(batch["image"].shape) == [cfg.batch_size, 1, 16, 16, 16]
