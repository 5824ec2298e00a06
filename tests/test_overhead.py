"""benchmarks/overhead.py: its verdict never claims more than its rounds show, and its in-process loop-cost check
runs the harness's real measuring loop against the plain one."""

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parent.parent / "benchmarks" / "overhead.py"
_spec = importlib.util.spec_from_file_location("overhead_benchmark", _PATH)
overhead = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(overhead)


def test_the_median_band_resamples_rounds_and_holds_the_median():
    mid, low, high = overhead.median_band([0.97, 0.99, 1.0, 1.01, 1.03, 0.98, 1.02])
    assert mid == 1.0 and low <= mid <= high and 0.97 <= low and high <= 1.03
    assert overhead.median_band([1.0] * 6) == (1.0, 1.0, 1.0)


@pytest.mark.parametrize("low, high, rounds, says", [
    (0.995, 1.01, 5, ">= 0.99 shown"),
    (0.95, 0.985, 6, "below 0.99"),
    (0.90, 1.10, 6, "inconclusive"),
    (0.995, 1.01, 2, "no verdict from 2 round(s)"),  # two agreeing rounds are no evidence
])
def test_the_verdict_follows_the_band_and_wants_five_rounds(low, high, rounds, says):
    assert overhead.verdict(low, high, rounds).startswith(says)


def test_the_loop_cost_times_the_harness_loop_against_the_plain_one_in_this_process():
    costs = overhead.loop_cost(rounds=2, steps=50)
    assert len(costs) == 2 and all(isinstance(c, float) for c in costs)
    # a step of the tiny model takes well under 10 ms: a difference beyond that would mean a broken measurement
    assert all(abs(c) < 10_000 for c in costs)


def test_the_reference_loop_is_read_over_exactly_the_steps_inside_the_window():
    steps = {"first": 10.0, "ends": [11.0, 12.0, 13.5, 15.0, 16.0, 17.0, 18.0, 19.0, 20.0]}
    # window [11.5, 19.5]: the steps 12.0-13.5, 13.5-15.0, 15.0-16.0, 16.0-17.0, 17.0-18.0, 18.0-19.0 lie inside
    assert overhead.seconds_per_step_within(steps, (11.5, 8.0)) == pytest.approx((19.0 - 12.0) / 6)
    with pytest.raises(ValueError, match="only 2 plain steps fell inside"):
        overhead.seconds_per_step_within(steps, (12.0, 3.0))


def test_the_cpus_are_split_in_two_disjoint_halves(monkeypatch):
    monkeypatch.setattr(overhead.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4})
    assert overhead.cpu_halves() == ({0, 1}, {2, 3})
    monkeypatch.setattr(overhead.os, "sched_getaffinity", lambda pid: {3})
    assert overhead.cpu_halves() is None
    assert overhead._cpus({0, 1, 2}) == "CPUs 0-2" and overhead._cpus({5}) == "CPU 5"


def test_the_in_process_comparison_trains_one_model_on_both_sides_with_a_live_poller():
    from harness.run import measure

    real = measure.prepare
    ratios, harness_ms = overhead.in_process(overhead.TINY + [("measure.steps", 30)], rounds=2), []
    assert len(ratios) == 2 and all(0.2 < r < 5.0 for r in ratios)  # the same tiny step on both sides
    assert measure.prepare is real  # the harness's builder is given back
    overhead.in_process(overhead.TINY + [("measure.steps", 30)], rounds=1, harness_ms=harness_ms)
    assert len(harness_ms) == 1 and 0 < harness_ms[0] < 1000
