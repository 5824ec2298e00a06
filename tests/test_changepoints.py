"""Change points over a config's sessions (``harness.analysis.views.changepoints``): seeded simulations of its error
rates, and the steps it finds in plain series. No torch, seconds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.analysis.views import changepoints


def flat_false_steps(rng, sessions: int, sd: float, trials: int) -> float:
    return float(np.mean([len(changepoints.detect(list(np.exp(rng.normal(0, sd, sessions))))) > 0
                          for _ in range(trials)]))


def test_a_flat_history_rarely_shows_a_step():
    """No change, a 2% sd between sessions: a step in under 2% of histories of 20 sessions, under 10% of 8 (the
    robust sd of 7 differences is often too small), almost none of 60."""
    rng = np.random.default_rng(31)
    rates = {n: flat_false_steps(rng, n, 0.02, 1000) for n in (8, 20, 60)}
    print("false steps", rates)
    assert rates[20] <= 0.025 and rates[8] <= 0.10 and rates[60] <= 0.005, rates


def test_a_10pct_drop_is_found_where_it_happened():
    rng = np.random.default_rng(32)
    found, sessions = 0, 20
    for _ in range(500):
        levels = rng.normal(0, 0.02, sessions)
        levels[12:] += math.log(0.9)
        steps = changepoints.detect(list(np.exp(levels)))
        found += len(steps) == 1 and steps[0].index == 12
    assert found / 500 >= 0.95, found / 500


def test_steps_up_and_down_with_their_levels():
    series = [100, 101, 99, 100, 100, 80, 81, 79, 80, 120, 121, 119]
    steps = changepoints.detect(series)
    assert [s.index for s in steps] == [5, 9]
    assert steps[0].ratio == pytest.approx(0.8, rel=0.01) and steps[1].ratio == pytest.approx(1.5, rel=0.01)
    assert changepoints.detect([100, 80, 100]) == []  # too few sessions to tell a step from one odd session
    assert changepoints.detect([100.0] * 10) == []
