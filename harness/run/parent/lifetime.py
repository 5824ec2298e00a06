"""The one process-lifetime rule of every command that starts measuring processes (``run``, ``sweep``, ``noise``,
``climb``, ``diagnose``, ``check --against``): nothing it started outlives it, and a finished measurement is stored.

  * a process the command starts runs in a session of its own (``start``), so that its whole group (loader workers
    join it) is killed at once, and dies with the command if the command is killed outright (SIGKILL): the kernel's
    parent-death signal, set before the new process runs a single instruction of its own (``lifeline``);
  * while it runs it is in ``LIVE`` (``tracked``), and leaves it only once its tree is gone, so that whatever ends
    the command (Ctrl-C, SIGTERM from a CI cancel or SLURM, SIGHUP from a dropped ssh) finds it there:
    ``harness.cli`` turns SIGTERM and SIGHUP into an exception like Ctrl-C's (``terminate_on_signals``), kills
    what is in ``LIVE`` (``kill_live_children``) and exits 128+N;
  * from the moment a run's outcome is known until its record is stored, those signals wait (``Held``): an
    interrupt then ends the command after the record is stored, not before.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess

from harness import lifeline
from harness.run.parent import processes

ENDING_SIGNALS = tuple(s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None)

LIVE: set = set()  # the processes running now (Popen or launcher handles): killed if the command is interrupted


class Terminated(BaseException):
    """The command got SIGTERM or SIGHUP. A BaseException, like KeyboardInterrupt, so that no
    ``except Exception`` on the way (a sweep's per-rung handler, Hydra's job runner) swallows it."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_terminated(signum, frame) -> None:
    raise Terminated(signum)


def terminate_on_signals() -> dict:
    """SIGTERM and SIGHUP end the command the way Ctrl-C does: by an exception, so every ``finally``
    on the way kills its child's group. Call from the main thread; returns the handlers it replaced
    (give them to ``restore_signals``)."""
    return {sig: signal.signal(sig, _raise_terminated) for sig in ENDING_SIGNALS if sig != signal.SIGINT}


def restore_signals(previous: dict) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def signal_of(exc: BaseException) -> int:
    """The signal behind an interrupt: SIGINT for Ctrl-C's KeyboardInterrupt."""
    return exc.signum if isinstance(exc, Terminated) else int(signal.SIGINT)


def start(argv: list[str], **popen_args) -> subprocess.Popen:
    """``subprocess.Popen(argv)`` under the rule: a session of its own, and SIGKILL when this process dies."""
    return subprocess.Popen(argv, start_new_session=True, preexec_fn=lifeline.parent_death_preexec(), **popen_args)


@contextlib.contextmanager
def tracked(proc):
    """``proc`` in ``LIVE`` while the block runs; on the way out (however the block ends) its group and every group
    of its tree are killed and waited for, and only then does it leave ``LIVE``."""
    LIVE.add(proc)
    try:
        yield proc
    finally:
        processes.kill_group(proc)
        LIVE.discard(proc)


def kill_live_children() -> None:
    for proc in list(LIVE):
        processes.kill_group(proc)
        LIVE.discard(proc)


class Held:
    """SIGINT, SIGTERM and SIGHUP wait while held: from ``hold()`` to ``release()``, a signal is noted, and acted on
    (its handler run: KeyboardInterrupt or ``Terminated``) at the release. For the stretch between a run's end and
    its record stored. Outside the main thread (where no handler can be set) it holds nothing."""

    def __init__(self):
        self.previous: dict = {}
        self.caught: int | None = None

    def hold(self) -> None:
        if self.previous:
            return
        try:
            self.previous = {sig: signal.signal(sig, self._note) for sig in ENDING_SIGNALS}
        except ValueError:  # not the main thread
            self.previous = {}

    def _note(self, signum, frame) -> None:
        self.caught = self.caught or signum

    def release(self, act: bool = True) -> None:
        """The handlers back; a signal that came meanwhile acted on now (``act`` False: an interrupt or an error
        is on its way already, and this one is dropped)."""
        previous, self.previous = self.previous, {}
        restore_signals(previous)
        caught, self.caught = self.caught, None
        if caught is None or not act:
            return
        handler = previous.get(caught)
        if callable(handler):
            handler(caught, None)
        elif handler != signal.SIG_IGN:
            os.kill(os.getpid(), caught)  # its default action, now that nothing holds it
