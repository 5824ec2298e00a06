"""One measuring command at a time in a results folder on one machine: ``<results>/.sweep.lock`` holds the PID of
the sweep (or ``check --against``) measuring into it, and which of the two it is. Two at once make each other's
runs busy (and would take each other's runs from the cache), so the second is refused in one line, naming the
first. A lock whose process is gone (a sweep killed
with SIGKILL), or that another machine wrote (a shared folder), is no obstacle: the lock is about this machine.
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

LOCK_FILE = ".sweep.lock"
# what may hold the lock, and how each is given another folder
ELSEWHERE = {"sweep": "results_dir=DIR", "check --against": "--results DIR"}


def acquire(results_dir: str | os.PathLike, what: str = "sweep") -> str:
    """Take the results folder's lock for ``what`` (a key of ``ELSEWHERE``; ValueError naming the command that holds
    it, and its PID); what ``release`` takes."""
    path = Path(results_dir) / LOCK_FILE
    mine = f"{_owner()}\n{what}\n"
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _live_holder(path)
            if holder is None or holder == os.getpid():
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()  # stale, or this process's own (a campaign's sweeps one after another)
                continue
            other = _holder_kind(path)
            two = f"two {'checks' if what != 'sweep' else 'sweeps'}" if other == what else "two measuring commands"
            raise ValueError(f"another {other} (PID {holder}) is measuring into {results_dir} now: {two} on one "
                             f"machine make each other's runs busy; wait until it ends, or give this one another "
                             f"folder ({ELSEWHERE.get(what, 'results_dir=DIR')})") from None
        with os.fdopen(fd, "w") as out:
            out.write(mine)
        return str(path)
    return ""  # two takeovers raced with another start: measure unlocked rather than refuse


def release(held: str) -> None:
    """Let go of the lock ``acquire`` took (nothing if another process holds it now)."""
    if not held:
        return
    with contextlib.suppress(OSError):
        if Path(held).read_text().splitlines()[:1] == [_owner()]:
            Path(held).unlink()


def _owner() -> str:
    return f"{os.getpid()} {socket.gethostname()}"


def _holder_kind(path: Path) -> str:
    """What holds the lock: its second line (a lock written before there were two kinds: a sweep)."""
    with contextlib.suppress(OSError):
        lines = path.read_text().splitlines()
        if len(lines) > 1 and lines[1] in ELSEWHERE:
            return lines[1]
    return "sweep"


def _live_holder(path: Path) -> int | None:
    """The PID of the sweep holding the lock, if it is alive on this machine; None for a stale or foreign lock."""
    try:
        pid_text, _, host = (path.read_text().strip().splitlines() or [""])[0].partition(" ")
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
