"""Speedup noise bands and verdicts on the guides' claims."""

from harness.analysis import stats


def test_a_speedup_inside_the_noise_band_is_within_noise():
    r = stats.ratio(103.0, 0.03, 100.0, 0.03)
    assert r.within_noise and r.value == 1.03


def test_a_clear_speedup_is_not_within_noise():
    assert not stats.ratio(150.0, 0.02, 100.0, 0.02).within_noise


def test_verdicts():
    claim = (2.0, 3.0)
    assert stats.verdict(stats.Ratio(2.5, 2.4, 2.6), *claim) == "confirms"
    assert stats.verdict(stats.Ratio(1.9, 1.85, 2.05), *claim) == "confirms"  # the band reaches the claim
    assert stats.verdict(stats.Ratio(1.4, 1.35, 1.45), *claim) == "falls short"
    assert stats.verdict(stats.Ratio(1.01, 0.97, 1.05), *claim) == "falls short (no measurable change)"
    assert stats.verdict(stats.Ratio(0.6, 0.58, 0.62), *claim) == "reverses (slower)"
    assert stats.verdict(stats.Ratio(4.0, 3.8, 4.2), *claim) == "exceeds"
    # a claimed slowdown (checkpointing: 0.7-0.8x) that did not happen
    assert stats.verdict(stats.Ratio(1.0, 0.97, 1.03), 0.7, 0.8) == "exceeds"


def test_uncertainty_uses_the_repeat_spread_and_a_floor():
    assert stats.rung_uncertainty([100.0], [[10.0] * 10]) == stats.FLOOR_ONE_REPEAT
    assert stats.rung_uncertainty([90.0, 100.0, 110.0], [[10.0] * 10] * 3) == 0.1
    noisy = [5.0, 15.0] * 10
    assert stats.rung_uncertainty([100.0], [noisy]) > 0.1
