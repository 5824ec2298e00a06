"""Each run executes in a fresh child; every way it can end becomes a stored record."""

import json
import os
import time

import pytest

from harness import config as config_mod
from harness.run import isolate, monitor, runner
from harness.store import load_runs
from tests.conftest import tiny_config


def _run(results, **overrides):
    cfg = tiny_config(results_dir=str(results), **overrides)
    env, key = runner.environment(cfg.device)
    return runner.run_and_store(cfg, env, key)


@pytest.mark.parametrize("fault,status,message", [
    ("oom", "oom", "can't allocate memory"),
    ("nan", "nan", "loss became nan"),
    ("crash", "error", "killed by signal SIGKILL"),
])
def test_each_fault_leaves_a_record_with_its_status(results, fault, status, message):
    record = _run(results, debug__fault=fault, debug__fault_step=1)
    assert record.status == status
    assert message in record.error
    stored = load_runs(results)
    assert list(stored["status"]) == [status] and stored["samples_per_s"].isna().all()


def test_a_hang_ends_as_timeout_and_the_child_is_killed(results):
    record = _run(results, debug__fault="hang", timeout_s=12)
    assert record.status == "timeout"
    assert "timeout_s=12" in record.error


def test_a_knob_that_cannot_apply_is_skipped_with_its_reason(results):
    record = _run(results, tf32=True)
    assert record.status == "skipped"
    assert "tf32=true needs a CUDA GPU" in record.error


@pytest.mark.parametrize("workload", ["unet3d", "basic_unet3d", "mednext", "resnet50"])
def test_every_workload_runs_at_smoke_size(results, workload):
    record = _run(results, workload=workload)
    assert record.status == "ok", record.error
    assert record.samples_per_s > 0 and record.flops_per_sample > 0
    assert len(record.step_ms) == 3 and record.warmup_steps == 1
    assert record.unit == ("images" if workload == "resnet50" else "voxels")
    assert record.torch_version and record.cpu_count and record.config_hash


def _child_run(tmp_path, **overrides):
    """One real measuring child, as ``execute`` starts it, returning everything the child and parent measured."""
    cfg = tiny_config(**overrides)
    job = tmp_path / "job"
    job.mkdir()
    (job / "parent.pid").write_text(str(os.getpid()))
    (job / "config.json").write_text(json.dumps(config_mod.to_dict(cfg)))
    (job / "env.json").write_text("{}")
    status, error, metrics = isolate._run_child(job, cfg.timeout_s, None, cfg.measure.sample_interval_s)
    assert status == "ok", error
    return metrics


def test_the_measuring_process_runs_no_other_python_thread(tmp_path):
    # no sampler thread in the measured process: the parent samples it from outside
    started = time.time()
    metrics = _child_run(tmp_path, data__num_workers=0)
    assert metrics["python_threads_in_window"] == 1
    # the child's window, placed in time (UNIX seconds), lies inside the parent's wait for it
    assert started < metrics["window_start_unix"] < metrics["window_start_unix"] + metrics["measured_s"] < time.time()
    assert metrics["peak_main_rss_bytes"] > 50e6 and metrics["peak_host_rss_bytes"] >= metrics["peak_main_rss_bytes"]
    assert metrics["worker_rss_bytes"] == [] and metrics["peak_worker_rss_bytes"] is None
    assert metrics["gpu_util_pct"] is None and metrics["gpu_sample_note"] == ""


def test_the_parent_samples_the_loader_workers_memory(tmp_path):
    # 300 ms per step keeps the worker alive for >= 1.2 s, a dozen of the parent's 0.1 s samples, on any machine
    metrics = _child_run(tmp_path, data__num_workers=1, data__persistent_workers=True, debug__slowdown_ms=300.0,
                         measure__sample_interval_s=0.1)
    assert len(metrics["worker_rss_bytes"]) >= 1 and metrics["peak_worker_rss_bytes"] > 10e6
    # the host peak holds the main process and its worker together; it cannot always exceed the main process's
    # exact peak from the kernel (that peak may come while the model is built, before any worker starts), but it
    # is never below either
    assert metrics["peak_host_rss_bytes"] >= max(metrics["peak_main_rss_bytes"], metrics["peak_worker_rss_bytes"])
    # what the harness itself spent in the window: the parent's CPU, sampling ten times a second, a small share
    assert metrics["parent_cpu_pct"] is not None and 0.0 <= metrics["parent_cpu_pct"] < 25.0


def test_the_parent_keeps_gpu_samples_only_between_the_window_markers(tmp_path, monkeypatch):
    from tests.test_monitor import FakeNvml

    nvml = FakeNvml()
    monkeypatch.setattr(monitor, "nvml_handle_for", lambda identity: monitor.GpuHandle(identity["uuid"], how="uuid"))
    watch = isolate._Watch(monitor.Sampler(os.getpid(), nvml=nvml), 0.5)
    path = tmp_path / "progress.json"
    for phase, extra in [("build", {}), ("warmup", {"gpu": {"uuid": "GPU-1"}}), ("measure", {}), ("measured", {})]:
        path.write_text(json.dumps({"phase": phase, **extra}))
        assert watch.read_progress(path)["phase"] == phase
        watch.sample_if_due(now=1e9 if phase == "measure" else 0.0)  # the window's first poll samples at once
    assert watch.gpu_named and watch.sampler.gpu.handle == "GPU-1" and not watch.sampler.measuring
    assert watch.sampler.samples.gpu_util_pct == [87.0]  # one sample, the one inside the window
