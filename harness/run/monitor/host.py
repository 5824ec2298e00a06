"""Host memory of the measuring process tree (the child, its loader workers, or a multi-device run's ranks), read
from outside through psutil, and the child's own exact peak."""

from __future__ import annotations

import os
import resource
import sys
from dataclasses import dataclass, field

import psutil


@dataclass
class TreeRss:
    """One reading of a process tree's resident memory, in bytes."""

    total: float = 0.0  # the whole tree
    main: float = 0.0  # the measuring process (with ranks: the largest rank)
    workers: dict[int, float] = field(default_factory=dict)  # every other process, by PID


def tree_rss(proc: psutil.Process, ranks: bool = False) -> TreeRss | None:
    """The tree's memory now (None once the process has exited). ``ranks``: ``proc`` is torch's launcher, whose
    children are the ranks (the measuring processes)."""
    try:
        total = proc.memory_info().rss
        children = descendants(proc)
    except psutil.Error:  # the child has exited: nothing left to read
        return None
    out = TreeRss(main=0.0 if ranks else float(total))
    for child in children:
        try:
            rss = child.memory_info().rss
            rank = ranks and child.ppid() == proc.pid
        except psutil.Error:
            continue
        total += rss
        if rank:  # a rank is a measuring process: the largest of them is the main peak
            out.main = max(out.main, float(rss))
        else:
            out.workers[child.pid] = float(rss)
    out.total = float(total)
    return out


def descendants(proc: psutil.Process) -> list[psutil.Process]:
    """The process's children, grandchildren, ... Linux lists each thread's children in /proc: reading those few
    files costs a tenth of psutil's ``children()``, which reads every process on the machine (1.6 ms a sample)."""
    if not os.path.exists(f"/proc/{proc.pid}/task/{proc.pid}/children"):  # not Linux, or no CONFIG_PROC_CHILDREN
        return proc.children(recursive=True)
    found: list[psutil.Process] = []
    todo = [proc.pid]
    while todo:
        pid = todo.pop()
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:  # gone meanwhile
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except (OSError, ValueError):
                continue
            for kid in kids:
                try:
                    found.append(psutil.Process(kid))
                except psutil.Error:
                    continue
                todo.append(kid)
    return found


def worker_peaks() -> dict[str, float]:
    """The kernel's high-water mark of resident memory (``VmHWM``) of every live process under this one (its loader
    workers), in bytes, by PID: exact peaks, read by the measuring process itself once its window has closed,
    where the parent's samples (none inside a CPU run's window) could miss them. Linux; {} elsewhere."""
    peaks: dict[str, float] = {}
    if not os.path.exists("/proc/self/status"):
        return peaks
    for child in descendants(psutil.Process()):
        try:
            with open(f"/proc/{child.pid}/status") as f:
                line = next((x for x in f if x.startswith("VmHWM:")), "")
        except OSError:  # ended meanwhile
            continue
        if line:
            peaks[str(child.pid)] = float(line.split()[1]) * 1024  # kB
    return peaks


def own_peak_rss_bytes() -> float:
    """This process's peak RSS over its life, kept by the kernel: exact, and free to read once."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return float(peak if sys.platform == "darwin" else peak * 1024)  # bytes on macOS, KiB on Linux
