"""What limits a loop: the loader, the device, or both at once. Data-bound only where the device idles while the
host waits; the H100's phase 2 baseline (device busy the whole step, the host waiting 31%) is both. A rung is read
from all its runs: the H200's phase 2 baseline, whose three runs fall on both sides of 90% busy, is undecided
between data-bound and both, and says so."""

import statistics

import numpy as np
import pytest

from harness.analysis.views import bound
from harness.analysis.views.bound import BOTH, COMPUTE, DATA, HOST, limited_by, of_runs
from harness.analysis.views.diagnosis import diagnose
from tests.conftest import REPO
from tests.sim_rates import TRIALS, at_most

H100 = REPO / "results" / "h100"
PHASE2_H100 = "phase2-20261127-235759992403-d8545708"
H200 = REPO / "results" / "h200"
PHASE2_H200 = "phase2-20261129-233954638262-d748acc5"
H200_BASELINE = [(0.368048, 0.927727), (0.464379, 0.881835), (0.472853, 0.890643)]  # its runs' (wait, device busy)


@pytest.mark.parametrize("wait, device, label", [
    (0.31, 1.00, BOTH),  # the H100 baseline: the device busy the whole step, the host waiting on the loader
    (0.64, 0.64, DATA),  # batch 8 there: the device idles while the host waits
    (0.00, 1.00, COMPUTE),  # four workers there
    (0.05, 0.50, HOST),  # neither waits, the device idles: the host's own work
    (0.31, None, DATA),  # a CPU: the host's wait is the model's
    (0.05, None, COMPUTE),
    (bound.HOST_WAITING, bound.DEVICE_BUSY, BOTH),  # the thresholds themselves belong to the upper side
])
def test_a_loop_is_data_bound_only_where_the_device_idles_while_the_host_waits(wait, device, label):
    assert limited_by(wait, device).label == label


def test_the_reading_says_its_numbers():
    assert limited_by(0.312, 0.996).text() == ("both: the loader and the device (device busy 100% of the step, "
                                               "31% waiting)")
    assert limited_by(0.312).text() == "data-bound (31% waiting)"
    assert limited_by(None, 0.99).label == bound.UNKNOWN


def _rec(batches_per_s, wait=0.0, device_frac=None):
    record = {"status": "ok", "samples_per_s": 2 * batches_per_s, "batch_size": 2, "data_wait_frac": wait}
    return record | ({"device_step_frac": device_frac} if device_frac is not None else {})


@pytest.mark.parametrize("loader, model, full, verdict", [
    # the loader far slower than the model, and the device idle while the host waits
    (_rec(1.0), _rec(10.0), _rec(1.0, 0.85, 0.10), "data-bound"),
    # the model far slower than the loader, the device busy the whole step, the host not waiting
    (_rec(10.0), _rec(1.0), _rec(1.0, 0.02, 0.99), "compute-bound"),
    # the rates say data-bound, but the device ran the whole step while the host waited: both limit
    (_rec(1.0), _rec(2.0), _rec(1.0, 0.31, 1.00), BOTH),
    # the rates say compute-bound, and the host still waited while the device ran the whole step: both
    (_rec(10.0), _rec(4.0), _rec(4.0, 0.31, 0.995), BOTH),
])
def test_diagnose_names_each_of_the_three_cases_on_a_gpu(loader, model, full, verdict):
    found = diagnose(loader, model, full, "cuda", 1, False)
    assert found.verdict == verdict
    assert found.text.startswith(f"{verdict}: ")
    if verdict == BOTH:
        assert "device busy" in found.text and "the rates alone said" in found.text
        assert found.advice[0].startswith("both limit: a faster loader alone or a cheaper step alone shows little")


def test_diagnose_on_a_cpu_reads_the_wait_alone():
    assert diagnose(_rec(1.0), _rec(10.0), _rec(1.0, 0.85), "cpu", 1, False).verdict == "data-bound"


def test_the_h100_phase2_baseline_is_not_called_data_bound():
    from harness.analysis.views.table import load_table
    from harness.analysis.views.render import render

    table = load_table(str(H100), PHASE2_H100)
    baseline = table.rows[0]
    assert limited_by(baseline.data_wait_frac, baseline.parts.device_step_frac).label == BOTH
    text = render(table)
    assert ("(baseline): the loop is limited by both: the loader and the device (device busy 100% of the step, "
            "31% waiting).") in text
    (bf16,) = [line for line in table.readings if line.startswith("precision=bf16-mixed:")]
    assert "the loop was limited by both: the loader and the device" in bf16
    assert "-> data-bound (device busy 81% of the step, 38% waiting)" in bf16  # the device idles there
    (workers,) = [line for line in table.readings if line.startswith("data.num_workers=4:")]
    assert "the change acted on the loader: 64% -> 0% waiting" in workers


# ------------------------------------------------------------------------------------------
# a rung read from all its runs


def test_runs_on_both_sides_of_90_percent_busy_say_so_instead_of_picking_one():
    found = of_runs(H200_BASELINE)  # the median, 89% busy, alone read data-bound
    assert found.undecided and found.labels == (DATA, BOTH) and found.runs == 3
    assert found.text() == ("data-bound or both: the loader and the device (device busy 88-93% of the step over 3 "
                            "runs, 37-47% waiting: the runs straddle 90% busy)")
    assert bound.baseline_line(found) == [
        "(baseline): the loop is data-bound or limited by both: the loader and the device (device busy 88-93% of the "
        "step over 3 runs, 37-47% waiting: the runs straddle 90% busy)."]
    assert found.data_limits  # the loader is one of the limits either way
    assert (found.data_wait_frac, found.device_step_frac) == (0.464379, 0.890643)  # the medians, as the columns


def test_runs_that_agree_read_as_one_at_their_medians():
    found = of_runs([(0.25, 0.998), (0.31, 1.0), (0.38, 0.97)])  # the H100 baseline's kind: busy, waiting
    assert not found.undecided and found.label == BOTH and found.runs == 3
    assert bound.baseline_line(found) == ["(baseline): the loop is limited by both: the loader and the device "
                                          "(device busy 100% of the step, 31% waiting)."]
    idle = of_runs([(0.41, 0.78), (0.33, 0.81), (0.46, 0.74)])  # the H200's bf16 rung
    assert idle.text() == "data-bound (device busy 78% of the step, 41% waiting)" and idle.data_limits


@pytest.mark.parametrize("shares, text, data_limits", [
    # the wait straddles 20% on a CPU: the loader may limit
    ([(0.15, None), (0.25, None), (0.30, float("nan"))],
     "data-bound or compute-bound (15-30% waiting over 3 runs: the runs straddle 20% waiting)", True),
    # the device straddles 90% with no wait: the loader is not among the limits
    ([(0.02, 0.95), (0.05, 0.85)],
     "compute-bound or host-bound (device busy 85-95% of the step over 2 runs, 2-5% waiting: the runs straddle "
     "90% busy)", False),
    # both thresholds straddled at once; a run without a wait is dropped
    ([(0.15, 0.95), (0.25, 0.85), (None, 0.5)],
     "data-bound or compute-bound (device busy 85-95% of the step over 2 runs, 15-25% waiting: the runs straddle "
     "90% busy and 20% waiting)", True),
    # ranges that round alike keep a decimal
    ([(0.40, 0.899), (0.40, 0.901)],
     "data-bound or both: the loader and the device (device busy 89.9-90.1% of the step over 2 runs, 40.0-40.0% "
     "waiting: the runs straddle 90% busy)", True),
])
def test_each_straddle_names_its_labels_ranges_and_thresholds(shares, text, data_limits):
    found = of_runs(shares)
    assert found.undecided and found.text() == text and found.data_limits is data_limits


def test_one_run_keeps_its_own_reading_and_says_when_it_lies_near_a_threshold():
    one = of_runs([(0.489286, 0.920101)])  # the H200 diagnose's full step
    assert one == limited_by(0.489286, 0.920101) and one.label == BOTH and not one.undecided
    assert one.near() == "device busy 92%, within 5 points of 90%: another run of these settings may read data-bound"
    assert of_runs([(0.31, 0.996)]).near() == ""  # far from both lines
    assert limited_by(0.19, 0.97).near() == ("19% waiting, within 5 points of 20%: another run of these settings may "
                                             "read both: the loader and the device")
    assert of_runs(H200_BASELINE).near() == ""  # several runs show a straddle themselves
    assert of_runs([]).label == bound.UNKNOWN


def test_each_h200_baseline_run_alone_names_the_other_side_the_table_reads():
    """diagnose reads one run, the table all of a rung's: on the same records they never contradict unsaid."""
    table = of_runs(H200_BASELINE)
    for wait, device in H200_BASELINE:
        one = limited_by(wait, device)
        other = one.near().rsplit("may read ", 1)[1]
        assert {one.label, other} == set(table.labels)


def test_the_h200_phase2_baseline_is_read_from_all_three_runs():
    from harness.analysis.views.render import render
    from harness.analysis.views.table import load_table

    table = load_table(str(H200), PHASE2_H200)
    text = render(table)
    assert ("(baseline): the loop is data-bound or limited by both: the loader and the device (device busy 88-93% of "
            "the step over 3 runs, 37-47% waiting: the runs straddle 90% busy).") in text
    assert "(baseline): the loop is data-bound (device busy 89%" not in text  # the median's one-sided reading
    (bf16,) = [line for line in table.readings if line.startswith("precision=bf16-mixed:")]
    assert bf16.endswith("the loop was data-bound or limited by both: the loader and the device (device busy 88-93% "
                         "of the step over 3 runs, 37-47% waiting: the runs straddle 90% busy) -> data-bound (device "
                         "busy 78% of the step, 41% waiting).")
    (workers,) = [line for line in table.readings if line.startswith("data.num_workers=4:")]
    assert workers.endswith("the change acted on the loader: 67% -> 0% waiting.")


def test_diagnose_says_when_its_one_full_step_lies_near_the_line():
    # the H200's diagnose of the connectomics guide's baseline: the rates balanced, the full step 92% busy
    loader, model = _rec(32.00), _rec(34.53)
    found = diagnose(loader, model, _rec(30.87, 0.489286, 0.920101), "cuda", 1, False)
    assert found.verdict == BOTH
    assert found.text.startswith("both: the loader and the device: in the full step, device busy 92% of the step, "
                                 "49% waiting; the rates alone said balanced: ")
    assert ("One run of the full step: device busy 92%, within 5 points of 90%: another run of these settings may "
            "read data-bound") in found.text
    # the same rates, a run at 88% busy: data-bound by its own reading, and it says both is a step away
    near = diagnose(loader, model, _rec(30.87, 0.464379, 0.881835), "cuda", 1, False)
    assert "another run of these settings may read both: the loader and the device" in near.text
    assert near.notes == ["the full step's own reading differs from the rates': data-bound (device busy 88% of the "
                          "step, 46% waiting)"]
    far = diagnose(loader, model, _rec(30.87, 0.31, 1.00), "cuda", 1, False)
    assert far.verdict == BOTH and "One run of the full step" not in far.text


# ------------------------------------------------------------------------------------------
# the rule's error rates, simulated (seeded): runs of one setting with a true share and a run-to-run spread

SD_DEVICE, SD_WAIT = 0.03, 0.05  # about the H200's: 88-93% busy and 37-47% waiting over its baseline's 3 runs


def _rates(rng, wait: float, device: float, runs: int) -> tuple[float, float, float]:
    """(a single label on the wrong side, undecided, the median's reading on the wrong side) over TRIALS rungs of
    ``runs`` runs, each run's shares drawn around the true ones (clipped to 0-1)."""
    truth = limited_by(wait, device).label
    waits = np.clip(rng.normal(wait, SD_WAIT, (TRIALS, runs)), 0, 1).tolist()
    devices = np.clip(rng.normal(device, SD_DEVICE, (TRIALS, runs)), 0, 1).tolist()
    wrong = undecided = median_wrong = 0
    for w, d in zip(waits, devices):
        found = of_runs(zip(w, d))
        undecided += found.undecided
        wrong += not found.undecided and found.label != truth
        median_wrong += limited_by(statistics.median(w), statistics.median(d)).label != truth
    return wrong / TRIALS, undecided / TRIALS, median_wrong / TRIALS


def _all_wrong(wait: float, device: float, runs: int) -> float:
    """The bound on a wrong single label: every run on a wrong side, (P(device) + P(wait) on its wrong side)^runs;
    with 3 standard errors of TRIALS rungs over it."""
    one = sum(min(d.cdf(t), 1 - d.cdf(t)) for d, t in ((statistics.NormalDist(device, SD_DEVICE), bound.DEVICE_BUSY),
                                                       (statistics.NormalDist(wait, SD_WAIT), bound.HOST_WAITING)))
    return at_most(one ** runs)


@pytest.mark.parametrize("wait, device", [(0.40, 0.80), (0.40, 0.97), (0.05, 0.60), (0.40, 0.60)])
def test_far_from_the_lines_the_reading_seldom_names_the_wrong_side(wait, device):
    """Device busy 0.80 or 0.97 (sd 0.03; 2.3 sd or more from 0.9), waiting 0.05 or 0.40 (sd 0.05; 3 sd or more from
    0.2), 2-6 runs: a wrong single label needs every run on the wrong side, at most 0.0099^2 = 0.01% of rungs (1 in
    the 40,000 simulated here, held to the bound + 3 se). Undecided at most 1 - 0.9901^6 = 5.8% (0.97 busy, 6 runs)."""
    rng = np.random.default_rng(61)
    for runs in range(2, 7):
        wrong, undecided, _ = _rates(rng, wait, device, runs)
        assert wrong <= _all_wrong(wait, device, runs) <= 0.001, (runs, wrong)
        assert undecided <= 0.08, (runs, undecided)


@pytest.mark.parametrize("wait, device", [(0.40, 0.89), (0.40, 0.91), (0.19, 0.60), (0.21, 0.60)])
def test_a_point_from_a_line_the_reading_says_undecided_more_often_than_it_names_the_wrong_side(wait, device):
    """One point from a line (device 0.89/0.91, sd 0.03: a run on the wrong side with p = 0.37; waiting 0.19/0.21,
    sd 0.05: p = 0.42): a single wrong label needs every run on the wrong side, p^n: 13.5% / 17.6% of rungs at 2
    runs, 5.1% / 7.4% at 3, 0.3% / 0.5% at 6 (held to p^n + 3 se; seen 13.6-18.7% at 2, 0.2-0.5% at 6), where the
    median named the wrong side in 22-40% of rungs; the rest say undecided, 45-96% of rungs."""
    rng = np.random.default_rng(62)
    for runs in range(2, 7):
        wrong, undecided, median_wrong = _rates(rng, wait, device, runs)
        assert wrong <= _all_wrong(wait, device, runs), (runs, wrong)
        assert undecided >= 0.45 and undecided > 2 * wrong, (runs, undecided, wrong)
        assert median_wrong >= 0.2 and median_wrong > 2 * wrong, (runs, median_wrong, wrong)


def test_a_verdict_that_replaces_balanced_drops_balanceds_advice_sentence():
    """"Both sides limit: speed up either and the other follows" is balanced's: under both (a faster loader alone
    shows little) or launch-bound it would contradict the verdict it sits under."""
    BALANCED_TAIL = " Both sides limit: speed up either and the other follows."

    loader, model = _rec(32.00), _rec(34.53)  # the H200's rates: balanced
    assert diagnose(loader, model, _rec(30.87, 0.489286), "cuda", 1, False).text.endswith(BALANCED_TAIL)
    both = diagnose(loader, model, _rec(30.87, 0.31, 1.00), "cuda", 1, False)
    assert both.verdict == BOTH and "the rates alone said balanced: " in both.text
    assert "speed up either" not in both.text
    assert both.text.endswith("the training loop is blocked on the loader 31% of the time.")
