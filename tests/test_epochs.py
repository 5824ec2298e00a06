"""A claim about epoch boundaries (persistent workers) judged at the guide's epoch length: the boundary's cost read
from the per-step times, the throughput derived at the guide's epoch, its verdict in the table, the ladder's
syntax, and a seeded simulation of how often equal settings get a verdict. Synthetic records only: no timing."""

from __future__ import annotations

import numpy as np
import pytest

from harness.analysis.views import epochs, render
from harness.analysis.views import table as table_mod
from harness.config import ladder as ladder_mod
from tests.test_components import _frame, _record

WARMUP, EPOCH, STEPS = 3, 5, 20


def _steps(step_ms: float, start_ms: float, rng=None, cv: float = 0.0) -> list[float]:
    """A window of STEPS steps after WARMUP warm-up steps; every EPOCH-th step (counting the warm-up) starts an
    epoch and costs ``start_ms`` more."""
    noise = rng.normal(1.0, cv, STEPS) if rng is not None else np.ones(STEPS)
    return [float(step_ms * n + (start_ms if (WARMUP + i) % EPOCH == 0 else 0.0)) for i, n in enumerate(noise)]


def test_a_runs_epoch_starts_and_their_cost_are_read_from_its_steps():
    record = _record(0, samples_per_s=30, step_ms=100, step_list=_steps(100.0, 400.0),
                     config={"data": {"epoch_steps": EPOCH}})
    cost = epochs.cost_of(_frame([record]).iloc[0])
    assert cost.boundaries == 4 and cost.epoch_steps == EPOCH  # steps 5, 10, 15, 20 of 3..22
    assert cost.step_ms == pytest.approx(100.0) and cost.boundary_ms == pytest.approx(400.0)
    assert cost.samples_per_s(EPOCH * 4) == pytest.approx(1000 * 4 * 5 / 900)  # as measured: one start in 5 steps
    assert cost.samples_per_s(10_000) == pytest.approx(1000 * 4 * 2500 / (2500 * 100 + 400))


def test_validation_steps_count_neither_as_epoch_starts_nor_as_plain_steps():
    steps = [s + (1000.0 if (WARMUP + i + 1) % EPOCH == 0 else 0.0) for i, s in enumerate(_steps(100.0, 400.0))]
    record = _record(0, samples_per_s=30, step_ms=100, step_list=steps,
                     config={"data": {"epoch_steps": EPOCH}, "val": {"every_n_steps": EPOCH}})
    cost = epochs.cost_of(_frame([record]).iloc[0])
    assert cost.step_ms == pytest.approx(100.0) and cost.boundary_ms == pytest.approx(400.0)


def test_no_epoch_length_or_no_start_in_the_window_gives_no_cost():
    record = _record(0, samples_per_s=30, step_ms=100, config={})
    assert epochs.cost_of(_frame([record]).iloc[0]) is None
    record = _record(0, samples_per_s=30, step_ms=100, config={"data": {"epoch_steps": 1000}})
    assert epochs.cost_of(_frame([record]).iloc[0]) is None


def _persistent_pair(runs: int = 3, start_ms: tuple[float, float] = (400.0, 20.0), cv: float = 0.0, seed: int = 0):
    rng = np.random.default_rng(seed)
    rows = []
    for run in range(runs):
        for rung, cost in enumerate(start_ms):
            steps = _steps(100.0, cost, rng, cv)
            rows.append(_record(rung, samples_per_s=1000 * 4 * len(steps) / sum(steps), step_ms=100, run=run,
                                step_list=steps, config={"data": {"epoch_steps": EPOCH}},
                                change="data.persistent_workers=true" if rung else "",
                                claim=(1.15, 1.2, "1.15-1.2x") if rung else None,
                                component=epochs.component(10_000) if rung else ""))
    return _frame(rows)


def test_persistent_workers_confirm_on_short_epochs_but_fall_short_at_the_guides_epoch():
    table = table_mod.build_table(_persistent_pair(cv=0.01), "s")
    row = table.rows[1]
    assert row.x_previous.value == pytest.approx(900 / 524, rel=0.02)  # 1.72x on epochs of 5 steps
    assert row.component_measured.value == pytest.approx(1.0015, abs=0.01)  # at 2,500 steps an epoch
    assert row.verdict == "falls short (no measurable change) (at the guide's epoch 1.00x)"
    text = render.to_markdown(table)
    assert "1.15-1.2x (per epoch of 10,000 samples)" in text
    assert ("data.persistent_workers=true: at the guide's epoch (10,000 samples, 2,500 steps) 1.00x, derived from "
            "an epoch start's cost over a step, 400 -> 20 ms, measured on epochs of 5 steps.") in text


def test_a_group_claim_at_the_guides_epoch_is_named_so():
    frame = _persistent_pair(runs=2)
    frame["group_claims_json"] = ('[{"first": 1, "last": 1, "low": 1.1, "high": 1.2, "label": "1.1-1.2x", '
                                  '"source": "g", "component": "epoch:10000"}]')
    table = table_mod.build_table(frame, "s")
    text = render.to_markdown(table)
    assert "1.1-1.2x per epoch of 10,000 samples" in text
    assert "rungs 1-1 together: at the guide's epoch (10,000 samples, 2,500 steps)" in text


def test_equal_settings_get_a_verdict_at_the_guides_epoch_about_5_percent_of_the_time():
    """A/A: both rungs restart workers at the same cost, runs 5% apart, steps 10% apart within a run. The band on
    the derived throughput must exclude 1x in about 5% of trials (seeded, 400 trials, 3 runs a side)."""
    rng = np.random.default_rng(20261126)
    wrong = 0
    trials = 400
    for _ in range(trials):
        sides = []
        for _side in range(2):
            costs = []
            for _run in range(3):
                level = 100.0 * rng.normal(1.0, 0.05)
                steps = [level * n for n in rng.normal(1.0, 0.10, STEPS)]
                steps = [s + (300.0 if (WARMUP + i) % EPOCH == 0 else 0.0) for i, s in enumerate(steps)]
                record = _record(0, samples_per_s=1.0, step_ms=100, step_list=steps,
                                 config={"data": {"epoch_steps": EPOCH}})
                costs.append(epochs.cost_of(_frame([record]).iloc[0]))
            sides.append(costs)
        measured, _ = epochs.verdict(sides[0], sides[1], 10_000, 1.15, 1.2)
        wrong += not measured.within_noise
    assert wrong / trials <= 0.09


@pytest.mark.parametrize("entry,message", [
    ({"set": {"batch_size": 2}, "claim": [1, 2], "epoch_samples": 10}, "gives both component: epoch and epoch_samples"),
    ({"set": {"batch_size": 2}, "claim": [1, 2], "component": "epoch"}, "epoch_samples=None with component='epoch'"),
    ({"set": {"batch_size": 2}, "claim": [1, 2], "component": "epoch", "epoch_samples": 1.5},
     "epoch_samples=1.5 is not valid"),
    ({"set": {"batch_size": 2}, "claim": [1, 2], "component": "data", "epoch_samples": 10},
     "no other component takes epoch_samples"),
])
def test_a_ladders_epoch_claim_needs_both_fields(entry, message):
    with pytest.raises(ValueError, match=message):
        ladder_mod.parse("x", {"rungs": [entry]})


def test_the_a100_plans_prefetch_and_persistent_claim_is_judged_at_the_guides_4000_step_epoch():
    group, = ladder_mod.load("a100_volume").group_claims
    assert (group.first, group.last, group.claim.component) == (3, 4, "epoch:4000")
