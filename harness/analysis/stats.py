"""Small statistics for speedups: medians, spreads, a speedup with its band, and verdicts on claims.

The band itself comes from the run-level noise model in ``harness.analysis.noise_model``; this module
holds what every caller shares (``Ratio``, ``verdict``) and the within-run step bootstrap.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import numpy as np

BUSY_PCT = 10.0  # other processes' share of the CPUs above which a measurement is not trusted


def median(values) -> float | None:
    values = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(values) if values else None


def relative_spread(values) -> float | None:
    """(max - min) / median over repeats; None with fewer than two."""
    values = [v for v in values if v is not None and not math.isnan(v)]
    if len(values) < 2:
        return None
    return (max(values) - min(values)) / statistics.median(values)


def within_run_uncertainty(step_ms, seed: int = 0) -> float | None:
    """Relative half-width of the 95% bootstrap interval of the mean step time of one run."""
    samples = np.asarray(step_ms, dtype=float)
    if samples.size < 5:
        return None
    from scipy.stats import bootstrap

    res = bootstrap((samples,), np.mean, confidence_level=0.95, n_resamples=2000, method="percentile",
                    rng=np.random.default_rng(seed))
    low, high = res.confidence_interval
    return float((high - low) / 2 / samples.mean())


@dataclass(frozen=True)
class Ratio:
    """A speedup with its 95% band: ``value`` x, plausibly anywhere in [low, high].

    ``runs`` is the number of runs on the smaller side (it scales the band in ``repeats_to_decide``);
    ``method`` says which part of the noise model made the band.
    """

    value: float
    low: float
    high: float
    runs: int = 1
    method: str = ""

    @property
    def within_noise(self) -> bool:
        return self.low <= 1.0 <= self.high


def verdict(measured: Ratio, claim_low: float, claim_high: float) -> str:
    """Confirms, inconclusive, falls short, exceeds or reverses: the band against the claimed range.

    A claim is confirmed only when the band overlaps it AND excludes no change (1.0), unless the claim
    itself includes 1. A band holding both 1 and part of the claim cannot tell them apart: inconclusive,
    with the repeats that would likely decide.
    """
    if measured.high < claim_low:
        if claim_low >= 1.0 and measured.high < 1.0:
            return "reverses (slower)"
        if claim_low > 1.0 and measured.within_noise:
            return "falls short (no measurable change)"
        return "falls short"
    if measured.low > claim_high:
        return "exceeds"
    if measured.within_noise and not claim_low <= 1.0 <= claim_high:
        runs = repeats_to_decide(measured, claim_low, claim_high)
        return "inconclusive (" + (f"~{runs} repeats would decide)" if runs else "more than 50 repeats to decide)")
    return "confirms"


def repeats_to_decide(measured: Ratio, claim_low: float, claim_high: float, limit: int = 50) -> int | None:
    """Runs per side that would likely turn an inconclusive band into a verdict, if the ratio held.

    The band shrinks like 1/sqrt(runs); it decides once it excludes 1 (confirms) or the claim (falls
    short / exceeds), whichever needs less. None when even ``limit`` runs would not.
    """
    half = (math.log(measured.high) - math.log(measured.low)) / 2
    value = math.log(measured.value)
    to_one = abs(value)
    to_claim = max(math.log(claim_low) - value, value - math.log(claim_high), 0.0)
    needed = max(to_one, to_claim) if to_claim > 0 else to_one
    if needed <= 0:
        return None
    runs = math.ceil(max(measured.runs, 1) * (half / needed) ** 2)
    return runs if runs <= limit else None
