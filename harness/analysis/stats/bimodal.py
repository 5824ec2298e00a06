"""Bimodal runs: processes that land at one of two speeds (a GPU runner's clocks, a process placed on one of two
sockets), named instead of read as noise or an outlier (numpy only).

The test: the runs' log throughputs, sorted, split into two clusters at the cut with the least within-cluster sum
of squares (each cluster 2 runs or more); the statistic is the distance between the clusters' means in pooled
within-cluster standard deviations (n - 2 df). Its null distribution is that of normal runs of the same number
(the statistic does not depend on the mean or the spread), drawn once per count with a fixed seed
(``NULL_DRAWS``), so the p-value is the share of normal samples that split at least as cleanly. Two clusters
several within-cluster spreads apart are bimodal; a lone run far off is Grubbs' outlier, not this (a cluster
needs two runs). Seeded simulations: ``tests/test_bimodal_sim.py``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

NULL_DRAWS = 20000
MIN_SEPARATION = 4.0  # "several within-cluster spreads apart": never named closer than this, whatever the p-value
ADVICE = ("pin the process and the clocks (taskset/numactl, nvidia-smi --lock-gpu-clocks) or give each round more "
          "runs")


@dataclass(frozen=True)
class Bimodal:
    """Two clusters of runs: their sizes, their centres (the throughputs' geometric means), how many pooled
    within-cluster sds apart they are, and the p-value of that under normal runs."""

    low: int
    high: int
    low_centre: float
    high_centre: float
    separation: float
    p_value: float

    def describe(self) -> str:
        apart = self.high_centre / self.low_centre - 1
        return (f"bimodal: {self.low} run(s) near {self.low_centre:.4g} and {self.high} near {self.high_centre:.4g} "
                f"samples/s, {self.separation:.0f} within-cluster sds apart ({apart:.0%})")


def separation(logs: np.ndarray) -> np.ndarray:
    """The best two-cluster split's separation of each row of ``logs`` (..., n; n >= 4), in pooled within sds."""
    x = np.sort(logs, axis=-1)
    n = x.shape[-1]
    cut = np.arange(2, n - 1)  # the low cluster's size, each cluster 2 or more
    total, squares = np.cumsum(x, -1), np.cumsum(x * x, -1)
    low_sum, low_sq = total[..., cut - 1], squares[..., cut - 1]
    high_sum, high_sq = total[..., -1:] - low_sum, squares[..., -1:] - low_sq
    within = (low_sq - low_sum ** 2 / cut) + (high_sq - high_sum ** 2 / (n - cut))
    best = np.argmin(within, axis=-1)
    k = cut[best]
    pick = lambda a: np.take_along_axis(a, best[..., None], -1)[..., 0]  # noqa: E731
    gap = pick(high_sum) / (n - k) - pick(low_sum) / k
    sd = np.sqrt(np.maximum(pick(within), 0) / (n - 2))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(sd > 0, gap / np.where(sd > 0, sd, 1), np.where(gap > 0, np.inf, 0.0))


@functools.lru_cache(maxsize=64)
def _null(n: int) -> np.ndarray:
    """The separations of ``NULL_DRAWS`` normal samples of ``n`` runs, sorted (seeded: the same every time)."""
    return np.sort(separation(np.random.default_rng(n).normal(size=(NULL_DRAWS, n))))


def p_value(logs) -> float:
    """The share of normal samples of as many runs that split at least as cleanly (1.0 with fewer than 4 runs)."""
    x = np.asarray(logs, dtype=float)
    if x.size < 4:
        return 1.0
    null = _null(x.size)
    return float((null.size - np.searchsorted(null, separation(x), side="left") + 1) / (null.size + 1))


def bimodal(samples_per_s, level: float = 0.01) -> Bimodal | None:
    """The two clusters of these runs when they are bimodal at ``level`` (and ``MIN_SEPARATION`` sds apart), else
    None. Runs that are not positive numbers are left out."""
    values = [float(v) for v in samples_per_s if v is not None and math.isfinite(float(v)) and float(v) > 0]
    if len(values) < 4:
        return None
    logs = np.sort(np.log(values))
    d = float(separation(logs))
    p = p_value(logs)
    if not (p <= level and d >= MIN_SEPARATION):
        return None
    n = len(logs)
    cuts = [(float(((logs[:k] - logs[:k].mean()) ** 2).sum() + ((logs[k:] - logs[k:].mean()) ** 2).sum()), k)
            for k in range(2, n - 1)]
    k = min(cuts)[1]
    return Bimodal(k, n - k, float(np.exp(logs[:k].mean())), float(np.exp(logs[k:].mean())), d, p)
