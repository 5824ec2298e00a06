"""GPU tier (`python -m pytest -m gpu` on a CUDA machine): what only a GPU shows."""

import pytest
import torch

from harness import runner
from harness.store import load_runs
from tests.conftest import tiny_config

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _run(results, **overrides):
    from harness import config as config_mod

    cfg = config_mod.RunConfig(results_dir=str(results))
    for key, value in {"measure.steps": 10, "measure.warmup_steps": 3, **{k.replace("__", "."): v for k, v in overrides.items()}}.items():
        config_mod.set_key(cfg, key, value)
    resolved = config_mod.resolve(cfg, cuda_available=True)
    env, key = runner.environment(resolved.device)
    return runner.run_and_store(resolved, env, key)


def test_full_size_unet_reports_vram_utilisation_and_mfu(tmp_path):
    record = _run(tmp_path, precision="bf16-mixed")
    assert record.status == "ok", record.error
    assert record.size == "full" and record.device == "cuda"
    assert record.peak_vram_bytes > 1e9 and record.gpu_util_pct is not None
    assert record.gpu_name and record.cuda_version
    if record.peak_flops:
        assert 0 < record.mfu < 1


def test_gpu_only_knobs_apply_on_a_gpu(tmp_path):
    record = _run(tmp_path, tf32=True, cudnn_benchmark=True, data__pin_memory=True, data__num_workers=2)
    assert record.status == "ok", record.error
    assert list(load_runs(tmp_path)["status"]) == ["ok"]


def test_cuda_oom_fault_is_a_real_out_of_memory(tmp_path):
    record = _run(tmp_path, debug__fault="oom", debug__fault_step=0)
    assert record.status == "oom" and "OutOfMemoryError" in record.error


def test_cpu_helpers_still_resolve_on_a_gpu_machine():
    assert tiny_config().device == "cpu"
