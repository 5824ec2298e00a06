"""Small statistics for speedups: medians, spreads, and the noise band a ratio must clear.

A rung's relative uncertainty is the larger of
  * the spread across repeats (half the range over the median), when there are 2 or more, and
  * the 95% bootstrap interval (scipy.stats.bootstrap) of the mean per-sample time within each run,
and never below a floor: one process cannot show the process-to-process variation that TorchBench
measured at up to 7% (two identical phase2 sweeps on our 2-core CPU differed by 6% on two rungs), so
a single repeat gets a wide floor (5%), several a narrow one (1%).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import numpy as np

BUSY_PCT = 10.0  # other processes' share of the CPUs above which a measurement is not trusted
FLOOR_ONE_REPEAT = 0.05
FLOOR_REPEATS = 0.01


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
                    random_state=np.random.default_rng(seed))
    low, high = res.confidence_interval
    return float((high - low) / 2 / samples.mean())


def rung_uncertainty(throughputs: list[float], step_ms_per_run: list[list[float]]) -> float:
    """Relative uncertainty of a rung's median throughput (see the module docstring)."""
    parts = [FLOOR_ONE_REPEAT if len(throughputs) < 2 else FLOOR_REPEATS]
    spread = relative_spread(throughputs)
    if spread is not None:
        parts.append(spread / 2)
    within = [u for u in (within_run_uncertainty(s) for s in step_ms_per_run) if u is not None]
    if within:
        parts.append(max(within))
    return max(parts)


@dataclass(frozen=True)
class Ratio:
    """A speedup with its noise band: ``value`` x, plausibly anywhere in [low, high]."""

    value: float
    low: float
    high: float

    @property
    def within_noise(self) -> bool:
        return self.low <= 1.0 <= self.high


def ratio(new: float, new_u: float, old: float, old_u: float) -> Ratio:
    value = new / old
    u = math.hypot(new_u, old_u)
    return Ratio(value, value * (1 - u), value * (1 + u))


def verdict(measured: Ratio, claim_low: float, claim_high: float) -> str:
    """Does the measurement confirm the claimed range, fall short of it, exceed it, or reverse it?"""
    if measured.high < claim_low:
        if claim_low >= 1.0 and measured.high < 1.0:
            return "reverses (slower)"
        if claim_low > 1.0 and measured.within_noise:
            return "falls short (no measurable change)"
        return "falls short"
    if measured.low > claim_high:
        return "exceeds"
    return "confirms"
