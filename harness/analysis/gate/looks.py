"""When a check that adds rounds while undecided looks, and at what level (no torch, no Hydra).

``check --against`` measures ``first`` rounds, then looks after every second round (each config's sides are
balanced over an even number of rounds, ``harness.sweeps.against.order``) up to ``max_rounds``; it stops at the
first look where every config is decided (regressed, unchanged or improved), at ``max_rounds``, or before a
round that would end past its time budget. Each look tests Holm's levels alpha / j at the nominal level of an
O'Brien-Fleming type Lan-DeMets boundary spending alpha / j over the ``max_rounds`` budget
(``harness.analysis.stats.checkstats.look_level``, the sweeps' ``sequential`` machinery), so whatever
round it stops at, the family-wise error over configs and looks stays at 5%. Stopping before ``max_rounds``
(decided, or the time budget) only leaves error unspent. The information fraction of a look is
rounds / max_rounds: paired rounds are equally informative.

"Unchanged" is a test of its own (is the slowdown within the threshold?), each config at 5% with Pocock type
spending: it spends its error evenly over the looks, so the common case, a change that does nothing, is decided
after a few rounds instead of running to the budget (O'Brien-Fleming's early bands are several times wider).
Its error is a missed regression: a config slower than the threshold called unchanged in at most 5% of checks.
"""

from __future__ import annotations

import math
from typing import Callable

from harness.analysis.gate.rule import ALPHA
from harness.analysis.stats.checkstats import look_level
from harness.analysis.stats.speedup import power as band_power

REGRESSED_SPENDING = "obrien-fleming"  # strict early: a regression is called only on strong evidence
UNCHANGED_SPENDING = "pocock"  # even: a change well within the threshold is called unchanged after a few rounds


def look_rounds(first: int, max_rounds: int) -> list[int]:
    """The rounds after which the check looks: ``first``, then every second round, and ``max_rounds``."""
    if max_rounds <= first:
        return [max_rounds]
    return sorted(set(range(first, max_rounds + 1, 2)) | {max_rounds})


def fractions(rounds: int, first: int, max_rounds: int) -> tuple[float, ...]:
    """Information fractions of the looks made up to a look after ``rounds`` rounds: the planned looks before it,
    and this one (a check stopped by its time budget between two planned looks looks there too)."""
    return tuple(r / max_rounds for r in look_rounds(first, max_rounds) if r < rounds) + (rounds / max_rounds,)


def at_level(looked: tuple[float, ...], spending: str = REGRESSED_SPENDING) -> Callable[[float], float] | None:
    """A level alpha as tested at the last of the looks at ``looked`` (None: one look, plain alpha)."""
    if len(looked) <= 1 and (not looked or looked[-1] >= 1.0):
        return None
    return look_level(looked, spending)


def same_level(looked: tuple[float, ...]) -> Callable[[float], float] | None:
    """The unchanged test's alpha at the last of the looks at ``looked`` (Pocock spending: see the docstring)."""
    return at_level(looked, UNCHANGED_SPENDING)


def planned_rounds(first: int, max_rounds: int, budget_s: float, run_s: float | None, configs: int) -> int:
    """The looks' horizon: the rounds the time budget allows at ``run_s`` seconds a run (2 runs a config a round),
    at most ``max_rounds`` and at least ``first`` (the rounds before the first look always run); ``max_rounds``
    when the run time is not known yet. Spending the error over rounds the clock never allows leaves most of it
    unspent: at 30 s a run and 4 configs a 30-minute budget allows 7 rounds, not 12."""
    if run_s is None or not run_s > 0:
        return max_rounds
    allowed = int(budget_s // (2 * configs * run_s))
    return max(first, min(max_rounds, allowed))


def power(rounds: int, first: int, cv: float, slowdown: float, threshold: float, configs: int,
          df_lost: int = 2) -> float:
    """About how often a check whose looks end at ``rounds`` flags one config ``slowdown`` (0.10: 10%) slower, at a
    process CV ``cv``: the last look's one-sided test at Holm's first level alpha / configs (the earlier looks'
    share is left out: an approximation, within a few points of ``tests/test_looks_sim.py``), a round's log ratio
    carrying two runs' noise, ``rounds - df_lost`` degrees of freedom (the mean and the side order's term,
    ``paired.round_fit``; ``speedup.power``'s noncentral t)."""
    level = at_level(fractions(rounds, first, rounds))
    alpha = (level or (lambda a: a))(ALPHA / max(configs, 1))
    distance = math.log(1 - threshold) - math.log(1 - slowdown)
    return band_power(distance, cv * math.sqrt(2 / rounds), rounds - df_lost, 2 * alpha)


def rounds_for(wanted: float, first: int, cv: float, slowdown: float, threshold: float, configs: int,
               limit: int = 64) -> int | None:
    """The fewest rounds whose looks flag ``slowdown`` in ``wanted`` of checks (``power``); None beyond ``limit``."""
    for rounds in range(first, limit + 1):
        if power(rounds, first, cv, slowdown, threshold, configs) >= wanted:
            return rounds
    return None
