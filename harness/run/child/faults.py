"""The debug faults (``debug.fault``), each taking the same path its real counterpart takes.

The measured loop asks only ``step == nan_step`` (per micro-batch) and ``step == fault_step`` (per step) of a
plan made once before it starts: a run without a fault compares two integers a step, and nothing else.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from harness.config import DebugConfig

NEVER = -1  # a step number the loop never reaches
STEP_FAULTS = ("oom", "hang", "crash")  # fired after the step's optimizer step; "nan" poisons the step's loss


@dataclass(frozen=True)
class FaultPlan:
    """Where the debug fault fires on this rank (``NEVER`` where it does not), and the sleep added to every step."""

    kind: str = "none"
    nan_step: int = NEVER
    fault_step: int = NEVER
    slowdown_s: float = 0.0


def plan(debug: DebugConfig, rank: int = 0) -> FaultPlan:
    """The plan of ``debug.*`` for ``rank`` (a fault fires on ``debug.fault_rank`` only)."""
    here = rank == debug.fault_rank
    return FaultPlan(
        kind=debug.fault,
        nan_step=debug.fault_step if here and debug.fault == "nan" else NEVER,
        fault_step=debug.fault_step if here and debug.fault in STEP_FAULTS else NEVER,
        slowdown_s=debug.slowdown_ms / 1000.0,
    )


def inject(kind: str, device: torch.device) -> None:
    """Fire the fault ``kind`` now (called at the plan's ``fault_step``)."""
    if kind == "oom":
        # A real allocation no machine can satisfy: CUDA raises torch.OutOfMemoryError, the CPU
        # allocator its RuntimeError, exactly as a real out-of-memory does.
        torch.empty(1 << 60, dtype=torch.uint8, device=device)
    elif kind == "hang":
        time.sleep(10**7)
    elif kind == "crash":
        os.kill(os.getpid(), signal.SIGKILL)
