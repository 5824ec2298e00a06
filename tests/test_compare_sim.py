"""Seeded simulations of ``compare``'s mark (``views.compare.side_ratio`` and ``ratio_cell``, the functions the command
calls for every cell): a ratio shown without "(within noise)" or "(no band)" reads as a change beyond noise.

Each side is a sweep of its own, so a session of its own: its runs vary around the session's level (log-normal, CV
2%, or t on 3 df scaled to it), and the level moves between sessions (sd 3%, ``check --baseline``'s default).
Equal settings on both sides, 2,000 pairs a case (seeds 1-7):

| case | change shown, before (runs' model alone; a one-run side bare) | now (+ 3% between sessions) |
|---|---|---|
| 3 runs a side, no calibration | 29.9% | 4.8% |
| 3 runs a side, calibration (CV 2%, 8 runs) | 43.7% | 5.4% |
| 6 runs a side, no calibration | 53.9% | 4.5% |
| 3 runs a side, t3 runs | 38.8% | 4.7% |
| 1 run a side, calibration | 19.2% | 4.2% |
| 1 run a side, no calibration | 100% | 0% ("(no band)") |
| sessions that agree (sd 0), 3 runs a side | 3.1% | 0% |

A true 1.15x (two GPUs, 3 runs a side, no calibration; seed 8) is shown beyond noise in 88% of pairs (97% before)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sim_rates import at_least, at_most

from harness.analysis.stats import noise_model
from harness.analysis.views import compare

TRIALS = 2000
CALIBRATED = noise_model.Noise(cv=0.02, df=7, sweep_id="noise-sim", runs=8, match="environment")


def _side(rng, runs: int, mult: float, cv: float, session_sd: float, tails: int | None) -> noise_model.Runs:
    level = math.log(100.0 * mult) + rng.normal(0.0, session_sd)
    noise = (rng.standard_t(tails, runs) * cv / math.sqrt(tails / (tails - 2)) if tails
             else rng.normal(0.0, cv, runs))
    return noise_model.Runs(list(np.exp(level + noise)))


def _shows_change(cell: str) -> bool:
    return "(within noise)" not in cell and "(no band)" not in cell


def _before(new: noise_model.Runs, old: noise_model.Runs, noise: noise_model.Noise) -> bool:
    """The rule before: the runs' model alone, and a one-run side's bare ratio."""
    if not (noise.calibrated or min(new.n, old.n) >= 2):
        return True
    return not noise_model.ratio(new, old, noise).within_noise


def rates(seed: int, runs: int, noise=noise_model.DEFAULT, true: float = 1.0, session_sd: float = 0.03,
          tails: int | None = None) -> tuple[float, float]:
    """(now, before): the share of pairs whose cell shows a change."""
    rng = np.random.default_rng(seed)
    now = before = 0
    for _ in range(TRIALS):
        old = _side(rng, runs, 1.0, 0.02, session_sd, tails)
        new = _side(rng, runs, true, 0.02, session_sd, tails)
        now += _shows_change(compare.ratio_cell(compare.side_ratio(new, old, noise)))
        before += _before(new, old, noise)
    return now / TRIALS, before / TRIALS


@pytest.mark.parametrize("seed, runs, noise, tails, was", [
    (1, 3, noise_model.DEFAULT, None, 0.25), (2, 3, CALIBRATED, None, 0.35), (3, 6, noise_model.DEFAULT, None, 0.50),
    (4, 3, noise_model.DEFAULT, 3, 0.30), (5, 1, CALIBRATED, None, 0.15)])
def test_equal_settings_in_two_sessions_show_a_change_in_at_most_5_percent_of_pairs(seed, runs, noise, tails, was):
    now, before = rates(seed, runs, noise, tails=tails)
    assert now <= at_most(0.05) and before >= was, (now, before)


def test_a_one_run_side_without_a_calibration_says_no_band_instead_of_a_bare_ratio():
    now, before = rates(6, 1)
    assert now == 0.0 and before == 1.0


def test_sessions_that_agree_show_no_more_change_than_before():
    now, before = rates(7, 3, session_sd=0.0)
    assert now <= before <= at_most(0.05)


def test_two_gpus_15_percent_apart_are_told_apart_in_most_pairs():
    now, _ = rates(8, 3, true=1.15)
    assert now >= at_least(0.85)
