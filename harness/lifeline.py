"""Ties a measuring process (and its loader workers) to the life of the process that started it.

Used inside the child and its loader workers: no thread and no per-step work, only what the
kernel does for us (``PR_SET_PDEATHSIG``) and one alarm as a last-resort deadline.
"""

from __future__ import annotations

import ctypes
import math
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
METRICS_PREFIX = "harness-metrics-"  # the storage ceiling's folder: removed at a next start once its run is gone
OWNER_FILE = "parent.pid"  # in a temporary folder of ours: the process it belongs to (see isolate.clean_stale_jobs)
DEADLINE_GRACE_S = 30  # the parent's timeout fires first; the child's own alarm only if the parent cannot


def die_with_parent(expected_parent: int | None = None) -> bool:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux). Returns False where
    that is not available. If the parent is already gone (it died before we asked), exit now."""
    ok = False
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            ok = libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
        except (OSError, AttributeError):
            ok = False
    if expected_parent and os.getppid() != expected_parent:
        os._exit(1)
    return ok


def worker_init(worker_id: int) -> None:
    """DataLoader ``worker_init_fn``: a loader worker dies with the measuring process."""
    die_with_parent(None)


def guard_child() -> None:
    """At the start of the measuring process: die with the parent, and carry our own deadline
    (the default SIGALRM action ends the process even if it is stuck in native code)."""
    parent = int(os.environ.get("HARNESS_PARENT_PID", "0") or 0)
    die_with_parent(parent or None)
    timeout_s = float(os.environ.get("HARNESS_TIMEOUT_S", "0") or 0)
    if timeout_s > 0:
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.alarm(int(math.ceil(timeout_s)) + DEADLINE_GRACE_S)


def parent_death_preexec():
    """A ``preexec_fn`` for ``subprocess.Popen``: the new process gets SIGKILL when this one dies (Linux), from its
    first instruction on, before its interpreter has imported anything; if this process is gone by then, it exits.
    libc is loaded here, before the fork: only the system call runs in the forked child. The kernel ties the signal
    to the thread that forks, so start such a process from a thread that lives as long as the command (the main
    one)."""
    parent = os.getpid()
    try:
        libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
    except OSError:
        libc = None

    def preexec() -> None:
        if libc is not None:
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return preexec
