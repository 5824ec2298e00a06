"""CPU accounting of the measured window (and its minor page faults), read by the child itself at the window's two edges
(none per step)."""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass

import psutil


def cpu_percent_since_last_call() -> float:
    return psutil.cpu_percent(interval=None)


@dataclass(frozen=True)
class CpuClock:
    """CPU seconds used by the whole machine and by this process tree, at one instant, and this process's minor page
    faults so far (a count the machine's load does not change: it says which state glibc's heap is in)."""

    machine_busy_s: float
    own_s: float
    wall_s: float
    minor_faults: int = 0

    @staticmethod
    def read() -> "CpuClock":
        t = psutil.cpu_times()
        busy = sum(t) - t.idle - getattr(t, "iowait", 0.0)
        proc = psutil.Process()
        c = proc.cpu_times()
        # children_*: loader workers already joined; live workers are read one by one.
        own = c.user + c.system + c.children_user + c.children_system
        for child in proc.children(recursive=True):
            try:
                ct = child.cpu_times()
                own += ct.user + ct.system
            except psutil.Error:
                pass
        return CpuClock(busy, own, time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt)


# The machine's and a process's CPU times count in clock ticks (USER_HZ, 100 a second on Linux): over a window shorter
# than MIN_TICKS ticks of all the CPUs a tick or two of rounding reads as a busy machine (a 5,400 batches/s loader's
# window on 2 CPUs read "other processes 186%" on a quiet machine), so its share is not known
TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
MIN_TICKS = 50


def other_cpu_percent(start: CpuClock, end: CpuClock) -> float | None:
    """Share of the machine's CPU that other processes used between two readings (0-100); None where the window is
    too short for the clocks' ticks to tell (under ``MIN_TICKS`` ticks of all the CPUs)."""
    wall, cpus = end.wall_s - start.wall_s, psutil.cpu_count() or 1
    if wall * cpus * TICKS_PER_S < MIN_TICKS:
        return None
    others = (end.machine_busy_s - start.machine_busy_s) - (end.own_s - start.own_s)
    return max(0.0, 100.0 * others / (wall * cpus))
