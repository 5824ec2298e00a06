"""One sweep at a time in a results folder on one machine: ``<results>/.sweep.lock`` holds the PID of the sweep
measuring into it. Two sweeps at once make each other's runs busy (and would take each other's runs from the
cache), so the second is refused in one line, naming the first. A lock whose process is gone (a sweep killed
with SIGKILL), or that another machine wrote (a shared folder), is no obstacle: the lock is about this machine.
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

LOCK_FILE = ".sweep.lock"


def acquire(results_dir: str | os.PathLike) -> str:
    """Take the results folder's sweep lock (ValueError naming the sweep that holds it); what ``release`` takes."""
    path = Path(results_dir) / LOCK_FILE
    mine = f"{os.getpid()} {socket.gethostname()}\n"
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _live_holder(path)
            if holder is None or holder == os.getpid():
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()  # stale, or this process's own (a campaign's sweeps one after another)
                continue
            raise ValueError(f"another sweep (PID {holder}) is measuring into {results_dir} now: two sweeps on one "
                             f"machine make each other's runs busy; wait until it ends, or give this one another "
                             f"folder (results_dir=DIR)") from None
        with os.fdopen(fd, "w") as out:
            out.write(mine)
        return str(path)
    return ""  # two takeovers raced with another start: measure unlocked rather than refuse


def release(held: str) -> None:
    """Let go of the lock ``acquire`` took (nothing if another process holds it now)."""
    if not held:
        return
    mine = f"{os.getpid()} {socket.gethostname()}\n"
    with contextlib.suppress(OSError):
        if Path(held).read_text() == mine:
            Path(held).unlink()


def _live_holder(path: Path) -> int | None:
    """The PID of the sweep holding the lock, if it is alive on this machine; None for a stale or foreign lock."""
    try:
        pid_text, _, host = path.read_text().strip().partition(" ")
        pid = int(pid_text)
    except (OSError, ValueError):
        return None  # being written, or not ours: taken over
    if host != socket.gethostname():
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return None  # gone
    except OSError:
        return pid  # no /proc to ask: assume it is the sweep
    return pid if b"harness" in cmdline else None  # a PID reused by another program holds nothing
