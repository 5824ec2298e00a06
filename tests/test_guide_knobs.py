"""Knobs the guides name: cudnn_deterministic, float32_matmul_precision, memory cleanup and visualisation writes
every N steps. Each validated with the bad value and the valid choices, hashed only when set, acting only when set."""

from __future__ import annotations

import json

import pytest
import torch

from harness import config as config_mod
from harness.workload import applicability
from tests.conftest import (TINY_MODEL_ARGS, harness_cli, in_process, once_per_run, shared_folder, tiny_config,
                            tiny_model_config)

NEW_KEYS = {"cudnn_deterministic": True, "model.depth": 4, "cpus": 1, "data.read_latency_ms": 5.0,
            "val.every_n_steps": 10, "float32_matmul_precision": "medium", "memory_cleanup_every_n_steps": 30,
            "visualize_every_n_steps": 100, "model.features": [32, 64, 128, 256, 512, 32]}


@pytest.mark.parametrize("key,value", NEW_KEYS.items())
def test_a_new_knob_at_its_default_keeps_every_hash_and_set_changes_it(key, value):
    plain = tiny_config()
    default = tiny_config(**{key.replace(".", "__"): config_mod.get_key(config_mod.RunConfig(), key)})
    assert config_mod.config_hash(default) == config_mod.config_hash(plain)
    assert key not in config_mod.measured_settings(plain)
    changed = config_mod.RunConfig()
    config_mod.set_key(changed, key, value)
    for k, v in {"measure.steps": 3, "measure.warmup_steps": 1}.items():
        config_mod.set_key(changed, k, v)
    assert config_mod.measured_settings(config_mod.resolve(changed, cuda_available=False))[key] == value


@pytest.mark.parametrize("overrides,message", [
    ({"float32_matmul_precision": "low"},
     r"unknown float32_matmul_precision 'low'.*Valid choices: high, highest, medium"),
    ({"float32_matmul_precision": "high", "tf32": True},
     r"float32_matmul_precision=high and tf32=true both set the matmul precision: choose one"),
    ({"memory_cleanup_every_n_steps": -1}, r"memory_cleanup_every_n_steps=-1 must be 0 \(never\) or a positive"),
    ({"visualize_every_n_steps": -5}, r"visualize_every_n_steps=-5 must be 0 \(never\) or a positive"),
])
def test_bad_values_name_themselves_and_the_valid_choices(overrides, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(**overrides)


def test_cudnn_deterministic_on_a_cpu_is_skipped_with_the_reason():
    assert applicability.not_applicable(tiny_config(cudnn_deterministic=True)) == (
        "cudnn_deterministic=true needs a CUDA GPU (it picks cuDNN's deterministic kernels)")
    assert applicability.not_applicable(tiny_config()) == ""


def test_backend_flags_set_and_report_the_matmul_precision_and_determinism():
    from harness.workload import knobs

    before = (torch.get_float32_matmul_precision(), torch.backends.cudnn.deterministic)
    try:
        cfg = tiny_config(float32_matmul_precision="medium")
        cfg.cudnn_deterministic = True  # as resolved on a GPU
        flags = knobs.apply_backend_flags(cfg)
        assert flags["float32_matmul_precision"] == "medium" == torch.get_float32_matmul_precision()
        assert flags["cudnn.deterministic"] is True and torch.backends.cudnn.deterministic is True
        assert "float32_matmul_precision" not in knobs.apply_backend_flags(tiny_config())
    finally:
        torch.set_float32_matmul_precision(before[0])
        torch.backends.cudnn.deterministic = before[1]


def test_periodic_work_is_nothing_unless_asked_and_acts_every_n_steps(monkeypatch):
    from harness.workload import knobs

    assert knobs.periodic_work(tiny_config(), torch.device("cpu")) is None
    collected = []
    monkeypatch.setattr(knobs.gc, "collect", lambda: collected.append(1))
    after = knobs.periodic_work(tiny_config(memory_cleanup_every_n_steps=3, visualize_every_n_steps=2),
                                torch.device("cpu"))
    written = []
    monkeypatch.setattr(knobs.torch, "save", lambda obj, path: written.append((path.name, obj["output"].shape)))
    for step in range(6):
        after(step, torch.ones(2, 1, 4, 4), torch.zeros(2, 3, 4, 4))
    assert len(collected) == 2  # steps 2 and 5
    assert written == [("step000001.pt", (3, 4, 4)), ("step000003.pt", (3, 4, 4)), ("step000005.pt", (3, 4, 4))]
    folder = after.folder
    assert folder.is_dir() and folder.name.startswith("harness-visualize-")
    knobs.end_periodic_work(after)  # what the loop does when it lets go: the writes go with it
    assert not folder.exists() and after.folder is None
    knobs.end_periodic_work(after)


@pytest.fixture(scope="module")
def periodic_run(tmp_path_factory):
    """ONE run of the tiny model with every periodic knob on (memory cleanup and a visualisation write every step, a
    validation pass every 2), its output and its record: each knob's test reads it."""
    from harness.store import load_runs

    results = shared_folder(tmp_path_factory, "periodic") / "results"

    def run() -> None:
        tmp = tmp_path_factory.mktemp("periodic-tmp")
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("TMPDIR", str(tmp))  # the command's temporary folders, its visualisation writes among them
            out = harness_cli("run", *TINY_MODEL_ARGS, "memory_cleanup_every_n_steps=1", "visualize_every_n_steps=1",
                              "float32_matmul_precision=high", "val.every_n_steps=2", "val.steps=1",
                              "val.inference_mode=true", "measure.steps=2", "measure.warmup_steps=1",
                              f"results_dir={results}")
        assert out.returncode == 0, out.stdout + out.stderr
        # the run's writes went with it (it ends with os._exit: an atexit removal never ran, and each run left its
        # folder)
        assert sorted(p.name for p in tmp.iterdir() if p.name.startswith("harness-")) == []

    once_per_run(tmp_path_factory, "periodic", run)
    return load_runs(results).iloc[0]


def test_a_run_with_cleanup_and_visualisation_every_step_is_measured(periodic_run):
    record = periodic_run
    assert record["status"] == "ok" and '"float32_matmul_precision": "high"' in record["backend_flags"]
    settings = json.loads(record["config_json"])
    assert (settings["memory_cleanup_every_n_steps"], settings["visualize_every_n_steps"]) == (1, 1)


def test_a_bad_value_on_the_command_line_exits_2_without_a_traceback(results, capfd):
    out = in_process(capfd, "run", "float32_matmul_precision=fast", f"results_dir={results}")
    said = " ".join((out.stdout + out.stderr).split())  # the console may wrap the line
    assert out.returncode == 2 and "Traceback" not in said
    assert "unknown float32_matmul_precision 'fast'. Valid choices: high, highest, medium" in said


def test_unet_depth_removes_the_deepest_levels_and_other_models_skip_it():
    from harness_models.segmentation3d import unet3d

    def channels(net):
        return [m.out_channels for m in net.modules() if isinstance(m, torch.nn.Conv3d)]

    assert max(channels(unet3d(1, 2, depth=4))) == 256 and max(channels(unet3d(1, 2))) == 512
    cfg = tiny_config(model__depth=4)
    assert config_mod.measured_settings(cfg)["model.depth"] == 4 and applicability.not_applicable(cfg) == ""
    assert applicability.not_applicable(tiny_config(workload="resnet50", model__depth=4)).startswith(
        "model.depth=4 needs a model that takes a depth: workload 'resnet50'")
    with pytest.raises(ValueError, match=r"model.depth=7 is not valid: a UNet of 2 to 5 levels"):
        tiny_config(model__depth=7)


def test_basic_unet_features_are_the_connectomics_filters_scaled_by_width_and_other_models_skip_them():
    from harness.workload.build import build_model

    def channels(net):
        return [m.out_channels for m in net.modules() if isinstance(m, torch.nn.Conv3d)]

    filters = [32, 64, 128, 256, 512, 32]
    cfg = tiny_config(workload="basic_unet3d", model__features=filters, model__width=0.5)
    assert applicability.not_applicable(cfg) == "" and config_mod.measured_settings(cfg)["model.features"] == filters
    width = cfg.model.width * cfg.workload.sizes[cfg.size].width  # the size preset's width times model.width
    assert max(channels(build_model(cfg))) == max(4, int(round(512 * width / 4)) * 4)
    assert max(channels(build_model(tiny_config(workload="basic_unet3d", model__width=0.5)))) == \
        max(4, int(round(256 * width / 4)) * 4)  # MONAI's own features without the setting
    assert applicability.not_applicable(tiny_config(model__features=filters)).startswith(
        "model.features=[32, 64, 128, 256, 512, 32] needs a model that takes features: workload 'unet3d'")
    with pytest.raises(ValueError, match=r"model.features=\[32, 64\] is not valid: BasicUNet takes six positive"):
        tiny_config(workload="basic_unet3d", model__features=[32, 64])


def test_storage_cost_waits_per_item_and_drops_the_items_files_from_the_page_cache(tmp_path, monkeypatch):
    import os
    import time

    from harness.workload import data

    files = []
    for i in range(2):
        (tmp_path / f"{i}.bin").write_bytes(b"x" * 4096)
        files.append([str(tmp_path / f"{i}.bin")])
    dropped = []
    monkeypatch.setattr(os, "posix_fadvise",
                        lambda fd, off, n, advice: dropped.append((os.readlink(f"/proc/self/fd/{fd}"), advice)))
    cost = data.StorageCost(list(range(5)), 0.02, files)
    start = time.monotonic()
    assert [cost[i] for i in range(3)] == [0, 1, 2] and len(cost) == 5
    assert time.monotonic() - start >= 3 * 0.02  # a lower bound: sleeps never end early
    assert dropped == [(files[0][0], os.POSIX_FADV_DONTNEED), (files[1][0], os.POSIX_FADV_DONTNEED),
                       (files[0][0], os.POSIX_FADV_DONTNEED)]


def test_storage_cost_is_only_built_when_asked_and_page_cache_drop_needs_per_item_reads():
    from harness.workload.data import StorageCost, build_dataset

    assert not isinstance(build_dataset(tiny_config(), tiny_config().workload), StorageCost)
    cfg = tiny_config(data__read_latency_ms=1.5)
    assert isinstance(build_dataset(cfg, cfg.workload), StorageCost)
    with pytest.raises(ValueError, match=r"data.page_cache=drop needs files read per item: data.source=disk "
                                         r"data.cache=none \(now data.source=synthetic data.cache=ram\)"):
        tiny_config(data__page_cache="drop")
    with pytest.raises(ValueError, match=r"unknown data.page_cache 'flush'.*Valid choices: drop, keep"):
        tiny_config(data__page_cache="flush")
    with pytest.raises(ValueError, match=r"data.read_latency_ms=-1.0 must be 0 or more"):
        tiny_config(data__read_latency_ms=-1.0)
    cfg = tiny_config(data__source="disk", data__cache="none", data__page_cache="drop")
    assert config_mod.measured_settings(cfg)["data.page_cache"] == "drop"


def test_validation_runs_in_the_warm_up_and_every_n_steps_and_needs_a_frequency():
    from harness.workload import knobs

    passes = []
    after = knobs.periodic_work(tiny_config(val__every_n_steps=3), torch.device("cpu"), lambda: passes.append(1))
    for step in range(9):
        after(step, torch.ones(1), None)
    assert len(passes) == 4  # steps 0 (warm-up: a compiled model's eval graph), 2, 5, 8
    with pytest.raises(ValueError, match=r"val.inference_mode=True sets up a validation loop that never runs: add "
                                         r"val.every_n_steps=N"):
        tiny_config(val__inference_mode=True)
    with pytest.raises(ValueError, match=r"val.steps=0 must be 1 or more"):
        tiny_config(val__every_n_steps=2, val__steps=0)


def test_a_validation_pass_runs_eval_mode_under_inference_mode_and_returns_to_training():
    from harness.workload import knobs
    from harness.workload.data import build_dataset, build_loader

    cfg = tiny_model_config(val__every_n_steps=1, val__steps=2, val__inference_mode=True)  # the modes: any model
    prep = knobs.prepare(cfg, cfg.workload)
    seen = []
    prep.model.register_forward_hook(lambda m, i, o: seen.append((m.training, torch.is_inference_mode_enabled())))
    knobs.validation_pass(cfg, prep, build_loader(cfg, build_dataset(cfg, cfg.workload), cfg.workload))()
    assert seen == [(False, True), (False, True)] and prep.model.training


def test_a_run_with_a_validation_loop_is_measured(periodic_run):
    # the run's loop with a validation pass in it is tested here (in the shared run), the pass itself above
    val = json.loads(periodic_run["config_json"])["val"]
    assert periodic_run["status"] == "ok"
    assert (val["every_n_steps"], val["steps"], val["inference_mode"]) == (2, 1, True)


def test_cpus_pins_the_process_to_its_first_n_cpus_and_more_than_there_are_is_skipped():
    import os

    from harness.workload import knobs

    allowed, threads = os.sched_getaffinity(0), torch.get_num_threads()
    try:
        assert knobs.apply_cpu_affinity(None) is None and os.sched_getaffinity(0) == allowed
        assert knobs.apply_cpu_affinity(1) == [min(allowed)] and os.sched_getaffinity(0) == {min(allowed)}
        assert torch.get_num_threads() == 1
    finally:
        os.sched_setaffinity(0, allowed)
        torch.set_num_threads(threads)
    too_many = len(allowed) + 1
    assert applicability.not_applicable(tiny_config(cpus=too_many)) == (
        f"cpus={too_many} is more than the {len(allowed)} CPUs this process may use")
    assert applicability.not_applicable(tiny_config(cpus=1)) == ""
    with pytest.raises(ValueError, match=r"cpus=0 must be a positive number"):
        tiny_config(cpus=0)


def test_each_rank_of_a_multi_device_run_gets_cpus_of_its_own():
    import os

    from harness.workload import knobs

    allowed, threads = os.sched_getaffinity(0), torch.get_num_threads()
    if len(allowed) < 2:
        pytest.skip("needs 2 usable CPUs")
    try:
        first, second = sorted(allowed)[:2]
        assert knobs.apply_cpu_affinity(1, rank=1) == [second] and os.sched_getaffinity(0) == {second}
        os.sched_setaffinity(0, allowed)
        assert knobs.apply_cpu_affinity(1, rank=0) == [first]
    finally:
        os.sched_setaffinity(0, allowed)
        torch.set_num_threads(threads)
    n = len(allowed)
    assert applicability.not_applicable(tiny_config(cpus=n, devices=2)) == (
        f"cpus={n} for each of devices=2 ranks ({2 * n} CPUs) is more than the {n} CPUs this process may use")
    assert "cpus=" not in applicability.not_applicable(tiny_config(cpus=n // 2, devices=2))
