"""The one rule that calls a config "regressed", for both kinds of check (no torch, no Hydra).

A gate asks: *is this config slower by more than the threshold?* So the null hypothesis is "the slowdown is
at most the threshold" (log ratio >= log(1 - threshold)), tested one-sided, and Holm's step-down procedure
keeps the family-wise error of one check at ``alpha`` however many configs it holds. The band a row shows is
the one the test used (criterion's rule): one-sided bounds at the level Holm tested that config at, so a row
is "regressed" exactly when its upper bound lies below 1 - threshold, and a band that holds 1 never sits
beside the word "regressed". A slowdown within the threshold (a machine 4% slower today, a 3% drift between
sessions) is the null itself, so it cannot raise an alarm more often than ``alpha``.

Used by the paired check (``harness.analysis.gate.paired``: rounds of REF and the working tree, one log ratio a
round) and by the stored-baseline check with its between-session term (``harness.analysis.gate.sessions``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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


def p_beyond(effect: Effect, threshold: float) -> float:
    """One-sided p-value of "new is slower than old by more than ``threshold``" (small when it clearly is)."""
    if not effect.testable:
        return math.nan
    edge = math.log(1 - threshold)
    if effect.se == 0:
        return 0.0 if effect.diff < edge else 1.0
    t = (effect.diff - edge) / effect.se
    return float(sps.norm.cdf(t) if math.isinf(effect.df) else sps.t.cdf(t, effect.df))


def holm_levels(p_values: list[float], alpha: float = ALPHA) -> tuple[list[bool], list[float]]:
    """Holm's step-down (``speedup.holm``): which hypotheses are rejected, and the alpha each was tested at.

    A config Holm never reached (it stopped at an earlier one) is shown at the level where it stopped: its
    p-value is at least that config's, so its band holds the threshold too and never reads as a regression."""
    rejected, by_rank = holm(p_values, alpha)
    stopped = by_rank[~rejected].min() if (~rejected).any() else math.inf
    return rejected.tolist(), np.minimum(by_rank, stopped).tolist()


def decide(effects: list[Effect], thresholds: list[float], alpha: float = ALPHA) -> list[Decision]:
    """The gate's decision on every config of one check (the module docstring says why)."""
    p_values = [p_beyond(e, t) for e, t in zip(effects, thresholds)]
    rejected, levels = holm_levels(p_values, alpha)
    out = []
    for effect, threshold, p, reject, level in zip(effects, thresholds, p_values, rejected, levels):
        ratio = math.exp(effect.diff) if math.isfinite(effect.diff) else math.nan
        if not effect.testable:
            out.append(Decision(ratio, math.nan, math.nan, 1 - level, p, False, False))
            continue
        half = quantile(1 - level, effect.df) * effect.se
        lower, upper = math.exp(effect.diff - half), math.exp(effect.diff + half)
        # the upper bound below 1 - threshold is Holm's rejection itself; checked again so that the words and the
        # band can never disagree through rounding
        regressed = reject and upper < 1 - threshold
        out.append(Decision(ratio, lower, upper, 1 - level, p, regressed, lower > 1 + threshold))
    return out


def status(decision: Decision, threshold: float) -> str:
    """The word for a decision: regressed, improved, warned (past the threshold, not clearly) or unchanged."""
    if decision.regressed:
        return "regressed"
    if decision.improved:
        return "improved"
    if decision.ratio < 1 - threshold:
        return "warned"
    return "unchanged"
