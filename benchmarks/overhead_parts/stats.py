"""The rounds' statistics: the median with a 95% bootstrap band of it, and a verdict only from enough rounds."""

from __future__ import annotations

import random
import statistics

MIN_ROUNDS = 5  # fewer rounds than this give no verdict: a bootstrap of two or three values says nothing


def median_band(values: list[float], draws: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """The median and a 95% bootstrap band of it (rounds resampled: the round is the unit, not the step)."""
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(draws))
    return statistics.median(values), medians[int(0.025 * draws)], medians[int(0.975 * draws) - 1]


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
