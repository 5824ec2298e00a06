"""Device memory the caching allocator does not hold, read by the measuring child once its window has closed: the
CUDA context, the libraries' handles and any workspace allocated outside PyTorch, which ``memory.limit_gb`` does not
cap (``harness.workload.memory_limit``); and the cuDNN workspace cap the run had in its environment.

This process's device memory is NVML's figure for it (the device's running compute processes, by process id). In a
container NVML may list processes by the host's ids: then the one process NVML lists on the device is taken as this
one, and with several (another job on the GPU) none is, and the figure stays empty rather than another's.
"""

from __future__ import annotations

import os
from typing import Any

from harness.run import monitor
from harness.workload.memory_limit import WORKSPACE_ENV


def fields(device, nvml: Any = None) -> dict[str, Any]:
    """The record's fields: ``cuda_outside_allocator_bytes`` and ``cudnn_workspace_cap_mib`` (empty off CUDA)."""
    if device.type != "cuda":
        return {}
    return {"cuda_outside_allocator_bytes": outside_allocator_bytes(device, nvml),
            "cudnn_workspace_cap_mib": workspace_cap_mib(os.environ)}


def workspace_cap_mib(environ) -> int | None:
    """The cuDNN workspace cap (MiB) the run had in its environment (``CUDNN_CONV_WSCAP_DBG``); None without one."""
    value = str(environ.get(WORKSPACE_ENV, "")).strip()
    return int(value) if value.isdigit() else None


def outside_allocator_bytes(device, nvml: Any = None) -> float | None:
    """This process's device memory (NVML) less what the caching allocator has reserved, now; None where NVML does not
    tell this process's figure."""
    import torch

    used = process_used_bytes(monitor.gpu_identity(device.index or 0), os.getpid(), nvml)
    if used is None:
        return None
    return max(0.0, used - float(torch.cuda.memory_reserved(device)))


def process_used_bytes(identity: dict, pid: int, nvml: Any = None) -> float | None:
    """The device memory NVML lists for process ``pid`` on the device ``identity`` names; the only process it lists
    there where none has that id (a container's own ids); None otherwise, or without NVML."""
    gpu = monitor.nvml_handle_for(identity, nvml)
    if gpu is None or gpu.handle is None:
        return None
    try:
        if nvml is None:
            import pynvml as nvml
        processes = list(nvml.nvmlDeviceGetComputeRunningProcesses(gpu.handle))
    except Exception:
        return None
    mine = [p for p in processes if p.pid == pid] or (processes if len(processes) == 1 else [])
    used = getattr(mine[0], "usedGpuMemory", None) if mine else None
    return float(used) if isinstance(used, (int, float)) else None
