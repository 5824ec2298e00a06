"""Change points over a config's sessions: where its throughput stepped, and between which commits.

In the spirit of asv's ``step_detect``: the sessions' levels (log of each session's geometric mean throughput)
are taken as piecewise constant plus noise, and the best piecewise-constant fit is the one that minimises

    sum over sessions of (y_i - mu_segment)^2 / sigma^2  +  penalty x (number of segments - 1)

solved exactly by dynamic programming (O(n^2) for n sessions; histories are hundreds of sessions at most).
Every session weighs the same: a session's level carries its session effect, which its runs share, so more runs
do not make it much more certain (the gate's between-session term, ``harness.analysis.gate.sessions``).
``sigma`` is the noise of one session's level,
estimated from the series itself, robustly (a step moves one difference, not the median): 1.4826 x the median
absolute difference of successive levels / sqrt(2), never below ``MIN_SD``. The penalty grows as BIC's with the
number of sessions, ``PENALTY_PER_LOG_N`` x log n, three times BIC's 2 log n for a change (a level and a place):
the robust sigma of a short series is often too small, and a false step sends someone bisecting. Seeded
simulations (``tests/test_changepoints.py``): a flat series with a 2% session sd shows a step in 1.5% of
histories of 20 sessions (8% of 8); a 10% step in the middle is found at its place in 97% of 20.

A step is reported with the commits around it: the last session before it (GOOD) and the first after (BAD); a
step down by more than the threshold is a regression (``history --regressions``), and ``python -m harness bisect
GOOD BAD`` finds the commit. No torch, no Hydra.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MIN_SD = 0.005  # a handful of sessions cannot prove the sessions agree closer than this
PENALTY_PER_LOG_N = 6.0
MIN_SESSIONS = 5  # fewer, and a step cannot be told from one odd session


@dataclass(frozen=True)
class Step:
    """A change of level between session ``index - 1`` and session ``index`` (indices into the series)."""

    index: int
    before: float  # the level before (samples/s, geometric mean of the segment)
    after: float

    @property
    def ratio(self) -> float:
        return self.after / self.before


def noise_sd(levels: np.ndarray) -> float:
    """The sd of one session's log level, from successive differences (robust to the steps themselves)."""
    if len(levels) < 3:
        return MIN_SD
    mad = float(np.median(np.abs(np.diff(levels))))
    return max(1.4826 * mad / math.sqrt(2), MIN_SD)


def segments(levels: np.ndarray, sigma: float, penalty: float) -> list[int]:
    """The starts of the segments of the best penalised piecewise-constant fit (the first is 0)."""
    n = len(levels)
    cw, cy, cyy = (np.concatenate([[0.0], np.cumsum(a)]) for a in (np.ones(n), levels, levels ** 2))

    def cost(i: int, j: int) -> float:  # sessions i..j-1 as one segment
        sw, sy = cw[j] - cw[i], cy[j] - cy[i]
        return (cyy[j] - cyy[i] - sy * sy / sw) / sigma ** 2

    best, start = np.zeros(n + 1), np.zeros(n + 1, dtype=int)
    for j in range(1, n + 1):
        options = [best[i] + cost(i, j) + (penalty if i > 0 else 0.0) for i in range(j)]
        start[j] = int(np.argmin(options))
        best[j] = options[start[j]]
    starts, j = [], n
    while j > 0:
        starts.append(int(start[j]))
        j = int(start[j])
    return sorted(starts)


def detect(samples_per_s: list[float]) -> list[Step]:
    """The steps of one config's series of sessions (in time order): their place and the levels around them."""
    values = np.asarray(samples_per_s, dtype=float)
    if len(values) < MIN_SESSIONS:
        return []
    levels = np.log(values)
    sigma = noise_sd(levels)
    starts = segments(levels, sigma, PENALTY_PER_LOG_N * math.log(len(levels)))
    bounds = starts + [len(levels)]
    means = [float(np.exp(levels[a:b].mean())) for a, b in zip(bounds, bounds[1:])]
    return [Step(s, means[k], means[k + 1]) for k, s in enumerate(starts[1:])]
