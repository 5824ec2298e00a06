"""Seeded simulations of ``diagnose``'s verdict from its three rates (``views.diagnosis.diagnose``, the command's
function, on a CPU): one run each of the loader alone, the model alone and the full step, each off its true rate by
log-normal noise of one run (CV 2%, 5%, 10%; t on 3 df scaled to 5%); the full step runs at the slower part's rate
(the fastest it can). 2,000 diagnoses a cell (seed 1; t3: seed 2). data-bound below loader / model 0.8, compute-bound
above 1.25, balanced between; one run each, so a ratio's noise is CV x sqrt(2):

| true loader / model | CV 2% | CV 5% | CV 10% |
|---|---|---|---|
| 0.72 (data-bound, 10% from the line) | 0% wrong | 6.5% balanced | 23.6% balanced |
| 0.8 or 1.25 (on a line) | 49-51% either | 49-51% either | 49-51% either |
| 0.9 (balanced, 12% from 0.8) | 0% wrong | 4.7% data-bound | 19.5% data-bound, 0.7% compute-bound |
| 1.0 (balanced) | 0% wrong | 0% (t3: 1.2%) | 10.3% |
| 1.4 (compute-bound, 12% from 1.25) | 0% wrong | 5.2% balanced | 21.1% balanced |

A wrong label needs the ratio's noise past the distance to the line, so it is the normal tail the tests hold it to
(3 standard errors of 2,000). The note "the full step ran faster than the model alone ...: these runs disagree" is
written where the full step reads 10% faster than a part; a compute-bound loop (loader 2x the model, the full step at
the model's rate) gets it from noise alone in 0.1%, 7.9% and 25% of diagnoses at CV 2%, 5%, 10% (t3 at 5%: 6.6%); a
balanced one (both parts at the full step's rate) in 0.1%, 12.9%, 37% (two parts to outpace)."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
from sim_rates import TRIALS, at_least, at_most

from harness.analysis.views import diagnosis

LINE = math.log(diagnosis.BOUND_SLACK)


def _record(rate: float) -> dict:
    return {"status": "ok", "samples_per_s": rate, "batch_size": 1, "data_wait_frac": 0.3, "other_cpu_pct": 0.0}


def diagnoses(seed: int, loader_over_model: float, cv: float, tails: int | None = None) -> tuple[dict, float]:
    """The share of each verdict, and of diagnoses noting that the full step outran a part."""
    rng = np.random.default_rng(seed)
    rates = (10.0 * loader_over_model, 10.0, 10.0 * min(loader_over_model, 1.0))
    labels: dict[str, int] = {}
    noted = 0
    for _ in range(TRIALS):
        e = (rng.standard_t(tails, 3) * cv / math.sqrt(tails / (tails - 2)) if tails else rng.normal(0.0, cv, 3))
        loader, model, full = (_record(r * math.exp(x)) for r, x in zip(rates, e))
        found = diagnosis.diagnose(loader, model, full, "cpu", 2, False)
        labels[found.verdict] = labels.get(found.verdict, 0) + 1
        noted += bool(found.notes)
    return {k: v / TRIALS for k, v in labels.items()}, noted / TRIALS


def _past(distance: float, cv: float) -> float:
    """One diagnosis's chance that the ratio of two runs lands ``distance`` (log) past its true value one way."""
    return 1 - statistics.NormalDist(0.0, cv * math.sqrt(2)).cdf(distance)


@pytest.mark.parametrize("cv", [0.02, 0.05, 0.10])
@pytest.mark.parametrize("ratio, right, lines", [
    (0.72, "data-bound", (diagnosis.DATA_BOUND_BELOW,)),
    (0.9, "balanced", (diagnosis.DATA_BOUND_BELOW, diagnosis.COMPUTE_BOUND_ABOVE)),
    (1.4, "compute-bound", (diagnosis.COMPUTE_BOUND_ABOVE,))])
def test_a_label_is_wrong_only_as_often_as_one_runs_noise_crosses_the_line(cv, ratio, right, lines):
    labels, _ = diagnoses(1, ratio, cv)
    wrong = 1 - labels.get(right, 0.0)
    expected = sum(_past(abs(math.log(ratio / line)), cv) for line in lines)
    assert at_least(expected) <= wrong <= at_most(expected), (wrong, expected)


def test_on_a_line_either_label_comes_about_half_the_time():
    for ratio in (diagnosis.DATA_BOUND_BELOW, diagnosis.COMPUTE_BOUND_ABOVE):
        labels, _ = diagnoses(1, ratio, 0.05)
        assert all(0.45 <= share <= 0.55 for share in labels.values()) and len(labels) == 2


def test_a_balanced_loop_reads_balanced_unless_the_noise_is_large():
    assert diagnoses(1, 1.0, 0.05)[0] == {"balanced": 1.0}
    assert diagnoses(2, 1.0, 0.05, tails=3)[0]["balanced"] >= 0.98
    assert diagnoses(1, 1.0, 0.10)[0]["balanced"] >= at_least(0.897)


@pytest.mark.parametrize("cv", [0.02, 0.05, 0.10])
def test_the_full_step_outruns_the_model_by_noise_alone_as_often_as_two_runs_cross_10_percent(cv):
    _, noted = diagnoses(1, 2.0, cv)
    assert at_least(_past(LINE, cv)) - 0.001 <= noted <= at_most(_past(LINE, cv)), noted
