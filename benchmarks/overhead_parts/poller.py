"""``--poll``: the harness parent's watch over its child, for the in-process comparison (``inproc.in_process``).
It imports nothing of torch, as the harness's parent does not."""

from __future__ import annotations

import math
import os
import signal
import socket
import time
from pathlib import Path

from rich.console import Console

from harness import config as config_mod
from harness.commands.progress import RunProgress
from harness.run import monitor
from harness.run.child import channel
from harness.run.parent import watch

from .common import end_with_parent


class _Alive:
    """For the poller: the measured process (the benchmark itself) stays alive until it ends the poller; its end
    is never seen (a pipe nobody writes), so the poller blocks as the parent does on a child's pidfd."""

    pid = None

    def __init__(self):
        self.exit_fd, self._writer = os.pipe()

    def poll(self):
        return None


def poll(pid: int, job: str, channel_fd: int | None = None) -> None:
    """The parent's own wait loop (progress markers on the channel, psutil sampling at the configured interval
    outside a CPU window, the progress display at its refresh rate on a terminal), pointed at ``pid``, until
    killed. The benchmark stops (SIGSTOP) and resumes it around the harness's side."""
    end_with_parent(signal.SIGKILL)
    interval = config_mod.RunConfig().measure.sample_interval_s
    console = Console(file=open(os.devnull, "w"), force_terminal=True, width=120)  # noqa: SIM115 - until killed
    print("ready", flush=True)
    markers = channel.Markers(socket.socket(fileno=channel_fd)) if channel_fd is not None else None
    with RunProgress(console, "overhead") as progress:
        watch.wait(_Alive(), Path(job), time.monotonic(), math.inf, progress.update,
                   watch.Watch(monitor.Sampler(pid), interval), markers)


def main(argv: list[str]) -> int:
    """``--poll PID JOB [CHANNEL_FD]``."""
    poll(int(argv[0]), argv[1], int(argv[2]) if len(argv) > 2 else None)
    return 0
