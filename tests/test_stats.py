"""Speedup noise bands and verdicts on the guides' claims."""

import math

import pytest

from harness.analysis.stats import noise_model, speedup
from harness.analysis.stats.noise_model import Runs


def test_a_speedup_inside_the_noise_band_is_within_noise():
    r = noise_model.ratio(Runs([103.0]), Runs([100.0]))  # one run a side: the default 5% CV
    assert r.within_noise and round(r.value, 6) == 1.03


def test_a_clear_speedup_is_not_within_noise():
    assert not noise_model.ratio(Runs([150.0]), Runs([100.0])).within_noise


def test_verdicts():
    claim = (2.0, 3.0)
    assert speedup.verdict(speedup.Ratio(2.5, 2.4, 2.6), *claim) == "confirms"
    assert speedup.verdict(speedup.Ratio(1.9, 1.85, 2.05), *claim) == "confirms"  # the band reaches the claim
    assert speedup.verdict(speedup.Ratio(1.4, 1.35, 1.45), *claim) == "falls short"
    assert speedup.verdict(speedup.Ratio(1.01, 0.97, 1.05), *claim) == "falls short (no measurable change)"
    assert speedup.verdict(speedup.Ratio(0.6, 0.58, 0.62), *claim) == "reverses (slower)"
    assert speedup.verdict(speedup.Ratio(4.0, 3.8, 4.2), *claim) == "exceeds"
    # a claimed slowdown (checkpointing: 0.7-0.8x) that did not happen
    assert speedup.verdict(speedup.Ratio(1.0, 0.97, 1.03), 0.7, 0.8) == "exceeds"


def test_a_band_holding_both_no_change_and_the_claim_is_inconclusive():
    assert speedup.verdict(speedup.Ratio(1.04, 0.97, 1.11), 1.1, 1.15).startswith("inconclusive (~")
    assert speedup.verdict(speedup.Ratio(2.4, 2.2, 2.6), 2.0, 3.0) == "confirms"
    # a claimed slowdown whose band also holds 1
    assert speedup.verdict(speedup.Ratio(0.9, 0.75, 1.05), 0.7, 0.8).startswith("inconclusive")


def test_repeats_to_decide_scales_with_the_band():
    # half-width 0.067 on the log scale (se 0.0344, normal quantile); the band stays inconclusive while its centre
    # lies in [log 1.1 - h, h]: with 1 run that is [0.028, 0.067] (42% of estimates around 0.039: decided 58%),
    # with 2 runs h = 0.048 and the zone is empty: decided in >= 80% of sweeps from 2 runs
    assert speedup.repeats_to_decide(speedup.Ratio(1.04, 0.97, 1.11), 1.1, 1.15) == 2
    assert speedup.decide_probability(math.log(1.04), 1.1, 1.15, 0.0344, math.inf) == pytest.approx(0.58, abs=0.01)
    assert speedup.repeats_to_decide(speedup.Ratio(1.04, 0.97, 1.11, runs=3), 1.1, 1.15) == 5
    assert speedup.repeats_to_decide(speedup.Ratio(1.005, 0.8, 1.26), 1.001, 1.2) is None  # > 50 runs


def test_band_of_one_rung():
    assert round(noise_model.band(Runs([100.0])), 4) == round(float(__import__("math").expm1(1.959964 * 0.05)), 4)
    assert noise_model.band(Runs([90.0, 100.0, 110.0])) > 0.1  # t with 2 df: wide
    noisy = [5.0, 15.0] * 10
    assert noise_model.band(Runs([100.0], [speedup.within_run_uncertainty(noisy)])) > 0.1
