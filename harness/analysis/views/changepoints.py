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
The penalty grows as BIC's with the number of sessions, ``PENALTY_PER_LOG_N`` x log n.

Sessions are not always independent: a machine's speed can wander over days, so that neighbouring sessions sit
close together (an AR(1) with positive rho). Successive differences then understate the sd of a level by about
sqrt(1 - rho), and the mean of a segment is less certain than its length says (its effective number of sessions is
about n (1 - rho) / (1 + rho)): with the sd of successive differences (the rule before), a flat history of 20
sessions wandering with rho 0.5 showed a step in 12% of histories, with rho 0.7 in 32%. Three stages, so that
independent sessions keep what they had:

1. a first fit with ``noise_sd`` (successive differences, robust to a step, which moves one difference), only to
   place the steps;
2. ``sigma`` (:func:`session_sd`): the mean over lags 1 to ``LAGS`` of the robust sd of the differences at that lag
   *within* the first fit's segments (a step is no difference there), each lag's differences centred on their median
   (a drift moves them alike). Independent sessions: every lag estimates the sd, so nothing changes; a wander shows
   at the longer lags, whose differences approach the level's whole spread. The fit with ``sigma``;
3. rho (:func:`autocorrelation`): the lag-1 autocorrelation of the sessions around that fit's segments (each
   residual clipped at ``HUBER_C`` sds), within [0, ``RHO_MAX``]. Where it is above 0 the fit is made again with the
   penalty x (1 + rho) / (1 - rho), the effective-sample-size factor: a step must stand out of the long-run
   variance of the sessions, not only of one session (stage 2 alone still named a step in 7% of flat histories at
   rho 0.5, of 20 sessions and of 60). A change of the fit of stage 2 that this one has not
   (none within 2 sessions) is reported **undecided** (``Step.wander``: that rho): a move of the level, but within
   the sessions' wander, so the sweeps cannot tell a step from a drift, and no bisect is proposed for it.

Why not a plain estimate of rho and its long-run correction alone: from 20 sessions a robust estimate of rho (the
ratio of lag-2 to lag-1 differences) spread from -0.6 to 1.3 (10th to 90th percentile) on independent sessions, and
a step inflates it; its long-run factor found the 10% drop in 67% of histories instead of 99%. The residuals'
autocorrelation around a fit is steadier (sd 0.2 at 20 sessions) but biased low (at 20 sessions it averages 0.4 for
a true 0.7, less where a false step took up part of the wander); the longer lags of stage 2 need no estimate of rho
at all. What is left: at 20 sessions and rho 0.7 a step is still named in 12% of flat histories (rho 0.5: 4%; 60
sessions: under 3% up to rho 0.7). The rates, from seeded simulations (``tests/test_changepoints.py``), are in
the guide "Statistics".

Successive steps the same way are one **slope** (a drift: the level moved over several sessions), reported once,
from the level before its first step to the level after its last; a slope has no one commit to bisect, and is
undecided only if all its steps are.

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
LAGS = 4  # the session sd: differences at lags 1 to 4 (a wander of the sessions shows at the longer lags)
MIN_PAIRS = 4  # a lag with fewer differences within segments is left out of the session sd
RHO_MAX = 0.8  # the autocorrelation that scales the penalty: at most a factor (1 + 0.8) / (1 - 0.8) = 9


@dataclass(frozen=True)
class Step:
    """A change of level between session ``index - 1`` and session ``index`` (indices into the series); a slope
    (``steps`` > 1 successive steps the same way) ends at session ``end`` (its last step's index)."""

    index: int
    before: float  # the level before (samples/s, geometric mean of the segment)
    after: float
    end: int = -1  # a slope: the index of its last step (-1: a single step, ``index``)
    steps: int = 1
    wander: float = 0.0  # > 0: undecided, within the wander of sessions autocorrelated this much (a step or a drift)

    @property
    def ratio(self) -> float:
        return self.after / self.before

    @property
    def slope(self) -> bool:
        return self.steps > 1

    @property
    def undecided(self) -> bool:
        return self.wander > 0

    @property
    def last(self) -> int:
        """The first session after the whole change (``index`` for a step)."""
        return self.end if self.slope else self.index


def noise_sd(levels: np.ndarray) -> float:
    """The sd of one session's log level, from successive differences (robust to the steps themselves): the scale
    of the first fit, which only places the steps that :func:`session_sd` then leaves out."""
    if len(levels) < 3:
        return MIN_SD
    mad = float(np.median(np.abs(np.diff(levels))))
    return max(1.4826 * mad / math.sqrt(2), MIN_SD)


def session_sd(levels: np.ndarray, starts: list[int]) -> float:
    """The sd of one session's log level: the mean over lags 1 to ``LAGS`` of 1.4826 x the median absolute
    difference at that lag / sqrt(2), of the pairs within one segment of ``starts`` (a step between them left out),
    each lag's differences centred on their median (a drift moves them all alike). Independent sessions: every lag
    estimates the sd; sessions that wander (autocorrelated) differ less at lag 1 than at longer lags."""
    segment = np.repeat(np.arange(len(starts)), np.diff(starts + [len(levels)]))
    scales = []
    for lag in range(1, LAGS + 1):
        diffs = (levels[lag:] - levels[:-lag])[segment[lag:] == segment[:-lag]]
        if len(diffs) >= MIN_PAIRS:
            scales.append(1.4826 * float(np.median(np.abs(diffs - np.median(diffs)))) / math.sqrt(2))
    return max(float(np.mean(scales)), MIN_SD) if scales else noise_sd(levels)


def autocorrelation(levels: np.ndarray, starts: list[int], sigma: float) -> float:
    """The lag-1 autocorrelation of the sessions around their segments' medians, each residual clipped at
    ``HUBER_C`` sds (one odd session cannot make it), within [0, ``RHO_MAX``]."""
    fitted = np.repeat([np.median(part) for part in np.split(levels, starts[1:])], np.diff(starts + [len(levels)]))
    residuals = np.clip((levels - fitted) / sigma, -HUBER_C, HUBER_C)
    residuals = residuals - residuals.mean()
    total = float(np.sum(residuals**2))
    rho = float(np.sum(residuals[1:] * residuals[:-1])) / total if total > 0 else 0.0
    return min(max(rho, 0.0), RHO_MAX)


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
    return _best(_costs(levels, sigma), penalty)


def _best(cost: np.ndarray, penalty: float) -> list[int]:
    """The starts of the segments that minimise the costs plus ``penalty`` a step (dynamic programming)."""
    n = len(cost) - 1
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
    """The steps, slopes and undecided moves of one config's series of sessions (in time order): their place and
    the levels around them."""
    values = np.asarray(samples_per_s, dtype=float)
    if len(values) < MIN_SESSIONS:
        return []
    levels = np.log(values)
    penalty = PENALTY_PER_LOG_N * math.log(len(levels))
    sigma = session_sd(levels, segments(levels, noise_sd(levels), penalty))
    cost = _costs(levels, sigma)
    fit = _best(cost, penalty)
    rho = autocorrelation(levels, fit, sigma)
    final = _best(cost, penalty * (1 + rho) / (1 - rho)) if rho > 0 else fit
    undecided = [Step(s, before, after, wander=rho) for s, before, after in _moves(levels, fit)
                 if all(abs(s - f) >= MIN_SEGMENT for f in final[1:])]
    steps = [Step(s, before, after) for s, before, after in _moves(levels, final)]
    return _slopes(sorted(steps + undecided, key=lambda step: step.index))


def _moves(levels: np.ndarray, starts: list[int]) -> list[tuple[int, float, float]]:
    """Each boundary of ``starts`` but the first, with the levels (samples/s) of the segments either side."""
    bounds = starts + [len(levels)]
    means = [float(np.exp(levels[a:b].mean())) for a, b in zip(bounds, bounds[1:])]
    return [(s, means[k], means[k + 1]) for k, s in enumerate(starts[1:])]


def _slopes(steps: list[Step]) -> list[Step]:
    """Successive steps the same way joined into one slope (undecided only if all its steps are)."""
    out: list[Step] = []
    for step in steps:
        prev = out[-1] if out else None
        if prev is not None and (prev.ratio < 1) == (step.ratio < 1):
            out[-1] = Step(prev.index, prev.before, step.after, step.index, prev.steps + 1,
                           min(prev.wander, step.wander))
        else:
            out.append(step)
    return out
