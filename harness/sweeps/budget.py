"""How long a sweep's round will take, said before it starts, and what ``sweep.budget_min`` lets start.

* **The estimate.** Before the first round: the store's runs of the same settings on this machine (each rung's
  config hash, this host, ``phase_wall_s``: the run's whole wall time, launch to teardown), a rung the store will
  lend costing nothing; none when a rung to measure has no such run. After a round: the runs measured so far
  (``rounds.RoundPlan``).
* **The budget** bounds the sweep's wall time (``sweep.repeats=auto``; with ``repeats=N`` when the user gives
  ``sweep.budget_min``): a round whose estimate does not fit in what is left is not started, a run is not started
  once the budget is spent, and a run in flight finishes. So a sweep ends within its budget plus one run; a first
  round whose estimate is over the whole budget is not started at all (exit 2, nothing measured), naming the budget
  that would fit.
"""

from __future__ import annotations

import math
import socket
import statistics

from harness import config as config_mod
from harness.store import load_runs
from harness.sweeps import rungs as rungs_mod

FEWER_STEPS = "measure.steps=N (fewer steps a run)"


def stored_round(ctx: rungs_mod.SweepContext, machine, done: set[tuple[int, int]]) -> tuple[float, int] | None:
    """(seconds, stored runs read) of the first round from the store's runs of its settings on this machine; None
    when a rung to measure has none (or there is no machine: runs a caller fakes)."""
    if machine is None:
        return None
    seconds, runs, hashes = 0.0, 0, {}
    for rung in ctx.ladder.rungs:
        if (rung.index, 0) in done:
            continue
        try:
            cfg = rungs_mod.rung_config(ctx, rung.index, machine)
        except ValueError:
            return None
        if not rungs_mod.would_be_cached(ctx, cfg):
            hashes[rung.index] = config_mod.config_hash(cfg)
    if not hashes:
        return 0.0, 0
    try:
        stored = load_runs(ctx.results_dir, columns=["config_hash", "hostname", "status", "phase_wall_s"],
                           where={"config_hash": sorted(set(hashes.values()))})
    except ValueError:  # no results folder yet
        return None
    stored = stored[(stored["hostname"] == socket.gethostname()) & (stored["status"] == "ok")
                    & stored["phase_wall_s"].notna()]
    for config_hash in hashes.values():
        walls = stored.loc[stored["config_hash"] == config_hash, "phase_wall_s"].astype(float).tolist()
        if not walls:
            return None
        seconds, runs = seconds + statistics.median(walls), runs + len(walls)
    return seconds, runs


def first_round_line(estimate: tuple[float, int] | None, budget_s: float | None) -> str:
    """What is said before the first round: its estimate, or that there is none and how the budget then acts."""
    budget = f"; sweep.budget_min={budget_s / 60:g}" if budget_s is not None else ""
    if estimate is None:
        how = (": the budget is checked before each run, so the sweep ends within it plus one run" if budget
               else "")
        return f"round 1: no estimate yet (a rung to measure has no stored run of its settings here){budget}{how}"
    seconds, runs = estimate
    if not runs:
        return "round 1: nothing to measure (every rung is in the store)"
    return f"round 1: ~{seconds / 60:.1f} min, estimated from {runs} stored run(s) of these settings here{budget}"


def first_round_refusal(estimate: tuple[float, int] | None, budget_s: float | None) -> str:
    """Why the first round must not start ("" when it may): its estimate is over the whole budget."""
    if estimate is None or budget_s is None or estimate[0] <= budget_s:
        return ""
    return (f"stop: the first round would take ~{estimate[0] / 60:.1f} min (from {estimate[1]} stored run(s) of "
            f"these settings here), more than sweep.budget_min={budget_s / 60:g}: give "
            f"sweep.budget_min={give(estimate[0])} to measure it, or {FEWER_STEPS}; nothing was measured")


def give(seconds: float) -> int:
    """The whole minutes a budget needs to hold ``seconds``."""
    return max(1, math.ceil(seconds / 60))
