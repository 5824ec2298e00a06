"""Change points over a config's sessions: where its throughput stepped, and between which commits.

In the spirit of asv's ``step_detect``: the sessions' levels (log of each session's geometric mean throughput)
are taken as piecewise constant plus noise, and the best piecewise-constant fit is the one that minimises

    sum over sessions of 2 huber(c, (y_i - m_segment) / sigma)  +  penalty x (number of segments - 1)

over segments of at least ``MIN_SEGMENT`` sessions, solved exactly by dynamic programming (O(n^2) segments for n
sessions; histories are hundreds of sessions at most). ``huber`` is ``scipy.special.huber``: a session's squared
residual near the segment's level, growing only linearly past ``HUBER_C`` noise sds, so one odd session (a
neighbour's job, a heavy tail of the session noise) cannot pay for a step on its own; ``m_segment`` is the
segment's median. No segment is shorter than 3 sessions: one or two odd sessions are not a level.
Every session weighs the same: a session's level carries its session effect, which its runs share, so more runs
do not make it much more certain (the gate's between-session term, ``harness.analysis.gate.sessions``).
``sigma`` is the noise of one session's level, estimated from the series itself, robustly (a step moves one
difference, not the median): 1.4826 x the median absolute difference of successive levels / sqrt(2), never below
``MIN_SD``. The penalty grows as BIC's with the number of sessions, ``PENALTY_PER_LOG_N`` x log n.

Successive steps the same way are one **slope** (a drift: the level moved over several sessions), reported once,
from the level before its first step to the level after its last; a slope has no one commit to bisect.
The rates, from seeded simulations (``tests/test_changepoints.py``), are in the guide "Statistics".

A step is reported with the commits around it: the last session before it (GOOD) and the first after (BAD); a
step down by more than the threshold is a regression (``history --regressions``), and ``python -m harness bisect
GOOD BAD`` finds the commit. No torch, no Hydra.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import huber

MIN_SD = 0.005  # a handful of sessions cannot prove the sessions agree closer than this
PENALTY_PER_LOG_N = 6.0
HUBER_C = 1.345  # noise sds: the usual 95%-efficient Huber constant
MIN_SEGMENT = 3  # sessions: one or two odd sessions are not a level
MIN_SESSIONS = 2 * MIN_SEGMENT  # fewer, and no step can be placed


@dataclass(frozen=True)
class Step:
    """A change of level between session ``index - 1`` and session ``index`` (indices into the series); a slope
    (``steps`` > 1 successive steps the same way) ends at session ``end`` (its last step's index)."""

    index: int
    before: float  # the level before (samples/s, geometric mean of the segment)
    after: float
    end: int = -1  # a slope: the index of its last step (-1: a single step, ``index``)
    steps: int = 1

    @property
    def ratio(self) -> float:
        return self.after / self.before

    @property
    def slope(self) -> bool:
        return self.steps > 1

    @property
    def last(self) -> int:
        """The first session after the whole change (``index`` for a step)."""
        return self.end if self.slope else self.index


def noise_sd(levels: np.ndarray) -> float:
    """The sd of one session's log level, from successive differences (robust to the steps themselves)."""
    if len(levels) < 3:
        return MIN_SD
    mad = float(np.median(np.abs(np.diff(levels))))
    return max(1.4826 * mad / math.sqrt(2), MIN_SD)


def _costs(levels: np.ndarray, sigma: float) -> np.ndarray:
    """``cost[i, j]``: sessions i..j-1 as one segment (at least ``MIN_SEGMENT`` long; inf otherwise)."""
    n = len(levels)
    cost = np.full((n + 1, n + 1), np.inf)
    for length in range(MIN_SEGMENT, n + 1):  # every segment of one length at once
        windows = np.lib.stride_tricks.sliding_window_view(levels, length)
        residuals = (windows - np.median(windows, axis=1, keepdims=True)) / sigma
        starts = np.arange(n - length + 1)
        cost[starts, starts + length] = 2.0 * huber(HUBER_C, residuals).sum(axis=1)
    return cost


def segments(levels: np.ndarray, sigma: float, penalty: float) -> list[int]:
    """The starts of the segments of the best penalised piecewise-constant fit (the first is 0)."""
    n = len(levels)
    cost = _costs(levels, sigma)
    best, start = np.full(n + 1, np.inf), np.zeros(n + 1, dtype=int)
    best[0] = 0.0
    for j in range(MIN_SEGMENT, n + 1):
        options = best[:j] + cost[:j, j] + np.where(np.arange(j) > 0, penalty, 0.0)
        start[j] = int(np.argmin(options))
        best[j] = options[start[j]]
    starts, j = [], n
    while j > 0:
        starts.append(int(start[j]))
        j = int(start[j])
    return sorted(starts)


def detect(samples_per_s: list[float]) -> list[Step]:
    """The steps and slopes of one config's series of sessions (in time order): their place and the levels
    around them."""
    values = np.asarray(samples_per_s, dtype=float)
    if len(values) < MIN_SESSIONS:
        return []
    levels = np.log(values)
    sigma = noise_sd(levels)
    starts = segments(levels, sigma, PENALTY_PER_LOG_N * math.log(len(levels)))
    bounds = starts + [len(levels)]
    means = [float(np.exp(levels[a:b].mean())) for a, b in zip(bounds, bounds[1:])]
    return _slopes([Step(s, means[k], means[k + 1]) for k, s in enumerate(starts[1:])])


def _slopes(steps: list[Step]) -> list[Step]:
    """Successive steps the same way joined into one slope."""
    out: list[Step] = []
    for step in steps:
        prev = out[-1] if out else None
        if prev is not None and (prev.ratio < 1) == (step.ratio < 1):
            out[-1] = Step(prev.index, prev.before, step.after, step.index, prev.steps + 1)
        else:
            out.append(step)
    return out
