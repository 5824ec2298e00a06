"""The one rule that calls a config "regressed", for both kinds of check (no torch, no Hydra).

A gate asks: *is this config slower by more than the threshold?* So the null hypothesis is "the slowdown is
at most the threshold" (log ratio >= log(1 - threshold)), tested one-sided, and Holm's step-down procedure
keeps the family-wise error of one check at ``alpha`` however many configs it holds. The band a row shows is
the one the test used (criterion's rule): one-sided bounds at the level Holm tested that config at, so a row
is "regressed" exactly when its upper bound lies below 1 - threshold, and a band that holds 1 never sits
beside the word "regressed". A slowdown within the threshold (a machine 4% slower today, a 3% drift between
sessions) is the null itself, so it cannot raise an alarm more often than ``alpha``.

Three answers, as Pinpoint's DIFFERENT / SAME / UNKNOWN: **regressed** (the band's upper end, at Holm's level,
lies below 1 - threshold), **unchanged** (its lower end lies above 1 - threshold: whatever the slowdown, it is
within the threshold; the lower end is each config's own one-sided bound at ``alpha``, so a true slowdown past
the threshold is called unchanged in at most ``alpha`` of checks) and **undecided** (the band holds
1 - threshold: more rounds decide it). A check that adds rounds while undecided tests each look at the level of
a Lan-DeMets boundary (``harness.analysis.gate.looks``; Holm with group-sequential tests, Maurer and Bretz): the
family-wise error of "regressed" over configs and looks stays at ``alpha`` whenever it stops.

Used by the paired check (``harness.analysis.gate.paired``: rounds of REF and the working tree, one log ratio a
round) and by the stored-baseline check with its between-session term (``harness.analysis.gate.sessions``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy import stats as sps

from harness.analysis.stats.speedup import holm

ALPHA = 0.05  # family-wise error of one check


@dataclass(frozen=True)
class Effect:
    """log(new / old) throughput of one config, its standard error and degrees of freedom (inf: normal)."""

    diff: float
    se: float
    df: float

    @property
    def testable(self) -> bool:
        return math.isfinite(self.diff) and math.isfinite(self.se) and self.se >= 0 and self.df > 0


@dataclass(frozen=True)
class Decision:
    """What the gate says of one config: the ratio new/old, its one-sided bounds at ``level`` (the confidence
    Holm tested it at), the p-value of "slower by more than the threshold", and the verdict."""

    ratio: float
    lower: float
    upper: float
    level: float
    p_value: float
    regressed: bool
    improved: bool

    @property
    def has_band(self) -> bool:
        return not (math.isnan(self.lower) or math.isnan(self.upper))


def quantile(confidence: float, df: float) -> float:
    """The one-sided quantile of Student's t (the normal's for infinite df)."""
    return float(sps.norm.ppf(confidence) if math.isinf(df) else sps.t.ppf(confidence, df))


def decide(effects: list[Effect], thresholds: list[float], alpha: float = ALPHA,
           at_level: Callable[[float], float] | None = None,
           same_at: Callable[[float], float] | None = None) -> list[Decision]:
    """The gate's decision on every config of one check (the module docstring says why); ``at_level`` maps each of
    Holm's levels alpha / j to the nominal level of this look of a check that adds rounds, ``same_at`` the
    unchanged test's alpha (``harness.analysis.gate.looks``)."""
    if not effects:
        return []
    columns = [np.array([[getattr(e, name) for e in effects]], dtype=float) for name in ("diff", "se", "df")]
    testable = np.array([[e.testable for e in effects]])
    got = decide_arrays(*columns, np.asarray(thresholds, dtype=float), alpha, at_level, testable, same_at)
    return [Decision(*(float(got[k][0, i]) for k in ("ratio", "lower", "upper", "level", "p_value")),
                     bool(got["regressed"][0, i]), bool(got["improved"][0, i])) for i in range(len(effects))]


def decide_arrays(diff: np.ndarray, se: np.ndarray, df: np.ndarray, thresholds: np.ndarray, alpha: float = ALPHA,
                  at_level: Callable[[float], float] | None = None, testable: np.ndarray | None = None,
                  same_at: Callable[[float], float] | None = None) -> dict[str, np.ndarray]:
    """:func:`decide` on arrays (trials x configs, as the simulations ask it): ratio, lower, upper, level
    (the regression test's one-sided confidence), p_value, regressed, improved, unchanged.

    ``upper`` is the regression test's bound (Holm's level, at this look); ``lower`` the unchanged test's: each
    config on its own at ``alpha`` (``same_at(alpha)`` at a look), since calling a config unchanged claims nothing
    of the others: a true slowdown past the threshold is called unchanged in at most ``alpha`` of checks."""
    edge = np.log(1 - thresholds)
    if testable is None:
        testable = np.isfinite(diff) & np.isfinite(se) & (se >= 0) & (df > 0)
    dof = np.where(df > 0, df, 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        t = np.where(se > 0, (diff - edge) / np.where(se > 0, se, 1), np.where(diff < edge, -np.inf, np.inf))
        p = np.where(testable, sps.t.cdf(t, dof), np.nan)
    rejected, alphas = holm_arrays(p, alpha, at_level)
    same = alpha if same_at is None else same_at(alpha)
    with np.errstate(invalid="ignore", over="ignore"):  # one degree of freedom at a strict look reaches past floats
        upper = np.exp(diff + np.where(testable, sps.t.ppf(1 - alphas, dof) * se, np.nan))
        lower = np.exp(diff - np.where(testable, sps.t.ppf(1 - same, dof) * se, np.nan))
    # the upper bound below 1 - threshold is Holm's rejection itself; checked again so that the words and the band
    # can never disagree through rounding
    return {"ratio": np.exp(diff), "lower": lower, "upper": upper, "level": 1 - alphas, "p_value": p,
            "regressed": rejected & (upper < 1 - thresholds), "improved": lower > 1 + thresholds,
            "unchanged": lower > 1 - thresholds}


def holm_arrays(p: np.ndarray, alpha: float = ALPHA,
                at_level: Callable[[float], float] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Holm's step-down over the last axis of ``p`` (``speedup.holm``): which hypotheses are rejected, and the alpha
    each is shown at. A config Holm never reached (it stopped at an earlier one) is shown at the level where it
    stopped: its p-value is at least that config's, so its band holds the threshold too and never reads as a
    regression."""
    rejected, by_rank = holm(np.atleast_2d(p), alpha, at_level)
    rejected, by_rank = np.atleast_2d(rejected), np.atleast_2d(by_rank)
    stopped = np.where(rejected, np.inf, by_rank).min(axis=-1, keepdims=True)
    return rejected, np.minimum(by_rank, stopped)


STATUSES = ("regressed", "improved", "unchanged", "undecided")


def status(decision: Decision, threshold: float) -> str:
    """The gate's three answers (and improved): regressed (the band lies below 1 - threshold), unchanged (the band
    lies above it: any slowdown is within the threshold), undecided (the band holds 1 - threshold, or there is none:
    more rounds decide it); improved when the band lies above 1 + threshold."""
    if decision.regressed:
        return "regressed"
    if decision.improved:
        return "improved"
    if decision.has_band and decision.lower > 1 - threshold:
        return "unchanged"
    return "undecided"
