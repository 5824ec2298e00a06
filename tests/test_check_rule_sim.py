"""Seeded simulations of ``check``'s throughput rule without a session term (``check.compare`` with no ``session``:
``check_throughput.throughput_logs``, then ``check_throughput.classify`` of each config, as ``check._decide_all``
calls them): "regressed" needs Holm's step-down against 1 AND the band, at the level Holm tested the config at,
below 1 - threshold; past the threshold without both it is "warned" (the check says undecided, exit 6).

What is simulated (log throughput of one run): config level + round effect (shared by the configs of one sweep's
round; 0 or sd 2%) + run noise (CV 3%), the two sweeps independent. Threshold 5%, family-wise alpha 5%. Counted:
checks with any config "regressed" (a false alarm), every config exactly at the threshold (the null at its edge:
an exact test lands at 5%, so it is held to 5% + 3 standard errors) and with no change (far inside the null)."""

from __future__ import annotations

import math

import numpy as np

from harness.analysis.gate import check, check_throughput
from harness.analysis.stats import noise_model
from tests.test_gate_sim import exact_bound
from tests.test_noise_model import frames

THRESHOLD = 0.05
EDGE = 1 - THRESHOLD
CV = 0.03
TRIALS = 1000
CALIBRATED = noise_model.Noise(cv=CV, df=4, sweep_id="noise-sim", runs=5, match="environment")


def sweeps(rng, configs: int, runs: int, factor: float, round_sd: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Log throughputs [config, round] of the baseline's sweep and the current one, every config ``factor`` x."""
    def sweep(shift: float) -> np.ndarray:
        return shift + rng.normal(0, CV, (configs, runs)) + rng.normal(0, round_sd, runs)

    return sweep(0.0), sweep(math.log(factor))


def statuses(pair, noise: noise_model.Noise) -> list[str]:
    return [check_throughput.classify(e, THRESHOLD, s) for e, s in check_throughput.throughput_logs(*pair, noise)]


def rates(seed: int, configs: int, runs: int, factor: float, noise: noise_model.Noise,
          round_sd: float = 0.0) -> tuple[float, float]:
    """(checks with a config regressed, checks with a config warned) of ``TRIALS``."""
    rng = np.random.default_rng(seed)
    got = [statuses(sweeps(rng, configs, runs, factor, round_sd), noise) for _ in range(TRIALS)]
    return float(np.mean(["regressed" in g for g in got])), float(np.mean(["warned" in g for g in got]))


EDGE_CASES = [  # (configs, runs a side, noise, round sd)
    (1, 5, noise_model.DEFAULT, 0.0), (4, 3, noise_model.DEFAULT, 0.0), (13, 5, noise_model.DEFAULT, 0.0),
    (4, 5, noise_model.DEFAULT, 0.02), (4, 1, CALIBRATED, 0.0), (4, 3, CALIBRATED, 0.0), (13, 5, CALIBRATED, 0.0)]


def test_every_config_at_the_threshold_is_called_regressed_in_at_most_5pct_of_checks():
    """Seen (1,000 checks each, seeds 80..86, in EDGE_CASES' order): 5.3%, 5.0%, 4.6%, 3.6%, 0.3%, 4.5%, 4.8%
    regressed: an exact test at the edge lands at about 5% whatever the family (Holm's first step is Bonferroni's);
    one run a side is conservative here, the calibration's CV being the true one and tested on its 4 df. Warned
    (no alarm) in about half the checks of one config and in nearly all of 13: a config at the edge lies past it in
    half the checks, and neither test decides it there."""
    for seed, (configs, runs, noise, round_sd) in enumerate(EDGE_CASES, start=80):
        regressed, warned = rates(seed, configs, runs, EDGE, noise, round_sd)
        print(f"at the edge, {configs} configs, {runs} runs a side, {'calibrated' if noise.calibrated else 'own'}, "
              f"round sd {round_sd:.0%}: regressed {regressed:.1%}, warned {warned:.1%}")
        assert regressed <= exact_bound(TRIALS), (configs, runs, noise.calibrated, round_sd, regressed)


def test_no_change_is_never_called_regressed():
    """No change, 13 configs: seen (1,000 checks, seeds 90, 91) no check with a config regressed, from 3 runs a side
    (their own spread) or from one run a side and a calibration; "warned" (exit 6, no alarm) in 22.9% and 78.3%."""
    for seed, (runs, noise) in enumerate(((3, noise_model.DEFAULT), (1, CALIBRATED)), start=90):
        regressed, warned = rates(seed, 13, runs, 1.0, noise)
        print(f"no change, 13 configs, {runs} runs a side: regressed {regressed:.1%}, warned {warned:.1%}")
        assert regressed <= 0.01, (runs, regressed)


def test_the_simulation_takes_the_decisions_of_check_compare_at_the_edge():
    """The rates above call the functions ``check.compare`` calls without a session; on the same runs at the edge
    the whole comparison (records, Holm, each config's status) gives the same statuses."""
    rng = np.random.default_rng(95)
    for runs, noise in ((3, noise_model.DEFAULT), (1, CALIBRATED)):
        for _ in range(10):
            pair = sweeps(rng, 4, runs, EDGE)
            rows = check.compare(*frames(pair), check.Thresholds(THRESHOLD), check.Thresholds(0.10), noise)
            assert [r.status for r in sorted(rows, key=lambda r: r.rung)] == statuses(pair, noise)
