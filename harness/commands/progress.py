"""Live progress of a run in its child process, from the child's phase markers.

The child writes a marker at each phase change only (never per step), so progress costs the
measured loop nothing; time left is estimated from the warm-up steps' pace. The display is redrawn
only when the parent's poll loop calls ``update``, at most ``REFRESH_HZ`` times a second: the parent
shares the CPU with the measured child, and every wake-up of the parent can take a CPU from one of the
child's threads, so the display runs no refresh thread of its own (rich's ``Status`` wakes one 12.5
times a second). Inside a CPU run's measured window the parent does not wake at all: the display says so
once, at the window's opening (``paused``), and stands still until it closes.
"""

from __future__ import annotations

import statistics
import time

from rich.console import Console
from rich.live import Live
from rich.spinner import Spinner
from harness.session.events import Display
from harness.commands.console import console

REFRESH_HZ = 2.0  # at most this many redraws a second, however often the parent polls (measure.sample_interval_s)


class RunProgress:
    def __init__(self, console: Console, label: str):
        self.console = console
        self.label = label
        self._spinner = Spinner("dots", text=f"{label}: starting", style="status.spinner")
        self._live = Live(self._spinner, console=console, auto_refresh=False, transient=True)
        self._last = None
        self._drawn = 0.0

    def __enter__(self) -> "RunProgress":
        self._live.start(refresh=True)
        return self

    def __exit__(self, *exc) -> None:
        self._live.stop()

    def update(self, info: dict, elapsed_s: float) -> None:
        """Called at every poll: the new text if it changed, and the spinner's next frame."""
        now = time.monotonic()
        if now - self._drawn < 1.0 / REFRESH_HZ and not info.get("paused"):  # the last draw before a pause is due
            return
        self._drawn = now
        text = describe(info, elapsed_s)
        if text != self._last:
            self._spinner.update(text=f"{self.label}: {text}")
            self._last = text
        self._live.refresh()


def describe(info: dict, elapsed_s: float) -> str:
    phase = info.get("phase")
    if phase == "build":
        return "building the model"
    if phase == "data":
        return "setting up the data and the loader"
    if phase == "warmup" and info.get("steps") == "auto":
        return "warm-up until the step time is steady"
    if phase == "warmup":
        return f"warm-up, {info.get('steps')} steps"
    if phase == "measure" and info.get("paused"):
        return "measuring (display paused: the window has the CPUs)"
    if phase == "measure":
        warm = info.get("warmup_ms") or []
        pace_s = statistics.median(warm[1:] or warm) / 1000.0 if warm else 0.0
        left = max(0.0, info.get("steps", 0) * pace_s - (time.time() - info.get("time", time.time())))
        if info.get("auto"):  # steps=auto: how many is not known in advance
            return f"measuring until the mean is known (at most {info.get('steps')} steps)"
        return f"measuring {info.get('steps')} steps, ~{left:.0f} s left"
    if phase == "measured":
        return "measured; writing the result"
    if phase == "result":
        return "measured; ending the run"
    if phase == "profile":  # profile.enabled: after the window, the measurement already written
        return f"measured; profiling {info.get('steps')} more steps"
    return str(phase)


def run_by_run_display():
    """What ``climb`` and ``fit`` show: a line of rich markup per event, and this status line around each run."""
    return Display(say=console.print, progress=lambda label: RunProgress(console, label))
