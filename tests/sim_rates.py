"""What the threshold rules' seeded simulations hold their rates to (tests/test_bound.py, tests/test_cuts.py,
tests/test_data_part.py): a rate's expected value with 3 standard errors of ``TRIALS`` simulated rungs."""

import statistics

TRIALS = 2000


def at_most(q: float) -> float:
    return q + 3 * (q * (1 - q) / TRIALS) ** 0.5


def at_least(q: float) -> float:
    return q - 3 * (q * (1 - q) / TRIALS) ** 0.5


def wrong_side(mean: float, sd: float, line: float) -> float:
    """One run's chance of lying on the other side of ``line`` from its true share ``mean``."""
    p = statistics.NormalDist(mean, sd).cdf(line)
    return min(p, 1 - p)


def assert_both_more_often_than_wrong(p: float, runs: int, wrong: float, both: float) -> None:
    """A point from the line: a wrong single reading needs every run on the wrong side (``p`` each: p^runs); runs on
    both sides give both readings (1 - p^runs - (1-p)^runs), at least twice as often as a wrong one."""
    assert wrong <= at_most(p ** runs), (runs, wrong)
    expected = 1 - p ** runs - (1 - p) ** runs
    assert both >= at_least(expected) and both > 2 * wrong, (runs, both)
