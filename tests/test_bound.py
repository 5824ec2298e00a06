"""What limits a loop: the loader, the device, or both at once. Data-bound only where the device idles while the
host waits; the H100's phase 2 baseline (device busy the whole step, the host waiting 31%) is both."""

import pytest

from harness.analysis.views import bound
from harness.analysis.views.bound import BOTH, COMPUTE, DATA, HOST, limited_by
from harness.analysis.views.diagnosis import diagnose
from tests.conftest import REPO

H100 = REPO / "results" / "h100"
PHASE2_H100 = "phase2-20261127-235759992403-d8545708"


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
