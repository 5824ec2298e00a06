"""A claim about the data part, judged on the loop's pace: the loop's wait on its loader is read from all a rung's
runs against 20%, as ``bound.of_runs`` reads what limits the loop. Runs on both sides give both readings with their
range; one run near the line says what another may read; far from it the verdicts are as before. With a seeded
simulation of the rule's error rate (docs/statistics.md, "What limits the loop")."""

import statistics

import numpy as np
import pytest

from harness.analysis.stats import speedup
from harness.analysis.views import data_part
from harness.analysis.views import table as table_mod
from harness.analysis.views.rows import Parts, RungRow
from tests.sim_rates import TRIALS, assert_both_more_often_than_wrong, wrong_side
from tests.test_components import _frame, _record

CLAIM = (2.0, 3.0)
IN_CLAIM = speedup.Ratio(2.5, 2.2, 2.8)  # the loop's ratio end to end: within the claim, 1x excluded
SD_WAIT = 0.05  # one setting's run-to-run spread of the wait on the H200 (tests/test_bound.py)


def _rung(waits: list[float], rung: int = 0) -> RungRow:
    return RungRow(rung=rung, change="", status="ok", how="measured", repeats=len(waits),
                   data_wait_frac=statistics.median(waits), parts=Parts(shares=tuple((w, None) for w in waits)))


def _verdict(before: list[float], after: list[float], ratio: speedup.Ratio = IN_CLAIM) -> str:
    return data_part.verdict(_rung(after, 1), _rung(before), *CLAIM, ratio)[1]


def test_runs_that_agree_read_as_before():
    assert _verdict([0.90, 0.88], [0.60, 0.62]) == "confirms (data: loader 2.50x)"
    assert _verdict([0.90, 0.88], [0.01, 0.02]) == "confirms (data: loader at least 2.50x)"
    assert _verdict([0.90, 0.88], [0.01, 0.02], speedup.Ratio(1.5, 1.4, 1.6)) == (
        "inconclusive (data: loader at least 1.50x; the loop now waits 2%, the model sets the pace)")
    assert _verdict([0.05, 0.06], [0.01, 0.02]) == ("not measurable here: the loop waited on data 6% of its step "
                                                    "before the change, so the loader did not set its pace")


def test_runs_before_the_change_on_both_sides_of_20_percent_give_both_readings():
    measured, text = data_part.verdict(_rung([0.60, 0.62], 1), _rung([0.15, 0.25, 0.22]), *CLAIM,
                                       speedup.Ratio(2.5, 2.2, 2.8))
    assert text == ("inconclusive (data: confirms at loader 2.50x where the loader set the loop's pace, not measurable "
                    "where it did not: the loop waited on data 15-25% of its step before the change over 3 runs: the "
                    "runs straddle 20% waiting)")
    assert measured.value == 2.5  # the ratio one of the readings judges
    # the model sets the pace after the change: where the loader set it before, the ratio is a lower bound
    assert _verdict([0.15, 0.25, 0.22], [0.01, 0.02, 0.01]).startswith(
        "inconclusive (data: loader at least 2.50x where the loader set the loop's pace, not measurable where")


@pytest.mark.parametrize("ratio, text", [
    # the claim holds either way: one verdict, both readings of the figure
    (speedup.Ratio(2.5, 2.2, 2.8), "confirms (data: loader 2.50x, or at least that where the model set the pace: the "
                                   "loop now waits 15-25% of its step over 3 runs: the runs straddle 20% waiting)"),
    # the loader's pace falls short, the model's leaves it a lower bound: both
    (speedup.Ratio(1.5, 1.4, 1.6), "inconclusive (data: falls short at loader 1.50x where the loader still set the "
                                   "pace, loader at least 1.50x where the model did: the loop now waits 15-25% of its "
                                   "step over 3 runs: the runs straddle 20% waiting)"),
])
def test_runs_after_the_change_on_both_sides_of_20_percent_say_so(ratio, text):
    assert _verdict([0.90, 0.88, 0.85], [0.15, 0.25, 0.22], ratio) == text


def test_one_run_near_20_percent_says_what_another_may_read():
    assert _verdict([0.18], [0.01]) == (
        "not measurable here: the loop waited on data 18% of its step before the change, so the loader did not set "
        "its pace (one run before the change: 18% waiting, within 5 points of 20%: another run of these settings may "
        "read the loader setting its pace)")
    assert _verdict([0.90], [0.23]) == (
        "confirms (data: loader 2.50x) (one run after the change: 23% waiting, within 5 points of 20%: another run of "
        "these settings may read the loader not setting its pace)")
    assert _verdict([0.90], [0.60]) == "confirms (data: loader 2.50x)"  # far from the line


def test_the_table_judges_a_data_claim_from_all_the_runs():
    def sweep(waits_before: list[float]) -> table_mod.SweepTable:
        rows = []
        for run, wait in enumerate(waits_before):
            rows.append(_record(0, samples_per_s=10 + run * 0.01, step_ms=100, wait_ms=100 * wait, run=run))
            rows.append(_record(1, samples_per_s=25 + run * 0.01, step_ms=100, wait_ms=60, run=run,
                                change="data.num_workers=4", claim=(2.0, 3.0, "2-3x"), component="data"))
        return table_mod.build_table(_frame(rows), "s")

    assert sweep([0.90, 0.90, 0.90]).rows[1].verdict == "confirms (data: loader 2.50x)"
    assert sweep([0.15, 0.25, 0.22]).rows[1].verdict.startswith(  # the median, 22%, alone read the loader's pace
        "inconclusive (data: confirms at loader 2.50x where the loader set the loop's pace, not measurable where it "
        "did not: the loop waited on data 15-25% of its step before the change over 3 runs")


def _rates(rng, wait: float, runs: int) -> tuple[float, float, float]:
    """(a single reading on the wrong side of 20%, both readings, the median's reading on the wrong side) over TRIALS
    rungs of ``runs`` runs before a change, each run's wait drawn around ``wait`` (sd SD_WAIT, clipped to 0-1); the
    loop after the change waits 60% (far over the line)."""
    truth = wait >= data_part.PACED_WAIT
    wrong = both = median_wrong = 0
    for waits in np.clip(rng.normal(wait, SD_WAIT, (TRIALS, runs)), 0, 1).tolist():
        text = _verdict(waits, [0.60] * runs)
        if "the runs straddle" in text:
            both += 1
        else:
            wrong += text.startswith("not measurable") == truth
        median_wrong += (statistics.median(waits) >= data_part.PACED_WAIT) != truth
    return wrong / TRIALS, both / TRIALS, median_wrong / TRIALS


@pytest.mark.parametrize("wait", [0.05, 0.40])
def test_far_from_20_percent_the_loaders_pace_is_seldom_read_wrong(wait):
    """Waiting 0.05 or 0.40 (sd 0.05, 3 or 4 sd from 0.2): a run on the wrong side with p = 0.0013 at most, a wrong
    single reading p^2 = 2e-6 at most; both readings at most 1 - 0.9987^6 = 0.8% (held to 1.5%). Seen: 0 wrong, 0-1.2%
    both."""
    rng = np.random.default_rng(81)
    for runs in range(2, 7):
        wrong, both, median_wrong = _rates(rng, wait, runs)
        assert wrong == 0 and median_wrong == 0 and both <= 0.015, (runs, wrong, both)


@pytest.mark.parametrize("wait", [0.19, 0.21])
def test_a_point_from_20_percent_the_reading_gives_both_more_often_than_the_wrong_side(wait):
    """A point from the line (sd 0.05): a run on the wrong side with p = 0.42, a wrong single reading p^n (17.6% at 2
    runs, 7.4% at 3, 0.5% at 6; held to p^n + 3 se; seen 17.2-18.2%, 7.0-7.9%, 0.3-0.8%), where the median read the
    wrong side in 32-40% of rungs; the rest give both readings, 1 - p^n - (1-p)^n (held to it - 3 se; seen 47-97%)."""
    rng = np.random.default_rng(82)
    p = wrong_side(wait, SD_WAIT, data_part.PACED_WAIT)
    for runs in range(2, 7):
        wrong, both, median_wrong = _rates(rng, wait, runs)
        assert_both_more_often_than_wrong(p, runs, wrong, both)
        assert median_wrong >= 0.25 and median_wrong > 2 * wrong, (runs, median_wrong, wrong)
