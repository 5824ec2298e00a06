"""``memory.limit_gb``: a smaller card's memory on a bigger one. The CUDA caching allocator of the measuring process
is capped at the limit's share of the device (``torch.cuda.set_per_process_memory_fraction``) before the model is
built, so that the model's parameters, the optimizer's state and every activation count against it, and an
allocation past it raises ``torch.OutOfMemoryError``: the run ends ``oom`` as on the card the limit stands for.

The cap covers what the allocator holds (reserved memory), not the CUDA context (a few hundred MiB) nor cuDNN or
cuBLAS workspaces allocated outside PyTorch: a run capped at 24 GiB on an 80 GiB card may fit a batch that a real
24 GB card, whose context also takes its share, would not (the record's ``cuda_outside_allocator_bytes`` says how
much). A capped run's cuDNN workspaces are capped too, within the cap (``workspace_env``: the parent sets it in the
run's environment). The arithmetic is torch-free (tested on a CPU).
"""

from __future__ import annotations

from harness.workload.applicability import KnobNotApplicable

GIB = 2**30  # memory.limit_gb counts GiB: cards are sold in them (an A5000's 24 GB is 24 GiB)

# cuDNN's own cap on the workspace its convolution engines may ask for, in MiB. PyTorch's "CUDA Environment
# Variables" page lists it (as cuDNN's workspace setting, beside cuBLAS's CUBLAS_WORKSPACE_CONFIG); the unit is
# MiB in the public uses found (CUDNN_CONV_WSCAP_DBG=4096, 1024, 256 beside "MB"); cuDNN reads it itself, so it
# must be in the process's environment before its first convolution. Not yet verified on a GPU.
WORKSPACE_ENV = "CUDNN_CONV_WSCAP_DBG"
# The workspace cap under memory.limit_gb: this share of the cap. cuDNN's benchmark otherwise sizes the workspaces
# it tries from the whole card's free memory, and under a cap each one that does not fit is an allocator retry and
# a survived out-of-memory error in the first step. A quarter stays within the headroom the H100's capped runs left
# (batch 4 at 112^3 under 3.5 GiB: 2.14 GiB allocated at its peak, 1.36 GiB free; a quarter is 0.875 GiB).
WORKSPACE_SHARE = 0.25


def workspace_cap_mib(limit_gb: float | None, device: str) -> int | None:
    """The cuDNN workspace cap (MiB) of a run capped at ``limit_gb`` GiB on ``device``: ``WORKSPACE_SHARE`` of the cap;
    None without a cap or off CUDA."""
    if limit_gb is None or device != "cuda":
        return None
    return max(1, int(limit_gb * 1024 * WORKSPACE_SHARE))


def workspace_env(limit_gb: float | None, device: str, environ) -> dict[str, str]:
    """What a capped CUDA run's environment adds: ``CUDNN_CONV_WSCAP_DBG``, unless ``environ`` (the user's) sets it
    already (theirs is kept, and recorded). Empty otherwise."""
    cap = workspace_cap_mib(limit_gb, device)
    if cap is None or environ.get(WORKSPACE_ENV):
        return {}
    return {WORKSPACE_ENV: str(cap)}


def limit_fraction(limit_gb: float, total_bytes: float) -> float:
    """The share of a device of ``total_bytes`` that ``limit_gb`` GiB is (ValueError when the device is smaller:
    a fraction above 1 caps nothing, and the run would measure the bigger card under the smaller one's label)."""
    if total_bytes <= 0:
        raise ValueError(f"a device of {total_bytes} bytes has no memory to cap")
    fraction = limit_gb * GIB / total_bytes
    if fraction > 1.0:
        raise ValueError(f"memory.limit_gb={limit_gb:g} is more than this device's {total_bytes / GIB:.1f} GiB: "
                         "a limit caps a bigger card to a smaller one's memory")
    return fraction


def apply_memory_limit(limit_gb: float | None, device) -> float | None:
    """Cap ``device``'s caching allocator at ``limit_gb`` GiB; the fraction set (None: no limit, or not a CUDA
    device, where the parent has already skipped the run: ``applicability``). A limit above the device's memory
    raises ``KnobNotApplicable`` (the run is recorded as skipped, with the reason)."""
    if limit_gb is None or device.type != "cuda":
        return None
    import torch


    index = device.index if device.index is not None else torch.cuda.current_device()
    try:
        fraction = limit_fraction(limit_gb, torch.cuda.get_device_properties(index).total_memory)
    except ValueError as exc:
        raise KnobNotApplicable(str(exc)) from None
    torch.cuda.set_per_process_memory_fraction(fraction, index)
    return fraction
