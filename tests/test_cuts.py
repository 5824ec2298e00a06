"""The other lines that read what limits a loop: "the host sets the pace" below 70% device busy (a sweep's reading
line, read from all a rung's runs as ``bound.of_runs`` reads 90% busy and 20% waiting), and a profile's lines (30%
waiting, 10% and 60% idle), which read one profiled run by design and say when it lies near one. Each with a seeded
simulation of its error rate (docs/statistics.md, "What limits the loop")."""

import dataclasses
import statistics

import numpy as np
import pytest

from harness.analysis.views import bound, render
from harness.analysis.views import table as table_mod
from harness.analysis.views.diagnosis import diagnose
from harness.analysis.views.profile import DATA_BOUND_SHARE, LAUNCH_BOUND_IDLE, bound_by, bound_reason
from harness.profiles import ProfileSummary
from tests.sim_rates import TRIALS, assert_both_more_often_than_wrong, at_most, wrong_side
from tests.test_components import _frame, _record

SD_DEVICE, SD_WAIT = 0.03, 0.05  # one setting's run-to-run spread on the H200 (tests/test_bound.py)


# ------------------------------------------------------------------------------------------
# the host's pace: 70% busy, from all the runs


def test_runs_on_both_sides_of_70_percent_busy_give_both_readings_and_their_range():
    assert bound.pace([0.66, 0.74, 0.71]) == (
        "the device is busy 66-74% of the window over 3 runs: the runs straddle 70% busy: the host sets the pace, or "
        "the rest of the step (host work, logging, validation) does")
    assert bound.pace([0.62, 0.60, 0.64]) == "the device is busy 62% of the window: the host sets the pace"
    assert bound.pace([0.80, 0.95]) == bound.REST_PACE == ("the rest of the step (host work, logging, validation) "
                                                           "sets the pace")
    assert bound.pace([None, float("nan")]) == bound.REST_PACE  # no device share: as before


def test_one_run_near_70_percent_busy_says_what_another_may_read():
    assert bound.pace([0.68]) == (
        "the device is busy 68% of the window: the host sets the pace (one run: device busy 68%, within 5 points of "
        "70%: another run of these settings may read the rest of the step (host work, logging, validation) sets the "
        "pace)")
    assert bound.pace([0.73]) == (
        "the rest of the step (host work, logging, validation) sets the pace (one run: device busy 73%, within 5 "
        "points of 70%: another run of these settings may read the host sets the pace)")
    assert bound.pace([0.60]) == "the device is busy 60% of the window: the host sets the pace"  # far from it


def _host_paced(busy: list[float]) -> table_mod.SweepTable:
    """A GPU sweep whose loop does not wait on its loader: bf16 halves the device's step, the loop moves 1.1x."""
    rows = []
    for run, frac in enumerate(busy):
        jitter = 1 + 0.01 * run
        rows.append(dataclasses.replace(_record(0, samples_per_s=50 * jitter, step_ms=80, wait_ms=1, device="cuda",
                                                device_ms=40.0, run=run), device_step_frac=frac))
        rows.append(dataclasses.replace(_record(1, samples_per_s=55 * jitter, step_ms=73, wait_ms=1, device="cuda",
                                                device_ms=20.0, run=run, change="precision=bf16-mixed"),
                                        device_step_frac=frac / 2 + 0.3))
    return table_mod.build_table(_frame(rows), "s")


def test_the_tables_reading_line_reads_the_pace_from_all_the_rungs_runs():
    text = render.to_markdown(_host_paced([0.62, 0.76, 0.72]))  # the bf16 rung: 61-68% busy, under 70% each run
    assert "end to end 1.10x; the device is busy 66% of the window: the host sets the pace." in text
    straddle = render.to_markdown(_host_paced([0.70, 0.86, 0.74]))  # the bf16 rung: 65-73% busy
    assert ("end to end 1.10x; the device is busy 65-73% of the window over 3 runs: the runs straddle 70% busy: the "
            "host sets the pace, or the rest of the step (host work, logging, validation) does.") in straddle
    one = render.to_markdown(_host_paced([0.78]))  # one run a rung, 69% busy
    assert ("the device is busy 69% of the window: the host sets the pace (one run: device busy 69%, within 5 points "
            "of 70%: another run of these settings may read the rest of the step") in one


def _pace_rates(rng, busy: float, runs: int) -> tuple[float, float, float]:
    """(a single reading on the wrong side, undecided, the median's reading on the wrong side) over TRIALS rungs of
    ``runs`` runs, each run's device share drawn around ``busy`` (sd SD_DEVICE, clipped to 0-1)."""
    truth = busy >= bound.HOST_PACED_BUSY
    wrong = undecided = median_wrong = 0
    for values in np.clip(rng.normal(busy, SD_DEVICE, (TRIALS, runs)), 0, 1).tolist():
        text = bound.pace(values)
        if "the runs straddle" in text:
            undecided += 1
        else:
            wrong += text.startswith(bound.REST_PACE) != truth
        median_wrong += (statistics.median(values) >= bound.HOST_PACED_BUSY) != truth
    return wrong / TRIALS, undecided / TRIALS, median_wrong / TRIALS


@pytest.mark.parametrize("busy", [0.60, 0.80])
def test_far_from_70_percent_busy_the_pace_is_seldom_named_wrong(busy):
    """0.60 or 0.80 busy, 3.3 sd from 0.7: a run on the wrong side with p = 0.0004, a wrong single reading (every
    run so) p^2 = 2e-7 at most; undecided at most 1 - 0.9996^6 = 0.3%. Seen: 0 wrong, 0-0.3% undecided."""
    rng = np.random.default_rng(71)
    for runs in range(2, 7):
        wrong, undecided, median_wrong = _pace_rates(rng, busy, runs)
        assert wrong == 0 and median_wrong == 0 and undecided <= 0.01, (runs, wrong, undecided)


@pytest.mark.parametrize("busy", [0.69, 0.71])
def test_a_point_from_70_percent_busy_the_pace_says_both_more_often_than_it_names_the_wrong_side(busy):
    """A point from the line (sd 0.03): a run on the wrong side with p = 0.37, a wrong single reading p^n (13.7% at 2
    runs, 5.1% at 3, 0.3% at 6; held to p^n + 3 se; seen 14.2-14.5%, 4.1-5.8%, 0.1-0.2%), where the median named the
    wrong side in 23-34% of rungs; the rest give both readings, 1 - p^n - (1-p)^n (held to it - 3 se; seen 45-94%)."""
    rng = np.random.default_rng(72)
    p = wrong_side(busy, SD_DEVICE, bound.HOST_PACED_BUSY)
    for runs in range(2, 7):
        wrong, undecided, median_wrong = _pace_rates(rng, busy, runs)
        assert_both_more_often_than_wrong(p, runs, wrong, undecided)
        assert median_wrong >= 0.2 and median_wrong > 2 * wrong, (runs, median_wrong, wrong)


# ------------------------------------------------------------------------------------------
# a profile's lines: one profiled run, by design; the note where it lies near one


def _profile(wait: float, idle: float | None) -> ProfileSummary:
    """A profiled step of 100 ms: ``wait`` of it on the loader, the device idle ``idle`` of it (None: a CPU)."""
    host = {"data_wait": 100 * wait, "copy": 0.0, "forward": 30.0, "backward": 0.0, "optimizer": 0.0}
    host["other"] = 100 - sum(host.values())
    device = None if idle is None else {"forward": 100 * (1 - idle), "backward": 0.0, "optimizer": 0.0,
                                        "other": 0.0, "idle": 100 * idle}
    return ProfileSummary(device="cpu" if idle is None else "cuda", steps=2, span_ms=200.0, host_ms=host,
                          device_ms=device)


@pytest.mark.parametrize("wait, idle, reason", [
    (0.05, 0.70, "launch-bound (data wait 5% of the step, the device idle 70% of the span)"),  # far: unchanged
    (0.05, 0.62, "launch-bound (data wait 5% of the step, the device idle 62% of the span; one profiled run: the "
                 "device idle 62%, within 5 points of 60%: another run of these settings may read compute-bound)"),
    (0.05, 0.57, "compute-bound (data wait 5% of the step, the device idle 57% of the span; one profiled run: the "
                 "device idle 57%, within 5 points of 60%: another run of these settings may read launch-bound)"),
    (0.40, 0.08, "both: the loader and the device (data wait 40% of the step, the device idle 8% of the span; one "
                 "profiled run: the device idle 8%, within 5 points of 10%: another run of these settings may read "
                 "data-bound)"),
    (0.28, 0.30, "compute-bound (data wait 28% of the step, the device idle 30% of the span; one profiled run: data "
                 "wait 28%, within 5 points of 30%: another run of these settings may read data-bound)"),
    (0.32, None, "data-bound (data wait 32% of the step; one profiled run: data wait 32%, within 5 points of 30%: "
                 "another run of these settings may read compute-bound)"),
    (0.05, 0.08, "compute-bound (data wait 5% of the step, the device idle 8% of the span)"),  # 10% idle: no matter
])
def test_a_profile_near_one_of_its_lines_says_what_another_run_may_read(wait, idle, reason):
    assert bound_reason(_profile(wait, idle)) == reason
    assert reason.startswith(bound_by(_profile(wait, idle)))  # the label itself is the one run's, as before


def test_diagnose_from_a_profile_near_the_launch_line_says_so_and_drops_balanceds_sentence():
    def rec(sps, **kw):
        return {"status": "ok", "samples_per_s": sps, "batch_size": 2, "data_wait_frac": 0.05, **kw}

    found = diagnose(rec(10.0), rec(10.5), rec(9.0, profile_json=_profile(0.05, 0.62).to_json()), "cuda", 4, False)
    assert found.verdict == "launch-bound"  # the rates said balanced
    assert "speed up either and the other follows" not in found.text
    assert ("The full step's profile: launch-bound (data wait 5% of the step, the device idle 62% of the span; one "
            "profiled run: the device idle 62%, within 5 points of 60%: another run of these settings may read "
            "compute-bound).") in found.text


@pytest.mark.parametrize("wait, idle, far", [
    (0.05, 0.59, False), (0.05, 0.61, False), (0.05, 0.45, True), (0.05, 0.75, True),  # 60% idle: launch-bound
    (0.40, 0.09, False), (0.40, 0.11, False), (0.40, 0.25, True),  # 10% idle (90% busy): both or data-bound
])
def test_one_profiled_run_on_the_wrong_side_of_a_line_mostly_says_it_lies_near_it(wait, idle, far):
    """The profile reads one run (by design): a run on the wrong side of its idle line with p, sd 0.03 (the full
    step's busy spread on the H200; a profile's own was not measured). Far (5 sd): p ~ 3e-7, none seen. A point from
    it: p = 0.37, and a wrong reading says nothing only when its run lies 5 points or more past the line, p = 2.3%
    (2000 profiles a cell: 36.9-37.2% wrong, 2.0-2.5% of all of them wrong without the note)."""
    rng = np.random.default_rng(73)
    line = LAUNCH_BOUND_IDLE if wait < DATA_BOUND_SHARE else 1 - bound.DEVICE_BUSY
    truth = bound_by(_profile(wait, idle))
    wrong = unsaid = 0
    for value in np.clip(rng.normal(idle, SD_DEVICE, TRIALS), 0, 1).tolist():
        reason = bound_reason(_profile(wait, value))
        wrong += not reason.startswith(truth)
        unsaid += not reason.startswith(truth) and "one profiled run" not in reason
    if far:
        assert wrong == 0
        return
    p_unsaid = 1 - statistics.NormalDist(abs(idle - line), SD_DEVICE).cdf(bound.NEAR)  # 5 points past the line
    assert 0.3 <= wrong / TRIALS <= 0.45, wrong
    assert unsaid / TRIALS <= at_most(p_unsaid), unsaid
    assert unsaid < wrong / 8
