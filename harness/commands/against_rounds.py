"""How long ``check --against`` measures: its plan up front, its progress, its time budget and when it stops.

* **The plan** (one line before the first run): configs x rounds x 2 sides, the runs at least and at most, and
  the minutes they take, estimated from stored records of those configs (``estimate_run_s``: the median time
  between consecutive runs of a sweep or check that measured them); without any, from the first runs.
* **Progress** for the whole job: rich's bar with the time left in a terminal, one plain line a run when stderr
  is a file or a pipe (CI logs).
* **The budget**: after the first round, no round starts that would end past ``--budget-min`` (its time from
  this check's own runs); the rounds before the first look always run.
* **The looks' horizon**: the rounds the budget allows at the estimated run time, at most ``--max-rounds``
  (``looks.planned_rounds``), fixed at the first look, so the error is spent over rounds that happen; when those
  rounds cannot decide a slowdown of twice the threshold in 80% of checks at the stored CV, the plan says so and
  what budget would (``power_line``).
* **When it stops**: at a look (``harness.analysis.gate.looks``) where every config is decided, at the horizon,
  or at the budget.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from harness.analysis.gate import looks

MAX_GAP_S = 3600.0  # a gap longer than this between two runs of one sweep is a pause, not a run


def estimate_run_s(records: pd.DataFrame) -> tuple[float | None, int]:
    """Seconds one run of these configs takes, from the records of the sweeps and checks that measured them
    (columns sweep_id, timestamp): the median gap between consecutive runs of one sweep; and how many gaps."""
    gaps: list[float] = []
    for _, group in records.groupby("sweep_id"):
        times = pd.to_datetime(group["timestamp"], utc=True, errors="coerce").dropna().sort_values()
        gaps += [g for g in times.diff().dt.total_seconds().dropna() if 0 < g <= MAX_GAP_S]
    return (statistics.median(gaps), len(gaps)) if gaps else (None, 0)


def stored_cv(records: pd.DataFrame) -> float | None:
    """The process CV of the sweep's configs from their stored ok runs: the log throughputs' sd within each config,
    pooled over the configs with two or more (None: no config has two)."""
    ok = records[(records["status"] == "ok") & (records["samples_per_s"].fillna(0) > 0)]
    squares, df = 0.0, 0
    for _, group in ok.groupby("config_hash"):
        if len(group) >= 2:
            logs = np.log(group["samples_per_s"].astype(float))
            squares, df = squares + float(((logs - logs.mean()) ** 2).sum()), df + len(group) - 1
    return math.sqrt(squares / df) if df else None


@dataclass
class Clock:
    """The check's rounds, its time budget and its progress display."""

    configs: int
    first: int  # rounds before the first look
    max_rounds: int
    budget_s: float
    stored_run_s: float | None = None  # the estimate from stored records
    started: float = field(default_factory=time.monotonic)
    run_s: list[float] = field(default_factory=list)  # this check's own runs
    _run_started: float = 0.0
    bar: object = None

    @property
    def runs_per_round(self) -> int:
        return 2 * self.configs

    def per_run_s(self) -> float | None:
        return statistics.mean(self.run_s) if self.run_s else self.stored_run_s

    def plan_line(self, based_on: int) -> str:
        """Runs at least and at most, and the minutes they take (estimated), before anything runs."""
        least, most = self.first * self.runs_per_round, self.max_rounds * self.runs_per_round
        per = self.per_run_s()
        if per is None:
            when = "no stored runs of these configs to estimate the time from: it is known after the first round"
        else:
            when = (f"~{least * per / 60:.1f} to ~{min(most * per, max(self.budget_s, least * per)) / 60:.1f} min "
                    f"(~{per:.0f} s a run, from {based_on} gaps between stored runs of these configs)")
        over = (f" (the {self.first} rounds before the first look alone take longer: they always run)"
                if per is not None and least * per > self.budget_s else "")
        return (f"plan: {self.configs} config(s) x {self.first} to {self.max_rounds} rounds x 2 sides = {least} to "
                f"{most} runs, rounds added while a config is undecided; {when}; budget {self.budget_s / 60:g} min"
                + over)

    def horizon(self) -> int:
        """The rounds the looks spend the error over (``looks.planned_rounds``) at the run time known now."""
        return looks.planned_rounds(self.first, self.max_rounds, self.budget_s, self.per_run_s(), self.configs)

    def power_line(self, cv: float | None, threshold: float, source: str) -> str:
        """"" when the rounds the budget allows decide a slowdown of twice ``threshold`` in 80% or more of checks
        at process CV ``cv`` (``looks.power``); else what they decide and the budget that would decide 90%."""
        per = self.per_run_s()
        if per is None or cv is None:
            return ""
        horizon, slowdown = self.horizon(), 2 * threshold
        got = looks.power(horizon, self.first, cv, slowdown, threshold, self.configs)
        if got >= 0.8:
            return ""
        needed = looks.rounds_for(0.9, self.first, cv, slowdown, threshold, self.configs)
        what = (f"at ~{per:.0f} s a run, {horizon} rounds decide a {slowdown:.0%} slowdown in about "
                f"{5 * round(got * 20)}% (CV {cv:.1%} {source})")
        if needed is None:
            return what + ": the noise is too large for the rounds a check can afford; a quieter machine decides"
        minutes = 5 * math.ceil(needed * self.runs_per_round * per / 60 / 5)
        more = f" --max-rounds {needed}" if needed > self.max_rounds else ""
        return what + f": give --budget-min {minutes}{more} for 90%"

    def refusal(self, rounds_done: int, now: float | None = None) -> str:
        """Why round ``rounds_done + 1`` must not start ("" when it may)."""
        if rounds_done >= self.max_rounds:
            return f"the round budget --max-rounds {self.max_rounds} is spent"
        per = self.per_run_s()
        if rounds_done < self.first or per is None:
            return ""
        spent = (time.monotonic() if now is None else now) - self.started
        next_round = self.runs_per_round * per
        if spent + next_round <= self.budget_s:
            return ""
        return (f"time budget spent: another round would take ~{next_round / 60:.1f} min after {spent / 60:.1f} of "
                f"--budget-min {self.budget_s / 60:g}")

    def started_run(self) -> None:
        self._run_started = time.monotonic()

    def ended_run(self) -> None:
        self.run_s.append(time.monotonic() - self._run_started)

    def left_s(self, runs_done: int, rounds_planned: int) -> float | None:
        """Seconds left if the check measures ``rounds_planned`` rounds (None: not known yet)."""
        per = self.per_run_s()
        return None if per is None else max(0.0, (rounds_planned * self.runs_per_round - runs_done) * per)


class Progress:
    """One bar for the whole check with the time left (rich, in a terminal), or a plain line a run (a pipe)."""

    def __init__(self, clock: Clock, stream=None):
        self.clock, self.stream = clock, stream or sys.stderr
        self.rounds_planned = clock.first
        self._rich = None
        if _isatty(self.stream):
            from rich.console import Console
            from rich.progress import BarColumn, Progress as RichProgress, TextColumn, TimeRemainingColumn

            self._rich = RichProgress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/"
                                      "{task.total} runs"), TimeRemainingColumn(), console=Console(file=self.stream),
                                      transient=True)
            self._task = self._rich.add_task("check", total=clock.first * clock.runs_per_round)

    def __enter__(self) -> "Progress":
        if self._rich is not None:
            self._rich.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._rich is not None:
            self._rich.stop()

    def say(self, line: str) -> None:
        if self._rich is not None:
            self._rich.console.print(line, markup=False, highlight=False)
        else:
            print(line, file=self.stream, flush=True)

    def run(self, done: int, where: str, result: str | None) -> None:
        """Before (``result`` None) and after each run: ``done`` runs finished."""
        total = self.rounds_planned * self.clock.runs_per_round
        left = self.clock.left_s(done, self.rounds_planned)
        if self._rich is not None:
            self._rich.update(self._task, completed=done, total=total, description=where)
            return
        if result is not None:
            eta = f", ~{left / 60:.1f} min left" if left is not None else ""
            self.say(f"[{done}/{total}{eta}] {where}: {result}")

    def more_rounds(self, rounds: int) -> None:
        self.rounds_planned = rounds


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
