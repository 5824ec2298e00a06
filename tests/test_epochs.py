"""A claim about epoch boundaries (persistent workers) judged at the guide's epoch length: the boundary's cost read
from the per-step times, the throughput derived at the guide's epoch, its verdict in the table, the ladder's
syntax, and a seeded simulation of how often equal settings get a verdict. Synthetic records only: no timing."""

from __future__ import annotations

import random

import numpy as np
import pytest

from harness.analysis.stats import blocks, noise_model, speedup
from harness.analysis.views import epochs, render
from harness.analysis.views import table as table_mod
from harness.config import ladder as ladder_mod
from tests.test_components import _frame, _record
from tests.test_queue_sim import InOrderLoader

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
    assert cost.boundaries == 3 and cost.epoch_steps == EPOCH  # whole epochs 5-9, 10-14, 15-19 of 3..22
    assert cost.step_ms == pytest.approx(100.0) and cost.boundary_ms == pytest.approx(400.0)
    assert cost.samples_per_s(EPOCH * 4) == pytest.approx(1000 * 4 * 5 / 900)  # as measured: one start in 5 steps
    assert cost.samples_per_s(10_000) == pytest.approx(1000 * 4 * 2500 / (2500 * 100 + 400))


def test_validation_steps_count_neither_as_epoch_starts_nor_as_plain_steps():
    steps = [s + (1000.0 if (WARMUP + i + 1) % EPOCH == 0 else 0.0) for i, s in enumerate(_steps(100.0, 400.0))]
    record = _record(0, samples_per_s=30, step_ms=100, step_list=steps,
                     config={"data": {"epoch_steps": EPOCH}, "val": {"every_n_steps": EPOCH}})
    cost = epochs.cost_of(_frame([record]).iloc[0])
    assert cost.step_ms == pytest.approx(100.0) and cost.boundary_ms == pytest.approx(400.0)


@pytest.mark.parametrize("val, data, expected_ms", [
    ({"every_n_steps": EPOCH, "num_workers": 2}, {}, 200.0),  # a pass an epoch, 2 workers at 400 / 4 ms each
    ({"every_n_steps": 2 * EPOCH, "num_workers": 2}, {}, 100.0),  # a pass every second epoch
    ({"every_n_steps": EPOCH, "num_workers": 4}, {}, 400.0),
    ({"every_n_steps": EPOCH, "num_workers": 2}, {"persistent_workers": True}, 0.0),  # kept: started once
    ({"every_n_steps": EPOCH, "num_workers": 0}, {}, 0.0),  # validation in the main process: nothing starts
    ({"every_n_steps": 0, "num_workers": 2}, {}, 0.0),  # no validation
])
def test_a_guides_epoch_is_charged_its_validation_loaders_worker_starts(val, data, expected_ms):
    steps = [s + (1000.0 if val["every_n_steps"] and (WARMUP + i + 1) % val["every_n_steps"] == 0 else 0.0)
             for i, s in enumerate(_steps(100.0, 400.0))]
    record = _record(0, samples_per_s=30, step_ms=100, step_list=steps,
                     config={"data": {"epoch_steps": EPOCH, "num_workers": 4, **data}, "val": val})
    cost = epochs.cost_of(_frame([record]).iloc[0])
    assert cost.boundary_ms == pytest.approx(400.0) and cost.val_start_ms == pytest.approx(expected_ms)
    assert cost.samples_per_s(10_000) == pytest.approx(1000 * 4 * 2500 / (2500 * 100 + 400 + expected_ms))


def test_no_epoch_length_or_no_start_in_the_window_gives_no_cost():
    record = _record(0, samples_per_s=30, step_ms=100, config={})
    assert epochs.cost_of(_frame([record]).iloc[0]) is None
    record = _record(0, samples_per_s=30, step_ms=100, config={"data": {"epoch_steps": 1000}})
    assert epochs.cost_of(_frame([record]).iloc[0]) is None


def _persistent_pair(runs: int = 3, start_ms: tuple[float, float] = (400.0, 20.0), cv: float = 0.0, seed: int = 0,
                     val: dict | None = None):
    rng = np.random.default_rng(seed)
    rows = []
    for run in range(runs):
        for rung, cost in enumerate(start_ms):
            steps = _steps(100.0, cost, rng, cv)
            data = {"epoch_steps": EPOCH, **({"num_workers": 4, "persistent_workers": bool(rung)} if val else {})}
            rows.append(_record(rung, samples_per_s=1000 * 4 * len(steps) / sum(steps), step_ms=100, run=run,
                                step_list=steps, config={"data": data, "val": val or {}},
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
            "an epoch's excess over its steady steps, 399 -> 20 ms, measured on epochs of 5 steps.") in text


def test_persistent_workers_at_the_guides_epoch_also_save_the_validation_loaders_worker_starts():
    """A pass every epoch with 4 validation workers, as DETR's baseline: the workers it no longer starts are the
    training loader's 400 ms again, so the derived speedup is 1 + 780 / 250,020 instead of 1 + 380 / 250,020."""
    table = table_mod.build_table(_persistent_pair(cv=0.0, val={"every_n_steps": EPOCH, "num_workers": 4}), "s")
    row = table.rows[1]
    assert row.component_measured.value == pytest.approx(250_800 / 250_020, rel=1e-4)
    assert ("data.persistent_workers=true: at the guide's epoch (10,000 samples, 2,500 steps) 1.00x, derived from "
            "an epoch's excess over its steady steps, 400 -> 20 ms, plus its validation loader's worker starts, "
            "400 -> 0 ms, measured on epochs of 5 steps.") in render.to_markdown(table)


def test_a_group_claim_at_the_guides_epoch_is_named_so():
    frame = _persistent_pair(runs=2)
    frame["group_claims_json"] = ('[{"first": 1, "last": 1, "low": 1.1, "high": 1.2, "label": "1.1-1.2x", '
                                  '"source": "g", "component": "epoch:10000"}]')
    table = table_mod.build_table(frame, "s")
    text = render.to_markdown(table)
    assert "1.1-1.2x per epoch of 10,000 samples" in text
    assert "rungs 1-1 together: at the guide's epoch (10,000 samples, 2,500 steps)" in text


def _derived_logs(rng, trials: int, rungs: int, rounds: int, cv: float, val_workers: int = 0) -> np.ndarray:
    """(trials, rungs, rounds) log throughputs at the guide's epoch of A/A runs: every run restarts its workers at
    the same cost, its level CV ``cv`` apart from the others' and its steps 10% apart, read by ``epochs.cost_of``'s
    rule; with ``val_workers``, a validation pass an epoch (its step left out) starting that many of 4 workers."""
    levels = 100.0 * rng.lognormal(0.0, cv, (trials, rungs, rounds))
    steps = levels[..., None] * rng.normal(1.0, 0.10, (trials, rungs, rounds, STEPS))
    steps += np.where((WARMUP + np.arange(STEPS)) % EPOCH == 0, 300.0, 0.0)
    out = np.empty((trials, rungs, rounds))
    for index in np.ndindex(out.shape):
        cost = epochs.cost_from_steps(list(steps[index]), WARMUP, EPOCH, EPOCH if val_workers else 0, 4.0,
                                      4 if val_workers else 0, val_workers)
        out[index] = np.log(cost.samples_per_s(10_000))
    return out


@pytest.mark.parametrize("rounds, val_workers", [(1, 0), (2, 0), (2, 4)])
def test_equal_settings_assert_a_change_at_the_guides_epoch_in_at_most_5_percent_of_sweeps(rounds, val_workers):
    """A/A at a run-to-run CV of 10%, 4 rungs, rung 1 over rung 0 at the guide's epoch, judged as the table judges
    (``blocks.fit``, ``blocks.contrast``: the rung x round model of the derived throughputs, no assumed CV). One
    round: no band, so no verdict at all; two: the pooled t, exact, held to 5% + 3 standard errors of a 5% rate at
    1,000 trials (6.4%). The old rule (CV 5% taken as known with one run a side) asserted a change in a third."""
    rng = np.random.default_rng(20261127 + rounds)
    trials = 1000
    logs = _derived_logs(rng, trials, 4, rounds, 0.10, val_workers)
    low, high = blocks.contrast(blocks.fit(logs), 1, 0).bounds(0.05)
    codes = speedup.verdict_codes(low, high, 1.15, 1.2)
    asserted = np.mean((low > 1.0) | (high < 1.0))  # a verdict that asserts a change (not "no measurable change")
    old = np.mean([not noise_model.ratio(noise_model.Runs(list(np.exp(t[1]))),
                                         noise_model.Runs(list(np.exp(t[0])))).within_noise for t in logs])
    if rounds == 1:
        assert (codes == speedup.NO_BAND).all() and asserted == 0.0
        assert old >= 0.25  # seen: 34.7%
    else:
        assert asserted <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / trials)  # seen: 5.4% (old rule, Welch: 3.0%)


def _loop_steps(rng: random.Random, workers: int, compute_ms: float, batch_ms: float, start_ms: float,
                stagger_ms: float, epoch: int, steps: int) -> list[float]:
    """A loop's step times over epochs of ``epoch`` steps, each epoch a fresh iterator of in-order workers
    (``InOrderLoader``, prefetch 2) that start ``start_ms`` after it opens, ``stagger_ms`` apart."""
    out, t = [], 0.0
    while len(out) < steps:
        loader = InOrderLoader(rng, workers, 2, batch_ms, t, start_ms, stagger_ms)
        for k in range(epoch):
            took = loader.step(k, t, compute_ms)[1]
            out.append(took)
            t += took
    return out[:steps]


def _first_step_rule(window: list[float], first: int, every: int) -> epochs.EpochCost:
    """The rule before: an epoch's first step over the mean of every other step."""
    starts = [ms for i, ms in enumerate(window) if (first + i) % every == 0]
    plain = [ms for i, ms in enumerate(window) if (first + i) % every != 0]
    base = sum(plain) / len(plain)
    return epochs.EpochCost(1.0, base, max(sum(starts) / len(starts) - base, 0.0), every, len(starts))


def _derived_speedup_error(bound: str, trials: int = 60) -> tuple[float, float]:
    """Mean relative error of persistent workers' speedup at the guide's epoch (313 steps: 10,000 samples of 32),
    derived from a window of 50 steps on epochs of 20 (3 warm-up steps), against the speedup over 3 epochs of 313
    steps measured outright: (this module's rule, the first-step rule). Without persistent workers every epoch
    restarts them (200-500 ms, then one after another 3 steps apart: the wait spreads over the epoch's first
    wave); with them the iterator still refills its queue from empty."""
    rng = random.Random(11)
    new, old = [], []
    for _ in range(trials):
        workers, compute = rng.choice([2, 4]), rng.uniform(5.0, 20.0)
        batch = compute * workers * (rng.uniform(0.2, 0.7) if bound == "compute" else rng.uniform(1.2, 2.0))
        restart = (rng.uniform(200.0, 500.0), 3.0 * compute)
        derived, before, truth = [], [], []
        for start, stagger in (restart, (0.0, 0.0)):
            window = _loop_steps(rng, workers, compute, batch, start, stagger, 20, 53)[WARMUP:]
            derived.append(epochs.cost_from_steps(window, WARMUP, 20, 0, 1.0, workers).samples_per_s(313))
            before.append(_first_step_rule(window, WARMUP, 20).samples_per_s(313))
            long = _loop_steps(rng, workers, compute, batch, start, stagger, 313, 3 * 313)
            truth.append(len(long) / sum(long))
        new.append(derived[1] / derived[0] / (truth[1] / truth[0]) - 1)
        old.append(before[1] / before[0] / (truth[1] / truth[0]) - 1)
    return float(np.mean(new)), float(np.mean(old))


def test_a_restart_spread_over_the_epochs_first_steps_is_charged_to_the_boundary_not_to_every_step():
    new, old = _derived_speedup_error("compute")
    assert abs(new) < 0.03 and old > 0.10  # seen: -0.02% and +15.4%
    # a data-bound loop: the derived speedup within 3% too (seen: -2.9%, the first-step rule +10.3%); what is left is
    # not the boundary's: in-order workers that start together drift apart over an epoch, so the later steps of an
    # epoch of 5 waves run ~4% below the pace of one of 78 (the slowest worker's drift sets an in-order pace)
    new, old = _derived_speedup_error("data")
    assert abs(new) < 0.03 and old > 0.08


@pytest.mark.parametrize("entry,message", [
    ({"set": {"batch_size": 2}, "claim": [1, 2], "epoch_samples": 10},
     "gives component: epoch and one of epoch_samples"),
    ({"set": {"batch_size": 2}, "claim": [1, 2], "component": "epoch"},
     "epoch_samples=None, epoch_seconds=None with component='epoch'"),
    ({"set": {"batch_size": 2}, "claim": [1, 2], "component": "epoch", "epoch_samples": 10, "epoch_seconds": 900},
     "epoch_samples=10, epoch_seconds=900 with component='epoch'"),
    ({"set": {"batch_size": 2}, "claim": [1, 2], "component": "epoch", "epoch_samples": 1.5},
     "epoch_samples=1.5 is not valid"),
    ({"set": {"batch_size": 2}, "claim": [1, 2], "component": "epoch", "epoch_seconds": 0},
     "epoch_seconds=0 is not valid: give the guide's seconds an epoch"),
    ({"set": {"batch_size": 2}, "claim": [1, 2], "component": "data", "epoch_samples": 10},
     "no other component takes either"),
])
def test_a_ladders_epoch_claim_needs_both_fields(entry, message):
    with pytest.raises(ValueError, match=message):
        ladder_mod.parse("x", {"rungs": [entry]})


def test_a_guides_epoch_in_seconds_is_the_samples_its_baseline_makes_here_in_that_time():
    """DETR gives its epoch in minutes ("~15 minutes per epoch"): a claim with epoch_seconds is judged at the samples
    rung 0 makes in that time at its steady pace here (4 samples a 100 ms step: 40 a second, 900 s -> 36,000)."""
    lad = ladder_mod.parse("x", {"rungs": [{"set": {"batch_size": 2}, "claim": [1, 2], "component": "epoch",
                                            "epoch_seconds": 900}]})
    assert lad.rungs[1].claim.component == "epoch_s:900" and epochs.epoch_seconds("epoch_s:900") == 900
    assert epochs.label("epoch_s:900") == "per epoch of 900 s at the baseline's pace"
    base = [epochs.EpochCost(4.0, 100.0, 400.0, 5, 3), epochs.EpochCost(4.0, 125.0, 400.0, 5, 3),
            epochs.EpochCost(4.0, 80.0, 400.0, 5, 3)]
    assert epochs.in_samples("epoch_s:900", base) == "epoch:36000"
    assert epochs.in_samples("epoch_s:900", []) == "epoch_s:900" and epochs.in_samples("epoch:10", base) == "epoch:10"
    frame = _persistent_pair()
    frame["claim_component"] = ["epoch_s:900" if r else "" for r in frame["rung"]]
    table = table_mod.build_table(frame, "s")
    steady = 1000 * 4 / 100.0  # _steps: 100 ms steady steps of 4 samples
    assert table.rows[1].claim_component == epochs.component(round(900 * steady)) == "epoch:36000"
    text = render.to_markdown(table)
    assert "The guide's epoch of 900 s is 36,000 samples at the baseline's steady pace here (rung 0)." in text
    assert "at the guide's epoch (36,000 samples, 9,000 steps)" in text
    assert ladder_mod.load("detr_guide").group_claims[0].claim.component == "epoch_s:900"


def test_the_a100_plans_prefetch_and_persistent_claim_is_judged_at_the_guides_4000_step_epoch():
    group, = ladder_mod.load("a100_volume").group_claims
    assert (group.first, group.last, group.claim.component) == (3, 4, "epoch:4000")
