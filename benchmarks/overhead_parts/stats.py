"""The rounds' statistics: the median with a distribution-free 95% band of it, and a verdict only from enough rounds.

The band is the confidence interval of the median from order statistics (scipy.stats.quantile_test's): the
rounds ranked, the band runs from the k-th lowest to the k-th highest, k the largest rank whose binomial tail
leaves at most 2.5% on each side. It holds the true median at least 95% of the time whatever the rounds'
continuous distribution (12 rounds: the 3rd to the 10th, 96.1%). A percentile bootstrap of the median, used before,
held it only 92-94% of the time at 12 and 24 rounds, and showed ">= 0.98" at a true median of 0.98 in 2.6-3.4% of
simulated sets, more than the 2.5% a side a 95% band allows (tests/test_overhead_band_sim.py). Fewer than 6 rounds
give no such band: even their whole range holds the median less than 95% of the time (5 rounds: 93.75%).
"""

from __future__ import annotations

import functools
import math
import statistics

LEVEL = 0.95
MIN_ROUNDS = 6  # fewer rounds than this give no 95% band of the median (their whole range holds it < 95% of the time)


@functools.lru_cache(maxsize=None)
def band_ranks(rounds: int) -> tuple[int, int] | None:
    """The 1-based ranks of the rounds that bound the 95% band of the median among ``rounds`` values, or None
    when so few rounds give no such band. scipy's own interval taken on the ranks themselves, so that a
    simulation of thousands of sets costs a sort each."""
    if rounds < MIN_ROUNDS:
        return None
    from scipy import stats  # noqa: PLC0415 (a second to import: only when a band is wanted)

    ci = stats.quantile_test(list(range(1, rounds + 1)), q=(rounds + 1) / 2, p=0.5).confidence_interval(LEVEL)
    return int(ci.low), int(ci.high)


def median_band(values: list[float]) -> tuple[float, float, float]:
    """The median and its distribution-free 95% band (the rounds are the unit, not the steps); the band's ends are
    NaN with fewer than :data:`MIN_ROUNDS` rounds."""
    mid = statistics.median(values)
    ranks = band_ranks(len(values))
    if ranks is None:
        return mid, math.nan, math.nan
    ranked = sorted(values)
    return mid, ranked[ranks[0] - 1], ranked[ranks[1] - 1]


def verdict(low: float, high: float, rounds: int, target: float = 0.99) -> str:
    """What a band of a ratio shows against ``target``, from at least :data:`MIN_ROUNDS` rounds."""
    if rounds < MIN_ROUNDS:
        return f"no verdict from {rounds} round(s) (at least {MIN_ROUNDS})"
    if low >= target:
        return f">= {target} shown"
    if high < target:
        return f"below {target}"
    return f"inconclusive: the band straddles {target}"


def summary(label: str, values: list[float]) -> None:
    """One line: the rounds' ratios' median, its band, their range and the verdict."""
    mid, low, high = median_band(values)
    print(f"{label}: median {mid:.3f}, 95% band of the median [{low:.3f}-{high:.3f}] "
          f"(rounds {min(values):.3f}-{max(values):.3f}, {len(values)} rounds): {verdict(low, high, len(values))}")
