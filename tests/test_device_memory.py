"""Under memory.limit_gb: the cuDNN workspace cap in a capped CUDA run's environment (and nowhere else), and the
device memory outside the caching allocator at the window's end. No GPU: NVML and torch.cuda are faked."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from harness.run.child import device_memory
from harness.run.parent import isolate, launcher
from harness.run.parent.lifetime import Held
from harness.store import COLUMNS
from harness.workload import memory_limit
from tests.conftest import tiny_config

MIB = 2**20


def test_the_workspace_cap_is_a_quarter_of_the_cap_on_cuda_only():
    assert memory_limit.workspace_env(24, "cuda", {}) == {"CUDNN_CONV_WSCAP_DBG": "6144"}
    assert memory_limit.workspace_env(3.5, "cuda", {}) == {"CUDNN_CONV_WSCAP_DBG": "896"}
    assert memory_limit.workspace_env(None, "cuda", {}) == {}
    assert memory_limit.workspace_env(24, "cpu", {}) == {}
    # the user's own setting is kept (and recorded from the child's environment)
    assert memory_limit.workspace_env(24, "cuda", {"CUDNN_CONV_WSCAP_DBG": "512"}) == {}


class Started(Exception):
    """Raised by the faked launcher once it has the run's environment."""


@pytest.mark.parametrize("device, limit, expected", [("cuda", 24.0, "6144"), ("cuda", None, None),
                                                     ("cpu", 24.0, None), ("cpu", None, None)])
def test_the_cap_is_in_the_childs_environment_for_a_capped_cuda_run_only(monkeypatch, tmp_path, device, limit,
                                                                        expected):
    monkeypatch.delenv("CUDNN_CONV_WSCAP_DBG", raising=False)
    seen: list[dict] = []

    def start(job, env, log_path, channel_fd=None, argv=None):
        seen.append(env)
        raise Started

    monkeypatch.setattr(launcher, "start", start)
    cfg = tiny_config(results_dir=str(tmp_path))
    cfg.device, cfg.memory.limit_gb = device, limit  # a CUDA run, as the parent starts it (no GPU needed for that)
    with pytest.raises(Started):
        isolate._measure(cfg, {}, None, Held())
    assert seen[0].get("CUDNN_CONV_WSCAP_DBG") == expected
    assert seen[0]["HARNESS_TIMEOUT_S"] == str(cfg.timeout_s)  # the run's own keys are still there


def test_the_child_records_the_cap_it_had():
    assert device_memory.workspace_cap_mib({"CUDNN_CONV_WSCAP_DBG": "896"}) == 896
    assert device_memory.workspace_cap_mib({}) is None
    assert device_memory.workspace_cap_mib({"CUDNN_CONV_WSCAP_DBG": "lots"}) is None
    assert {"cudnn_workspace_cap_mib", "cuda_outside_allocator_bytes"} <= set(COLUMNS)


class FakeNvml:
    """NVML's handle by UUID and its list of the device's compute processes."""

    def __init__(self, processes: list[tuple[int, int | None]]):
        self.processes = [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in processes]

    def nvmlInit(self):
        pass

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return "handle" if uuid == "GPU-abc" else (_ for _ in ()).throw(RuntimeError("no such device"))

    def nvmlDeviceIsMigDeviceHandle(self, handle):
        return False

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        assert handle == "handle"
        return self.processes


IDENTITY = {"index": 0, "uuid": "GPU-abc", "pci_bus": "00000000:01:00.0", "visible": None}


def test_this_processs_memory_is_nvmls_entry_for_its_id_or_the_only_one_listed():
    nvml = FakeNvml([(7, 900 * MIB), (42, 3000 * MIB)])
    assert device_memory.process_used_bytes(IDENTITY, 42, nvml) == 3000 * MIB
    # a container's own ids: NVML lists the host's; one process on the device is this one, several are not told apart
    assert device_memory.process_used_bytes(IDENTITY, 5, FakeNvml([(9001, 2000 * MIB)])) == 2000 * MIB
    assert device_memory.process_used_bytes(IDENTITY, 5, nvml) is None
    assert device_memory.process_used_bytes(IDENTITY, 42, FakeNvml([(42, None)])) is None  # not available


def test_the_memory_outside_the_allocator_is_nvmls_figure_less_the_reserved(monkeypatch):
    import os

    nvml = FakeNvml([(os.getpid(), 5000 * MIB)])
    monkeypatch.setattr(device_memory.monitor, "gpu_identity", lambda index: IDENTITY)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 3900 * MIB)
    monkeypatch.setenv("CUDNN_CONV_WSCAP_DBG", "896")
    out = device_memory.fields(torch.device("cuda", 0), nvml)
    assert out == {"cuda_outside_allocator_bytes": 1100.0 * MIB, "cudnn_workspace_cap_mib": 896}
    assert device_memory.fields(torch.device("cpu"), nvml) == {}  # a CPU run: no such fields, they stay empty
