"""What torch.compile did in this process, as the record says it: its compile time from Dynamo's timers, the CUDA
graphs Inductor skipped capturing, and the step marker the CUDA-graph modes need."""

from __future__ import annotations

from typing import Callable

import torch
from harness.config import CUDAGRAPH_COMPILE_MODES


def cudagraph_skips(compile_mode: str, device: torch.device) -> int | None:
    """How often Inductor skipped capturing a CUDA graph in this process (a mutated input, a CPU tensor, dynamic
    shapes...), in a compile mode that captures them on CUDA; None elsewhere. Non-zero: the run did not run (all)
    its graphs as CUDA graphs, whatever its label says."""
    if device.type != "cuda" or compile_mode not in CUDAGRAPH_COMPILE_MODES:
        return None
    try:
        from torch._dynamo.utils import counters
    except Exception:
        return None
    return int(counters["inductor"]["cudagraph_skips"])


def compile_seconds() -> float | None:
    """Seconds torch.compile spent compiling in this process (forward and backward graphs, recompiles included),
    from Dynamo's own timers: compilation only, not cuDNN autotuning, loader start or the first steps' run time.
    None where this torch does not keep them (then the record keeps the warm-up estimate)."""
    try:
        from torch._dynamo.utils import calculate_time_spent

        spent = calculate_time_spent()
    except Exception:
        return None
    total = spent.get("total_wall_time")
    if total is None:
        total = spent.get("entire_frame_compile", 0.0) + spent.get("entire_backward_compile", 0.0)
    return float(total) if total else None


def cudagraph_step_marker(compile_mode: str, mode: str, device: torch.device) -> Callable[[], None] | None:
    """``torch.compiler.cudagraph_mark_step_begin`` when this run captures CUDA graphs, else None."""
    if device.type != "cuda" or compile_mode not in CUDAGRAPH_COMPILE_MODES or mode == "loader":
        return None
    return getattr(torch.compiler, "cudagraph_mark_step_begin", None)
