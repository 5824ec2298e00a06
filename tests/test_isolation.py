"""Each run executes in a fresh child; every way it can end becomes a stored record."""

import pytest

from harness.run import runner
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
