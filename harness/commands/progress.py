"""Live progress of a run in its child process, from the child's phase markers.

The child writes a marker at each phase change only (never per step), so progress costs the
measured loop nothing; time left is estimated from the warm-up steps' pace. The display redraws at
most ``REFRESH_HZ`` times a second: the parent shares the CPU with the measured child, and a spinner
redrawn at rich's default 12.5 Hz is a thread waking up for nothing the reader needs.
"""

from __future__ import annotations

import statistics
import time

from rich.console import Console

REFRESH_HZ = 2.0


class RunProgress:
    def __init__(self, console: Console, label: str):
        self.console = console
        self.label = label
        self._status = None
        self._last = None

    def __enter__(self) -> "RunProgress":
        self._status = self.console.status(f"{self.label}: starting", refresh_per_second=REFRESH_HZ)
        self._status.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._status.__exit__(*exc)

    def update(self, info: dict, elapsed_s: float) -> None:
        text = describe(info, elapsed_s)
        if text != self._last:
            self._status.update(f"{self.label}: {text}")
            self._last = text


def describe(info: dict, elapsed_s: float) -> str:
    phase = info.get("phase")
    if phase == "build":
        return "building model and loader"
    if phase == "warmup":
        return f"warm-up, {info.get('steps')} steps"
    if phase == "measure":
        warm = info.get("warmup_ms") or []
        pace_s = statistics.median(warm[1:] or warm) / 1000.0 if warm else 0.0
        left = max(0.0, info.get("steps", 0) * pace_s - (time.time() - info.get("time", time.time())))
        if info.get("auto"):  # steps=auto: how many is not known in advance
            return f"measuring until the mean is known (at most {info.get('steps')} steps)"
        return f"measuring {info.get('steps')} steps, ~{left:.0f} s left"
    if phase == "measured":
        return "measured; writing the result"
    return str(phase)
