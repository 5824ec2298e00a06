"""Seeded simulations of the overhead benchmark's band of the median (``overhead_parts/stats.py``: ``median_band``
and ``verdict``; ``overhead_parts/as_users.py``: ``agreement``), at 12, 24 and 36 rounds, under three models of a
round's ratio like the quiet rounds of a 2-core AMD EPYC (0.92-1.04 over 12 rounds): normal with an sd of 0.035;
Student's t with 3 degrees of freedom, scaled to the same sd (heavier tails); and a skewed mixture, 30% of the
rounds from a slower process state 8% lower (each part's sd 0.025). The band must hold the true median at least
95% of the time (asserted >= 0.945 over 2,000 sets; it reads 0.957-0.982), and a verdict must be false at most
2.5% of the time (over 6,000 sets): ">= 0.98 shown" when the true median is 0.97 or exactly 0.98 (it reads 1.0-2.1%
at 0.98), "within 2% shown" when it is 0.975 or exactly 0.98 or 1.02 (at most 1.7%). The percentile bootstrap of
the median used before (2,000 draws) fails 14 of these 27 coverage and ">= 0.98" cases: coverage 0.923-0.944 at 12
and 24 rounds under every model, ">= 0.98 shown" at a true 0.98 in 2.6-3.4% of sets. Seconds: a band is a sort."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
import scipy.stats
from scipy.optimize import brentq

from tests.conftest import REPO

sys.path.append(str(REPO / "benchmarks"))  # where the overhead benchmark's parts are

from overhead_parts import as_users, stats  # noqa: E402

SETS = 2000  # sets a coverage is estimated from: 0.961 (the rule at 12 rounds) is 3.7 sds above 0.945
VERDICT_SETS = 6000  # a verdict's error rate: at a true median on the target the rule's is 0.019, 3.2 sds below 0.025
SD = 0.035
PART_SD, SLOW, SLOW_SHARE = 0.025, 0.08, 0.3
# the mixture's centre that puts its median at 0: 0.7 N(c, s) + 0.3 N(c - 0.08, s) has half its mass below 0
MIX_CENTRE = brentq(lambda c: (1 - SLOW_SHARE) * scipy.stats.norm.cdf(-c / PART_SD)
                    + SLOW_SHARE * scipy.stats.norm.cdf((SLOW - c) / PART_SD) - 0.5, -0.2, 0.2)


def normal(rng: np.random.Generator, median: float, n: int) -> np.ndarray:
    return median + SD * rng.standard_normal(n)


def heavy(rng: np.random.Generator, median: float, n: int) -> np.ndarray:
    return median + SD / math.sqrt(3) * rng.standard_t(3, n)  # t3's sd is sqrt(3)


def skewed(rng: np.random.Generator, median: float, n: int) -> np.ndarray:
    slow = rng.random(n) < SLOW_SHARE
    return median + MIX_CENTRE - SLOW * slow + PART_SD * rng.standard_normal(n)


MODELS = {"normal": normal, "t3": heavy, "slow-state mixture": skewed}


def bands(model: str, median: float, n: int, seed: int, sets: int = SETS) -> list[tuple[float, float]]:
    """The (low, high) band of ``sets`` simulated sets of ``n`` rounds whose true median is ``median``."""
    rng = np.random.default_rng(seed)
    return [stats.median_band(list(MODELS[model](rng, median, n)))[1:] for _ in range(sets)]


def test_the_mixtures_median_is_where_it_is_put():
    draws = skewed(np.random.default_rng(0), 1.0, 400_000)
    assert np.median(draws) == pytest.approx(1.0, abs=5e-4)
    assert np.mean(draws) == pytest.approx(0.99, abs=1e-3)  # the slow state pulls the mean 1% below the median
    assert scipy.stats.skew(draws) < -0.4


@pytest.mark.parametrize("n", [12, 24, 36])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_the_band_holds_the_true_median_95_percent_of_the_time(model, n):
    covered = np.mean([low <= 1.0 <= high for low, high in bands(model, 1.0, n, seed=n)])
    assert covered >= 0.945  # exact for any continuous model: 0.961 (12 rounds), 0.977 (24), 0.971 (36)


@pytest.mark.parametrize("truth", [0.97, 0.98])
@pytest.mark.parametrize("n", [12, 24, 36])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_at_least_098_is_shown_falsely_at_most_2_5_percent_of_the_time(model, n, truth):
    said = [stats.verdict(low, high, n, as_users.TARGET) for low, high in bands(model, truth, n, n + 1, VERDICT_SETS)]
    assert as_users.TARGET == 0.98
    assert np.mean([s == ">= 0.98 shown" for s in said]) <= 0.025


@pytest.mark.parametrize("truth", [0.975, 0.98, 1.02])
@pytest.mark.parametrize("n", [12, 24, 36])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_within_2_percent_is_shown_falsely_at_most_2_5_percent_of_the_time(model, n, truth):
    said = [as_users.agreement(low, high, n) for low, high in bands(model, truth, n, n + 2, VERDICT_SETS)]
    assert as_users.WITHIN == 0.02
    assert np.mean([s == "within 2% shown" for s in said]) <= 0.025


@pytest.mark.parametrize("model, n, at_least, within", [
    ("normal", 12, 0.32, 0.04), ("normal", 36, 0.69, 0.44), ("normal", 72, 0.97, 0.94),
    ("slow-state mixture", 72, 0.73, 0.69),
])
def test_how_often_the_rule_decides_when_the_two_sides_are_equal(model, n, at_least, within):
    # the rule's power at this noise (a true median of 1.0): normal with sd 0.035, 12 rounds show ">= 0.98" a third
    # of the time and "within 2%" almost never, 72 rounds both nearly always; the skewed model needs more rounds
    # still (docs/measuring.md quotes these)
    said = bands(model, 1.0, n, seed=100 + n)
    assert np.mean([low >= 0.98 for low, _ in said]) == pytest.approx(at_least, abs=0.04)
    assert np.mean([as_users.agreement(low, high, n) == "within 2% shown" for low, high in said]) == pytest.approx(
        within, abs=0.04)


@pytest.mark.parametrize("n", [6, 7, 12, 13, 24, 36])
def test_the_band_is_scipys_order_statistic_interval_of_the_median(n):
    rng = np.random.default_rng(n)
    for _ in range(5):
        values = list(rng.normal(1.0, SD, n))
        ci = scipy.stats.quantile_test(values, q=1.0, p=0.5).confidence_interval(0.95)
        assert stats.median_band(values) == (float(np.median(values)), ci.low, ci.high)


def test_too_few_rounds_give_no_band_and_no_verdict():
    mid, low, high = stats.median_band([0.97, 0.99, 1.0, 1.01, 1.03])
    assert mid == 1.0 and math.isnan(low) and math.isnan(high)
    assert stats.verdict(low, high, 5, 0.98).startswith("no verdict from 5 round(s) (at least 6)")
    assert stats.band_ranks(12) == (3, 10) and stats.band_ranks(5) is None
