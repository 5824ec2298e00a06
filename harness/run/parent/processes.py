"""A run's processes, killed together and waited for: the child's process group, and the groups of every process
in its tree (torch's launcher starts each rank in a session of its own). The parent blocks on pidfds until they are
all gone, instead of polling: a loader worker or a rank still alive would hold memory (and GPU memory) into the
next rung."""

from __future__ import annotations

import os
import select
import signal
import time

from harness.run import monitor

KILL_WAIT_S = 10.0  # how long to wait for a killed group's processes to be gone (GPU memory back)


def kill_group(proc, wait_s: float = KILL_WAIT_S) -> None:
    """Kill the child's process group, and the groups of every process in its tree (torch's launcher starts
    each rank in a session of its own), and wait until they are all gone, not only the child: a loader worker
    or a rank still alive would hold memory (and GPU memory) into the next rung. ``proc``: a Popen, or a
    handle of ``harness.run.parent.launcher`` (a forked run is the warm launcher's child; its end comes from there)."""
    members = _group_members(proc.pid)
    tree = _tree(proc.pid)
    groups = {proc.pid} | {g for g in (_pgid(p.pid) for p in tree) if g and g != os.getpgrp()}
    for group in groups:
        try:
            os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    members += [p for p in tree if p not in members]
    proc.wait()
    wait_gone(members, wait_s)


def wait_gone(procs: list, timeout_s: float) -> None:
    """Block until every process of ``procs`` has ended (pidfds: no polling), or ``timeout_s`` has passed."""
    pidfds, unwatched = [], []
    for p in procs:
        try:
            fd = os.pidfd_open(p.pid)
        except ProcessLookupError:
            continue  # gone already
        except (AttributeError, OSError):
            unwatched.append(p)  # no pidfd here: looked at below
            continue
        if _alive(p):  # the same process still (psutil checks its start time), not a new one under its PID
            pidfds.append(fd)
        else:
            os.close(fd)
    deadline = time.monotonic() + timeout_s
    try:
        while pidfds and time.monotonic() < deadline:
            ended = select.select(pidfds, [], [], max(0.0, deadline - time.monotonic()))[0]
            for fd in ended:
                pidfds.remove(fd)
                os.close(fd)
    finally:
        for fd in pidfds:
            os.close(fd)
    while unwatched and time.monotonic() < deadline:
        unwatched = [p for p in unwatched if _alive(p)]
        if unwatched:
            time.sleep(0.05)


def _group_members(pgid: int) -> list:
    import psutil

    found = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.pid != pgid and os.getpgid(p.pid) == pgid:
                found.append(p)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return found


def _tree(pid: int) -> list:
    import psutil

    try:
        return monitor.descendants(psutil.Process(pid))
    except psutil.Error:
        return []


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


def _alive(p) -> bool:
    import psutil

    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
