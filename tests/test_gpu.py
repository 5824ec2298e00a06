"""GPU tier (`python -m pytest -m gpu` on a CUDA machine): what only a GPU shows.

Each check is one the CPU tier cannot make: memory as the device sees it, processes as NVML lists them, the
peak table against this GPU's real name, and knob combinations that only fail on CUDA.
"""

import json
import os
import subprocess
import sys
import time

import pytest
import torch

from harness.run.parent import runner
from harness.run.parent import env as env_mod
from harness.workload.flops import peak_flops, peak_row
from harness.store import load_runs
from tests.conftest import REPO, tiny_config

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _run(results, **overrides):
    from harness import config as config_mod

    cfg = config_mod.RunConfig(results_dir=str(results))
    settings = {"measure.steps": 10, "measure.warmup_steps": 3, "timeout_s": 300,
                **{k.replace("__", "."): v for k, v in overrides.items()}}
    for key, value in settings.items():
        config_mod.set_key(cfg, key, value)
    resolved = config_mod.resolve(cfg, cuda_available=True)
    env, key = env_mod.environment(resolved.device)
    return runner.run_and_store(resolved, env, key)


def _nvml():
    """pynvml, initialised. NVML creates no CUDA context, so asking it leaves the asking process off the GPU."""
    pynvml = pytest.importorskip("pynvml")
    pynvml.nvmlInit()
    return pynvml


def _gpu_pids(pynvml) -> set[int]:
    """Processes with a context on any GPU of the machine."""
    pids = set()
    for i in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(i)
        for procs in (pynvml.nvmlDeviceGetComputeRunningProcesses(handle),
                      pynvml.nvmlDeviceGetGraphicsRunningProcesses(handle)):
            pids |= {p.pid for p in procs}
    return pids


def _gpu_used(pynvml) -> int:
    return sum(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).used
               for i in range(pynvml.nvmlDeviceGetCount()))


@pytest.fixture(scope="module")
def bf16_record(tmp_path_factory):
    """One full-size 3D UNet run in bf16, shared by the checks that read a real GPU record. Its window spans
    several of the parent's NVML samples (measure.sample_interval_s, 0.5 s): 10 steps of ~33 ms on an H100 took
    none, and the record said so instead of a device-wide memory figure."""
    return _run(tmp_path_factory.mktemp("bf16"), precision="bf16-mixed", size="full", measure__steps=60)


def test_full_size_unet_reports_vram_utilisation_and_mfu(bf16_record):
    record = bf16_record
    assert record.status == "ok", record.error
    assert record.size == "full" and record.device == "cuda"
    assert record.peak_vram_bytes > 1e9 and record.gpu_util_pct is not None
    assert record.gpu_name and record.cuda_version
    # every NVML metric was readable (GPM only exists on Hopper and newer)
    assert all("GPM" in note for note in record.gpu_sample_note.split("; ") if note), record.gpu_sample_note
    assert record.flops_per_sample, "FLOPs of the UNet could not be counted"


def test_cuda_events_time_every_measured_step_without_a_sync_in_the_window(bf16_record):
    record = bf16_record
    assert record.status == "ok", record.error
    assert len(record.device_step_ms) == record.measured_steps
    assert all(ms > 0 for ms in record.device_step_ms)
    # the device's time for a step cannot exceed the host's time for the whole window
    assert 0 < record.device_step_frac <= 1.02, record.device_step_frac
    assert record.device_step_ms_p50 <= record.step_ms_p90 * 1.05


def test_nvml_clocks_and_gpm_sm_activity_are_recorded(bf16_record):
    record = bf16_record
    assert record.status == "ok", record.error
    assert record.gpu_sm_clock_mhz is not None and 100 < record.gpu_sm_clock_mhz < 5000
    assert isinstance(record.gpu_throttle_reasons, str)  # "" or named reasons, never a raw number alone
    pynvml = _nvml()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    try:
        gpm = bool(pynvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
    except pynvml.NVMLError:
        gpm = False
    if gpm:
        assert record.gpu_sm_active_pct is not None and 0 < record.gpu_sm_active_pct <= 100, record.gpu_sample_note
    else:
        assert record.gpu_sm_active_pct is None and "GPM" in record.gpu_sample_note


def test_memory_nests_allocated_reserved_device_used_capacity(bf16_record):
    record = bf16_record
    assert record.status == "ok", record.error
    # live tensors <= the allocator's cache <= what NVML sees used on the device (+ contexts) <= its capacity
    assert 0 < record.peak_vram_bytes <= record.peak_vram_reserved_bytes
    assert record.gpu_mem_used_bytes is not None, "NVML took no memory sample in the measured window"
    assert record.peak_vram_reserved_bytes <= record.gpu_mem_used_bytes <= record.gpu_mem_total_bytes
    # the warm-up (cuDNN benchmark trials) is kept apart from the measured window's peak
    assert record.warmup_peak_vram_bytes is not None and record.warmup_peak_vram_reserved_bytes is not None
    assert record.warmup_peak_vram_reserved_bytes <= record.gpu_mem_total_bytes
    # the caching allocator's own counters, beside the peaks (a run that fits without pressure: no OOM survived)
    assert record.cuda_alloc_retries is not None and record.cuda_ooms == 0
    # outside the allocator at the window's end: the CUDA context and the libraries' handles (0.6-1.2 GiB on an
    # H100); no cap, so no cuDNN workspace cap either
    assert record.cuda_outside_allocator_bytes is not None and 2**28 <= record.cuda_outside_allocator_bytes <= 2**32
    assert record.cudnn_workspace_cap_mib is None


def test_the_context_is_made_beside_the_imports_and_waited_for_apart(bf16_record):
    record = bf16_record
    assert record.status == "ok", record.error
    assert record.phase_context_thread_s is not None and record.phase_context_s is not None
    assert record.phase_context_thread_s > 0 and record.phase_context_s <= record.phase_model_s


def test_a_run_over_memory_limit_gb_ends_oom_with_its_record_stored(tmp_path):
    # the full-size UNet at batch 8 in fp32 holds several GiB of activations: 1 GiB cannot hold it
    record = _run(tmp_path, size="full", batch_size=8, memory__limit_gb=1.0)
    assert record.status == "oom", (record.status, record.error[-500:])
    stored = load_runs(tmp_path)
    assert list(stored["status"]) == ["oom"] and list(stored["memory_limit_gb"]) == [1.0]


def test_a_run_under_memory_limit_gb_holds_no_more_than_the_limit(tmp_path):
    # the smoke-size UNet needs far less (on a GPU the size defaults to full: 2.14 GiB allocated at batch 4)
    record = _run(tmp_path, size="smoke", memory__limit_gb=2.0)
    assert record.status == "ok", record.error
    assert record.memory_limit_gb == 2.0 and 0 < record.peak_vram_reserved_bytes <= 2 * 2**30
    assert record.cudnn_workspace_cap_mib == 512  # a quarter of the cap, in the run's environment


def test_peak_table_knows_this_gpu_by_its_real_nvml_name(bf16_record):
    pynvml = _nvml()
    name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
    name = name.decode() if isinstance(name, bytes) else name
    assert peak_row(name) is not None and peak_row(name)[0] is not None, \
        f"{name!r} has no row in harness/flops.py PEAK_FLOPS: add its datasheet peaks"
    record = bf16_record
    assert record.status == "ok", record.error
    assert peak_flops(record.gpu_name, "bf16-mixed", None) == peak_flops(name, "bf16-mixed", None)
    assert record.mfu is not None, f"no MFU: flops={record.flops_per_sample} peak={record.peak_flops}"
    assert 0 < record.mfu < 1


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_cuda_graph_compile_with_accumulation_is_skipped_with_the_reason(tmp_path, mode):
    record = _run(tmp_path, compile=mode, accumulate_grad_batches=2)
    assert record.status == "skipped"
    assert f"compile={mode} captures CUDA graphs" in record.error and "accumulate_grad_batches=2" in record.error


@pytest.mark.slow
def test_cuda_graph_compile_runs_with_the_step_marker(tmp_path):
    record = _run(tmp_path, workload="resnet50", size="smoke", compile="reduce-overhead", timeout_s=500)
    assert record.status == "ok", record.error
    assert record.loss_last is not None and record.loss_last == record.loss_last  # finite, not NaN
    # Inductor's count of CUDA graphs it did not capture is read (0 when every graph was captured); a count
    # above 0 is said in the table as "no CUDA graphs"
    assert isinstance(record.cudagraph_skips, int) and record.cudagraph_skips >= 0


def test_a_profiled_cuda_run_breaks_the_device_time_down_after_the_window(tmp_path):
    from harness.profiles import summary_from_json

    record = _run(tmp_path, workload="resnet50", size="smoke", profile__enabled=True, profile__steps=3)
    assert record.status == "ok", record.error
    summary = summary_from_json(record.profile_json)
    assert summary.error == "" and summary.device == "cuda" and summary.steps == 3
    # the device's view: kernel time by the phase that launched it, and the time no kernel ran
    assert set(summary.device_ms) == {"forward", "backward", "optimizer", "other", "idle"}
    assert summary.device_ms["forward"] > 0 and summary.device_ms["backward"] > 0 and summary.top_device
    assert record.profile_trace and (tmp_path / record.profile_trace).is_file()
    # the measurement itself kept its GPU samples, from inside its window only
    assert record.gpu_mem_used_bytes is not None or "no GPU sample inside" in record.gpu_sample_note
    assert record.cudagraph_skips is None  # no CUDA-graph mode asked for


def test_fp16_with_a_fused_optimizer_runs(tmp_path):
    record = _run(tmp_path, precision="16-mixed", optimizer__fused=True)
    assert record.status == "ok", record.error
    assert record.loss_first is not None and record.loss_last is not None


def test_tf32_flags_are_set_and_recorded(tmp_path):
    record = _run(tmp_path, tf32=False, cudnn_benchmark=True, data__pin_memory=True, data__num_workers=2)
    assert record.status == "ok", record.error
    flags = json.loads(record.backend_flags)
    assert flags["tf32"] is False and flags["cudnn.benchmark"] is True
    assert "ieee" in flags.values() or flags.get("cudnn.allow_tf32") is False
    assert list(load_runs(tmp_path)["status"]) == ["ok"]


def test_cuda_oom_fault_is_a_real_out_of_memory(tmp_path):
    record = _run(tmp_path, debug__fault="oom", debug__fault_step=0)
    assert record.status == "oom" and "OutOfMemoryError" in record.error


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
def test_hang_is_killed_and_the_gpu_is_given_back(tmp_path, workers):
    pynvml = _nvml()
    before_used, before_pids = _gpu_used(pynvml), _gpu_pids(pynvml)
    record = _run(tmp_path, debug__fault="hang", debug__fault_step=2, timeout_s=60, data__num_workers=workers)
    assert record.status == "timeout", record.error
    deadline, used, left = time.monotonic() + 30, None, None
    while time.monotonic() < deadline:
        used, left = _gpu_used(pynvml), _gpu_pids(pynvml) - before_pids
        if not left and used <= before_used + 64 * 2**20:
            break
        time.sleep(0.5)
    assert not left, f"processes still on the GPU after the timeout: {sorted(left)}"
    assert used <= before_used + 64 * 2**20, f"GPU memory {used} not back to {before_used}"


def test_the_parent_creates_no_cuda_context():
    """A fresh parent process runs one measured run; NVML must not list it, only its (finished) child."""
    code = (
        "import os, tempfile\n"
        "from tests.test_gpu import _run, _nvml, _gpu_pids\n"
        "record = _run(tempfile.mkdtemp(), measure__steps=3, measure__warmup_steps=1)\n"
        "print('STATUS', record.status, 'PARENT_ON_GPU', os.getpid() in _gpu_pids(_nvml()))\n"
    )
    # the NVML-based availability check: the skipif of this module must not itself create a context
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)  # keep carried packages
    env = dict(os.environ, PYTHONPATH=path, PYTORCH_NVML_BASED_CUDA_CHECK="1")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=500)
    assert "STATUS ok PARENT_ON_GPU False" in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]


def test_cpu_helpers_still_resolve_on_a_gpu_machine():
    assert tiny_config().device == "cpu"


# ------------------------------------------------------------------------------------------
# devices=N: DDP over NCCL (a rank per GPU), and per-rank VRAM


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")
def test_two_gpus_run_ddp_over_nccl_and_record_each_ranks_vram(tmp_path):
    record = _run(tmp_path, workload="resnet50", devices=2, batch_size=64, timeout_s=400)
    assert record.status == "ok", record.error
    assert record.world_size == 2 and record.dist_backend == "nccl" and record.samples_per_step == 128
    assert len(record.rank_peak_vram_bytes) == 2 and min(record.rank_peak_vram_bytes) > 1e8
    assert record.peak_vram_bytes == max(record.rank_peak_vram_bytes)
    assert record.samples_per_s == pytest.approx(2 * record.samples_per_s_per_device)


def test_more_gpus_than_the_machine_has_is_skipped_with_the_reason(tmp_path):
    have = torch.cuda.device_count()
    record = _run(tmp_path, devices=have + 1)
    assert record.status == "skipped"
    assert record.error == f"devices={have + 1} needs {have + 1} devices; this machine has {have} CUDA GPU(s)"


@pytest.mark.parametrize("hook", ["none", "fp16", "bf16"])
def test_ddp_wraps_a_cuda_model_over_nccl_with_each_comm_hook(hook, monkeypatch):
    """One rank is enough to check the NCCL group, DDP on a device and the compression hooks (a machine with one
    GPU cannot run two NCCL ranks on it)."""
    import socket

    import torch.distributed as dist

    from harness import config as config_mod
    from harness.workload.knobs import apply_ddp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    cfg = config_mod.RunConfig(devices=2)
    config_mod.set_key(cfg, "ddp.comm_hook", hook)
    config_mod.set_key(cfg, "ddp.gradient_as_bucket_view", True)
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
    try:
        device = torch.device("cuda", 0)
        model = apply_ddp(torch.nn.Conv2d(3, 8, 3).to(device), cfg, device)
        model(torch.randn(4, 3, 16, 16, device=device)).square().mean().backward()
        grad = model.module.weight.grad
        assert dist.get_backend() == "nccl" and grad is not None and torch.isfinite(grad).all()
    finally:
        dist.destroy_process_group()
