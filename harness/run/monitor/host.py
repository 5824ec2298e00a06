"""Host memory of the measuring process tree (the child, its loader workers, Inductor's compile workers, or a
multi-device run's ranks), read from outside through psutil, and the child's own exact peak.

RSS counts every page a process maps, its shared ones too, so the RSS of a tree's processes added up counts a page
shared by forked loader workers once in each of them. Every few samples the tree is also read with
``memory_full_info`` (``/proc/PID/smaps_rollup``): each loader worker's USS (the pages it alone holds, what it adds
to the main process) and the tree's PSS (each shared page divided among the processes that map it, so that their
sum counts it once). Inductor's compile workers (its ``compile_worker`` and autotuning subprocesses, and theirs) are
told from loader workers by their command line and counted apart.
"""

from __future__ import annotations

import os
import resource
import sys
from dataclasses import dataclass, field

import psutil

COMPILE_WORKER_MARK = "_inductor"  # in a compile worker's command line: torch/_inductor/compile_worker/__main__.py


@dataclass
class TreeRss:
    """One reading of a process tree's memory, in bytes."""

    total: float = 0.0  # RSS of the measuring processes and their loader workers (compile workers apart)
    main: float = 0.0  # the measuring process (with ranks: the largest rank)
    workers: dict[int, float] = field(default_factory=dict)  # every loader worker's RSS, by PID
    compile_rss: float = 0.0  # Inductor's compile workers together
    # read with ``full`` only (None where the system does not report them):
    pss: float | None = None  # the measuring processes and their loader workers together
    worker_uss: dict[int, float] = field(default_factory=dict)
    compile_pss: float | None = None


def tree_rss(proc: psutil.Process, ranks: bool = False, full: bool = False) -> TreeRss | None:
    """The tree's memory now (None once the process has exited). ``ranks``: ``proc`` is torch's launcher, whose
    children are the ranks (the measuring processes). ``full``: USS and PSS too (a read of each process's
    smaps_rollup: a few times the cost of RSS, so the sampler asks for it every few samples)."""
    try:
        own = proc.memory_full_info() if full and not ranks else proc.memory_info()
        children = descendants_with_parents(proc)
    except psutil.Error:  # the child has exited: nothing left to read
        return None
    out = TreeRss(main=0.0 if ranks else float(own.rss), total=0.0 if ranks else float(own.rss))
    pss = [_pss(own)] if full and not ranks else []
    compile_pids: set[int] = set()
    compile_pss: list[float | None] = []
    for child, parent in children:
        try:
            if parent in compile_pids or _is_compile_worker(child):
                compile_pids.add(child.pid)
                mem = child.memory_full_info() if full else child.memory_info()
                out.compile_rss += mem.rss
                compile_pss.append(_pss(mem) if full else None)
                continue
            mem = child.memory_full_info() if full else child.memory_info()
            rank = ranks and parent == proc.pid
        except psutil.Error:
            continue
        out.total += mem.rss
        if full:
            pss.append(_pss(mem))
        if rank:  # a rank is a measuring process: the largest of them is the main peak
            out.main = max(out.main, float(mem.rss))
        else:
            out.workers[child.pid] = float(mem.rss)
            if full and getattr(mem, "uss", None) is not None:
                out.worker_uss[child.pid] = float(mem.uss)
    if full:
        out.pss = None if not pss or None in pss else float(sum(pss))
        out.compile_pss = None if None in compile_pss else float(sum(compile_pss))  # type: ignore[arg-type]
    return out


def _pss(mem) -> float | None:
    value = getattr(mem, "pss", None)  # Linux only
    return None if value is None else float(value)


def _is_compile_worker(p: psutil.Process) -> bool:
    """An Inductor compile or autotuning worker, by its command line (a process that has exited: not one)."""
    try:
        return any(COMPILE_WORKER_MARK in arg for arg in p.cmdline())
    except psutil.Error:
        return False


def descendants(proc: psutil.Process) -> list[psutil.Process]:
    """The process's children, grandchildren, ..."""
    return [p for p, _ in descendants_with_parents(proc)]


def descendants_with_parents(proc: psutil.Process) -> list[tuple[psutil.Process, int]]:
    """The process's descendants, each with its parent's PID, parents before their children. Linux lists each
    thread's children in /proc: reading those few files costs a tenth of psutil's ``children()``, which reads
    every process on the machine (1.6 ms a sample)."""
    if not os.path.exists(f"/proc/{proc.pid}/task/{proc.pid}/children"):  # not Linux, or no CONFIG_PROC_CHILDREN
        found = []
        for p in proc.children(recursive=True):
            try:
                found.append((p, p.ppid()))
            except psutil.Error:
                continue
        return found
    found: list[tuple[psutil.Process, int]] = []
    todo = [proc.pid]
    while todo:
        pid = todo.pop(0)  # breadth first: a parent is listed before its children
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
                    found.append((psutil.Process(kid), pid))
                except psutil.Error:
                    continue
                todo.append(kid)
    return found


def worker_peaks() -> dict[str, float]:
    """The kernel's high-water mark of resident memory (``VmHWM``) of every live loader worker under this process
    (Inductor's compile workers, and theirs, apart), in bytes, by PID: exact peaks, read by the measuring process
    itself once its window has closed, where the parent's samples (none inside a CPU run's window) could miss them.
    Linux; {} elsewhere."""
    peaks: dict[str, float] = {}
    if not os.path.exists("/proc/self/status"):
        return peaks
    compile_pids: set[int] = set()
    for child, parent in descendants_with_parents(psutil.Process()):
        if parent in compile_pids or _is_compile_worker(child):
            compile_pids.add(child.pid)
            continue
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
