"""``climb``: the acceptance rule and the ascent on simulated measurements (no torch), the budget, the
ladder it writes, and one tiny climb end to end on the CPU."""

import json
import math
import os
import re
import shlex
import subprocess
import sys

from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from harness.climb import ascent, output, session, space
from harness.config import ladder_file
from harness.analysis.stats.noise_model import Noise, Runs
from harness.config import ladder as ladder_mod
from tests.conftest import REPO, harness_cli, in_process, tiny_model_config

CPU = space.Facts(device="cpu", usable_cpus=2)
DEFAULT_NOISE = Noise()
START = {"precision": "32", "batch_size": 4, "compile": "off", "channels_last": False, "data.num_workers": 0,
         "activation_checkpointing": False,
         "data.prefetch_factor": None, "data.persistent_workers": False, "data.pin_memory": False, "tf32": None,
         "cudnn_benchmark": False, "optimizer.fused": None, "optimizer.foreach": None}


def _measured(candidate, incumbent, status="ok", reason=""):
    return ascent.Measured(status, Runs(list(candidate)), Runs(list(incumbent)), reason)


# ------------------------------------------------------------------------------------------
# the acceptance rule


def test_a_clear_win_beyond_noise_and_the_minimum_effect_is_accepted():
    d = ascent.decide(_measured([120, 121, 119], [100, 101, 99]), DEFAULT_NOISE, 0.03)
    assert d.outcome == ascent.ACCEPTED and d.ratio.low > 1 and d.ratio.value == pytest.approx(1.2, abs=0.01)


def test_a_gain_within_noise_is_rejected():
    d = ascent.decide(_measured([105, 96, 110], [100, 104, 95]), DEFAULT_NOISE, 0.03)
    assert d.outcome == ascent.REJECTED and d.why == "within noise" and d.ratio.low < 1 < d.ratio.high


def test_a_significant_gain_below_the_minimum_effect_is_rejected():
    calibrated = Noise(cv=0.002, df=9, sweep_id="noise-x", runs=10, match="environment")
    d = ascent.decide(_measured([102, 102.1, 101.9], [100, 100.1, 99.9]), calibrated, 0.03)
    assert d.ratio.low > 1 and d.outcome == ascent.REJECTED and "less than 3%" in d.why
    small = _measured([102, 102.1, 101.9], [100, 100.1, 99.9])
    assert ascent.decide(small, calibrated, 0.01).outcome == ascent.ACCEPTED


def test_the_climbs_first_line_prints_the_noise_command_of_its_own_settings():
    start = tiny_model_config(results_dir="/tmp/climbs here")
    given = ["workload=custom", "workload.model._target_=torch.nn.Conv1d", "size=auto", "measure.steps=3"]
    line = session._spread(DEFAULT_NOISE, start, given)
    assert line == ("no calibration: the runs' own spread (run python -m harness noise workload=custom "
                    "workload.model._target_=torch.nn.Conv1d measure.steps=3 size=smoke device=cpu "
                    "'results_dir='\"'\"'/tmp/climbs here'\"'\"'')")
    assert session._spread(Noise(cv=0.02, df=4, sweep_id="noise-x", runs=5, match="m"), start, given).startswith(
        "noise: calibrated CV 2.0% from sweep noise-x")


def test_a_slower_candidate_is_rejected_as_slower():
    d = ascent.decide(_measured([80, 81, 79], [100, 101, 99]), DEFAULT_NOISE, 0.03)
    assert d.outcome == ascent.REJECTED and d.why == "slower beyond noise"


def test_one_run_per_side_needs_a_calibration():
    no_band = ascent.decide(_measured([200], [100]), DEFAULT_NOISE, 0.03)  # nothing says how noisy the machine is
    assert no_band.outcome == ascent.REJECTED and no_band.why.startswith("no band: one run a side and no calibration")
    assert "harness noise" not in no_band.why  # the climb's first line prints the command, with its settings
    calibrated = Noise(cv=0.02, df=4, sweep_id="noise-x", runs=5, match="environment")
    # the calibration's variance on its 4 df: t 2.78 x 2% x sqrt(2) = 7.9% on the log scale
    assert ascent.decide(_measured([108], [100]), calibrated, 0.03).outcome == ascent.REJECTED
    assert ascent.decide(_measured([109], [100]), calibrated, 0.03).outcome == ascent.ACCEPTED


def test_a_paired_table_takes_out_what_slowed_both_sides_in_a_round():
    # round 2 was 20% slower for both: the rounds cancel, the 10% gain is clear; unpaired it would be noise
    d = ascent.decide(_measured([110, 88.2, 110.3], [100, 80, 100.2]), DEFAULT_NOISE, 0.03)
    assert d.outcome == ascent.ACCEPTED and d.ratio.low > 1.09


def test_a_busy_machine_decides_nothing():
    busy = ascent.Measured("ok", Runs([120.0, 121.0]), Runs([100.0, 101.0]), busy="other processes used 40% of the "
                                                                                  "CPUs")
    d = ascent.decide(busy, DEFAULT_NOISE, 0.03)
    assert d.outcome == ascent.BUSY and d.why == ("no verdict: machine busy (other processes used 40% of the CPUs): "
                                                  "not trustworthy")


def test_failures_are_decided_by_their_status_not_by_throughput():
    assert ascent.decide(_measured([], [100], "oom", "CUDA out of memory"), DEFAULT_NOISE, 0.03).outcome == ascent.OOM
    skipped = ascent.decide(_measured([], [], "skipped", "tf32=true needs a CUDA GPU"), DEFAULT_NOISE, 0.03)
    assert skipped.outcome == ascent.SKIPPED and "CUDA" in skipped.why
    assert ascent.decide(_measured([], [100], "nan", "loss is nan"), DEFAULT_NOISE, 0.03).outcome == ascent.FAILED
    no_incumbent = ascent.decide(_measured([120], []), DEFAULT_NOISE, 0.03)
    assert no_incumbent.outcome == ascent.FAILED and "incumbent" in no_incumbent.why
    broken = ascent.Measured("ok", Runs([120.0]), Runs([]), "Killed", incumbent_status="error")
    assert ascent.decide(broken, DEFAULT_NOISE, 0.03).why == "the incumbent ended error: Killed"


def test_an_incumbent_that_stops_running_ends_the_climb_instead_of_failing_every_candidate():
    def measure(accepted, candidate, step):
        return ascent.Measured("ok", Runs([120.0]), Runs([]), "Killed", incumbent_status="error")

    result = ascent.ascend(dict(START), space.space("cpu"), CPU, measure, DEFAULT_NOISE, 0.03)
    assert len(result.steps) == 1 and result.stopped == "the incumbent did not run ok at step 1"


def test_a_a_comparisons_are_rarely_accepted_and_a_true_10_percent_gain_usually_is():
    rng = np.random.default_rng(0)
    calibrated = Noise(cv=0.03, df=4, sweep_id="noise-x", runs=5, match="environment")

    def rate(gain, noise, trials=400, cv=0.03, runs=3):
        wins = 0
        for _ in range(trials):
            old = 100 * np.exp(rng.normal(0, cv, runs))
            new = 100 * gain * np.exp(rng.normal(0, cv, runs))
            wins += ascent.decide(_measured(new, old), noise, 0.03).outcome == ascent.ACCEPTED
        return wins / trials

    assert rate(1.0, DEFAULT_NOISE) <= 0.03  # faster beyond noise AND by 3%: a no-op change almost never gets in
    assert rate(1.0, calibrated) <= 0.03
    assert rate(1.10, calibrated) >= 0.5  # 3 runs a side pair into 2 df of their own: a calibration adds 4


# ------------------------------------------------------------------------------------------
# the ascent on a simulated machine


class SimulatedMachine:
    """Throughput from settings: channels_last +25%, each batch doubling +10% up to 16, batch 32 runs out of
    memory (64 with activation checkpointing, which costs 15%), bf16 10% slower, one worker +5%, every other
    knob nothing; GPU-only knobs are skipped."""

    def __init__(self, noise_cv=0.0, seed=0, oom_at=32, batch_gain=1.1, checkpointing_fits=False):
        self.rng = np.random.default_rng(seed)
        self.noise_cv, self.oom_at, self.batch_gain = noise_cv, oom_at, batch_gain
        self.checkpointing_fits = checkpointing_fits
        self.calls = []

    def throughput(self, s):
        x = 100.0 * (1.25 if s["channels_last"] else 1.0) * self.batch_gain ** math.log2(min(s["batch_size"], 16) / 4)
        x *= 0.9 if s["precision"] == "bf16-mixed" else 1.0
        x *= 1.05 if s["data.num_workers"] >= 1 else 1.0
        if s["activation_checkpointing"]:
            x *= 0.85 * (self.batch_gain if s["batch_size"] >= 32 else 1.0)
        return x

    def fits(self, s):
        limit = self.oom_at * (2 if s["activation_checkpointing"] and self.checkpointing_fits else 1)
        return s["batch_size"] < limit

    def runs(self, s, n=3):
        return Runs([self.throughput(s) * math.exp(self.rng.normal(0, self.noise_cv)) for _ in range(n)])

    def measure(self, accepted, candidate, step):
        self.calls.append(candidate)
        incumbent = {**START, **dict(accepted)}
        new = {**incumbent, **dict(candidate)}
        enabled = {**incumbent, **dict(candidate[:-1])}
        if candidate[-1][0] in ("tf32", "cudnn_benchmark", "data.pin_memory"):
            return ascent.Measured("skipped", Runs([]), Runs([]), f"{candidate[-1][0]}=true needs a CUDA GPU")
        if not self.fits(new):
            return ascent.Measured("oom", Runs([]), Runs([]), "out of memory")
        return ascent.Measured("ok", self.runs(new), self.runs(incumbent), "",
                              enabled=self.runs(enabled) if len(candidate) > 1 else None)


def _ascend(machine, knobs=None, noise=DEFAULT_NOISE, confirm=True):
    return ascent.ascend(dict(START), space.space("cpu", knobs), CPU, machine.measure, noise, 0.03,
                         confirm=machine.measure if confirm else None)


def test_the_climb_keeps_the_wins_and_an_oom_on_the_batch_axis_ends_that_axis():
    machine = SimulatedMachine(noise_cv=0.01)
    result = _ascend(machine)
    assert result.best["channels_last"] is True and result.best["batch_size"] == 16
    assert result.best["data.num_workers"] == 1 and result.best["precision"] == "32"
    batch = [(s.value, s.enabling, s.outcome) for s in result.steps if s.key == "batch_size"]
    checkpointing = (("activation_checkpointing", True),)
    assert batch == [(8, (), ascent.ACCEPTED), (16, (), ascent.ACCEPTED), (32, (), ascent.OOM),
                     (32, checkpointing, ascent.OOM)]  # never tried again after checkpointing could not fit it
    assert result.best["activation_checkpointing"] is False
    skipped = {s.key for s in result.steps if s.outcome == ascent.SKIPPED}
    assert skipped == {"tf32", "cudnn_benchmark", "data.pin_memory"}
    assert sum(s.key == "tf32" for s in result.steps) == 1  # a knob that cannot act here is proposed once
    assert result.stopped.endswith("changed nothing")
    assert [s.step for s in result.steps] == list(range(1, len(result.steps) + 1))


def test_checkpointing_is_tried_only_to_fit_a_batch_that_ran_out_of_memory():
    machine = SimulatedMachine(noise_cv=0.005, batch_gain=1.4, checkpointing_fits=True)
    result = _ascend(machine, ["batch"])
    batch = [(s.value, s.enabling, s.outcome) for s in result.steps]
    checkpointing = (("activation_checkpointing", True),)
    assert batch == [(8, (), ascent.ACCEPTED), (16, (), ascent.ACCEPTED), (32, (), ascent.OOM),
                     (32, checkpointing, ascent.ACCEPTED), (64, (), ascent.OOM)]  # checkpointing on: the axis ends
    assert result.best["activation_checkpointing"] is True and result.best["batch_size"] == 32
    assert all(c[-1][0] == "batch_size" for c in machine.calls)  # never checkpointing alone as a candidate
    fitted = result.steps[3]
    assert fitted.parts[0].value == pytest.approx(0.85, rel=0.02)  # alone it is slower ...
    assert fitted.parts[1].value == pytest.approx(1.4, rel=0.02)  # ... and pays for the batch it fits
    lad = ladder_mod.parse("x", output.ladder_file(result, "resnet50", {}, "climb-x", "cuda H100"))
    assert [(r.key, r.value) for r in lad.rungs[1:]] == [("batch_size", 8), ("batch_size", 16),
                                                          ("activation_checkpointing", True), ("batch_size", 32)]
    assert "only to fit batch_size=32" in lad.rungs[3].note and lad.rungs[3].claim.high < 1


def test_axes_are_tried_in_order_of_expected_gain_on_this_device():
    order = [a.name for a in space.space("cpu")]
    assert order[0] == "channels_last" and order.index("precision") < order.index("tf32")
    assert [a.name for a in space.space("cuda")][0] == "precision"
    assert [a.name for a in space.space("cpu", ["batch", "channels_last"])] == ["channels_last", "batch"]


def test_workers_grow_only_up_to_the_usable_cpus():
    workers = space.AXES_BY_NAME["workers"]
    assert workers.values({**START, "data.num_workers": 0}, CPU) == [1]
    assert workers.values({**START, "data.num_workers": 1}, CPU) == [2]
    assert workers.values({**START, "data.num_workers": 2}, CPU) == []
    assert space.AXES_BY_NAME["prefetch"].values(START, CPU) == []  # no workers, nothing to prefetch


def test_a_climb_that_changes_nothing_stops_after_one_pass():
    class Flat(SimulatedMachine):
        def throughput(self, s):
            return 100.0

    result = _ascend(Flat(noise_cv=0.01), ["channels_last", "batch"])
    assert result.accepted == [] and result.best == START and result.stopped == "pass 1 changed nothing"


def test_a_second_pass_retries_the_other_axes_against_the_new_incumbent():
    class Interacting(SimulatedMachine):  # channels_last pays only at batch >= 8: found in pass 2
        def throughput(self, s):
            return 100.0 * (1.3 if s["channels_last"] and s["batch_size"] >= 8 else 1.0) * (
                1.2 if s["batch_size"] >= 8 else 1.0)

    result = _ascend(Interacting(noise_cv=0.005, oom_at=16), ["channels_last", "batch"])
    passes = {(s.key, s.value): (s.pass_, s.outcome) for s in result.steps}
    assert passes[("channels_last", True)] == (2, ascent.ACCEPTED) and result.best["batch_size"] == 8


def test_the_budget_ends_the_climb_with_the_reason_and_keeps_what_was_decided():
    machine = SimulatedMachine(noise_cv=0.01)

    def measure(accepted, candidate, step):
        if step == 3:
            raise ascent.BudgetSpent("the next run (~40 s) would not finish in the 12 s of budget left")
        return machine.measure(accepted, candidate, step)

    result = ascent.ascend(dict(START), space.space("cpu"), CPU, measure, DEFAULT_NOISE, 0.03)
    assert len(result.steps) == 3 and result.steps[-1].outcome == ascent.NOT_RUN
    assert result.stopped.startswith("budget spent: the next run (~40 s)")
    assert [(s.key, s.outcome) for s in result.steps[:2]] == [("channels_last", ascent.ACCEPTED),
                                                               ("precision", ascent.REJECTED)]
    assert result.best == {**START, "channels_last": True}


def test_the_budget_estimates_from_measured_runs_and_refuses_what_would_not_finish():
    budget = ascent.Budget(seconds=100, start=0.0)
    assert budget.estimate("a", False) is None and budget.refusal("a", False, now=10) == ""
    budget.record("a", 30.0, compiles=False)
    budget.record("b", 20.0, compiles=False)
    assert budget.estimate("b", False) == 20.0 and budget.estimate("new", False) == 30.0
    assert budget.estimate("new", True) == 30.0 * ascent.COMPILE_PRIOR  # no compiled run measured yet
    assert budget.refusal("new", False, now=60) == ""  # 40 s left, ~30 s needed
    assert "would not finish in the 25 s" in budget.refusal("new", False, now=75)
    assert budget.refusal("b", False, now=97) != ""  # fewer than MIN_TRIAL_S seconds left


# ------------------------------------------------------------------------------------------
# what the climb writes


def test_the_ladder_claims_the_band_of_each_accepted_change_measured_once_more():
    machine = SimulatedMachine(noise_cv=0.01)
    result = _ascend(machine)
    mapping = output.ladder_file(result, "resnet50", {"measure.steps": 5}, "climb-x", "cpu AMD (2 CPUs)")
    lad = ladder_mod.parse("climb-resnet50-cpu", yaml.safe_load(yaml.safe_dump(mapping)))
    assert [(r.key, r.value) for r in lad.rungs[1:]] == [(s.key, s.value) for s in result.accepted]
    assert lad.base == {"measure.steps": 5} and lad.workload == "resnet50"
    for rung, step in zip(lad.rungs[1:], result.accepted):
        assert step.confirmed is not None and step.confirmed != step.ratio  # other runs than those that won
        assert rung.claim.low == pytest.approx(step.confirmed.low, abs=1e-3)
        assert f"step {step.step}: measured again after it was accepted" in rung.claim.source
        assert "; measured again: " in step.why
    accepted_then_again = [c for c in machine.calls]
    assert len(accepted_then_again) == len(result.steps) + len(result.accepted)
    unconfirmed = output.ladder_file(_ascend(SimulatedMachine(noise_cv=0.01), confirm=False), "resnet50", {},
                                     "climb-x", "cpu")
    assert all("claim" not in r and "not measured again" in r["note"] for r in unconfirmed["rungs"])
    assert any("scale the learning rate" in n for n in lad.notes)  # the batch grew
    assert any("the accepted steps together" in n for n in lad.notes)


def test_two_models_climbed_in_one_results_folder_get_two_ladders_named_by_their_models():
    from harness.config import workload as workloads

    def custom(target, **fields):
        spec = workloads.builtin("custom")
        spec.model = {"_target_": target, **fields}
        return spec

    base = {"measure.steps": 5}
    names = {ladder_file.ladder_name(custom(t, **f), "cpu", base) for t, f in (
        ("monai.networks.nets.SegResNet", {"spatial_dims": 3}), ("monai.networks.nets.SegResNet", {"spatial_dims": 2}),
        ("monai.networks.nets.UNETR", {}))}
    assert len(names) == 3 and all(n.startswith(("climb-monai.networks.nets.SegResNet-cpu-",
                                                 "climb-monai.networks.nets.UNETR-cpu-")) for n in names)
    assert ladder_file.ladder_name(workloads.builtin("resnet50"), "cpu", {}) == "climb-resnet50-cpu"  # as before


def test_the_printed_commands_carry_every_word_the_climb_was_given_quoted_for_the_shell():
    result = _ascend(SimulatedMachine(noise_cv=0.01))
    given = ["--config-dir", "my conf", "workload=custom", "workload.model._target_=pkg.Net",
             "+workload.model.width=8", "batch_size=4", "results_dir='my résultats'"]
    (*_, best) = output.best_lines(result, {}, given)
    words = shlex.split(best.removeprefix("Best command: "))
    changes = {k: v for s in result.accepted for k, v in s.changes}
    assert words[:3] == ["python", "-m", "harness"] and words[3] == "run"
    assert words[4:10] == [w for w in given if not w.startswith("batch_size=")]  # the batch is a change now
    assert words[10:] == [f"{k}={ladder_mod.format_value(v)}" for k, v in changes.items()]


def test_training_notes_name_what_an_accepted_change_alters():
    assert "lr x 4" in output.training_note("batch_size", 4, 16)
    assert "accuracy" in output.training_note("precision", "32", "bf16-mixed")
    assert output.training_note("channels_last", False, True) == ""


def test_user_ladders_are_found_in_the_results_folder_after_the_shipped_ones(tmp_path):
    folder = tmp_path / "ladders"
    folder.mkdir()
    (folder / "mine.yaml").write_text("workload: resnet50\nrungs:\n  - set: {channels_last: true}\n")
    (folder / "phase2.yaml").write_text("workload: resnet50\nrungs: []\n")  # shadowed by conf/ladder/phase2.yaml
    assert ladder_mod.load("mine", str(tmp_path)).rungs[1].key == "channels_last"
    assert len(ladder_mod.load("phase2", str(tmp_path)).rungs) > 1
    assert {"mine", "phase2"} <= set(ladder_mod.available(str(tmp_path)))
    assert len(ladder_mod.file_sha("mine", str(tmp_path))) == 16 and ladder_mod.file_sha("mine") == ""
    with pytest.raises(ValueError, match="unknown ladder 'mine'"):
        ladder_mod.load("mine")


# ------------------------------------------------------------------------------------------
# the command


def fake_trials(repeats=2, budget_after=None):
    """``Trials.trial`` over made-up runs, recording which settings ran in which order."""
    from harness.climb.trials import Trials
    from harness.session.events import Events
    from harness.store import RunRecord

    class Fake(Trials):
        def __init__(self):
            self.repeats, self.order, self.busy = repeats, [], []
            self.ctx, self.events = SimpleNamespace(remeasure_busy=True), Events()
            self.budget = ascent.Budget(seconds=100, start=0.0)

        def whole_source(self, runs):
            return None

        def trial(self, changes, step, role, round_, change, hooks=None):
            if len(self.order) == budget_after:
                raise ascent.BudgetSpent("the next run (~40 s) would not finish in the 10 s of budget left")
            self.order.append((role, change))
            return RunRecord(run_id=str(len(self.order)), status="ok", timestamp="", samples_per_s=10.0), "measured"

    return Fake()


def compare(trials, accepted, candidate, step, kind=ascent.COMPARE):
    """One comparison of the climb's policy, run by the session engine."""
    from harness.climb import policy

    return policy.compare(trials, ascent.Request(kind, list(accepted), tuple(candidate), step))


def test_candidate_and_incumbent_runs_interleave_abba_and_a_two_change_candidate_measures_its_first_alone():
    trials = fake_trials(repeats=2)
    m = compare(trials, [("batch_size", 16)], (("activation_checkpointing", True), ("batch_size", 32)), 3)
    fit = "activation_checkpointing=true (to fit batch_size=32)"
    both = "activation_checkpointing=true, batch_size=32"
    assert trials.order == [("candidate", both), ("enabled", fit), ("incumbent", "incumbent"),
                            ("incumbent", "incumbent"), ("enabled", fit), ("candidate", both)]
    assert (m.candidate.n, m.incumbent.n, m.enabled.n) == (2, 2, 2)


def test_a_busy_run_is_measured_again_and_a_step_still_busy_decides_nothing():
    from harness.climb.policy import ClimbLines
    from harness.climb.trials import Trials
    from harness.session.events import Display, Events
    from harness.store import RunRecord
    from harness.sweeps import rungs as rungs_mod

    class Busy(Trials):
        def __init__(self, busy_runs):
            self.repeats, self.calls, self.lines, self.busy_runs, self.busy = 2, [], [], busy_runs, []
            self.ctx = rungs_mod.SweepContext(sweep_id="c", ladder=None, settings={}, user_keys=frozenset())
            self.budget = ascent.Budget(seconds=100, start=0.0)
            self.events = Events(ClimbLines(Display(self.lines.append, None)))

        def whole_source(self, runs):
            return None

        def trial(self, changes, step, role, round_, change, hooks=None):
            self.calls.append((role, round_))
            busy = len(self.calls) <= self.busy_runs
            return RunRecord(run_id=str(len(self.calls)), status="ok", timestamp="", samples_per_s=10.0,
                             other_cpu_pct=60.0 if busy else 1.0), "measured"

    once = Busy(busy_runs=1)
    m = compare(once, [], (("channels_last", True),), 1)
    assert once.calls[:2] == [("candidate", 0), ("candidate", 0)] and len(once.calls) == 5
    assert once.lines[:2] == [r"\[step 1, candidate 1/2] channels_last=true: ok (measured) 10.00 samples/s",
                              r"\[step 1, candidate 1/2] channels_last=true: machine busy (other processes used 60% "
                              "of the CPUs): not trustworthy; measuring it again"]
    assert m.busy == "" and once.busy == ["other processes used 60% of the CPUs"]
    twice = Busy(busy_runs=2)
    m = compare(twice, [], (("channels_last", True),), 1)
    assert m.busy == "other processes used 60% of the CPUs"
    assert ascent.decide(m, DEFAULT_NOISE, 0.03).outcome == ascent.BUSY
    again = Busy(busy_runs=0)
    compare(again, [], (("channels_last", True),), 4, ascent.AGAIN)
    assert [r for _, r in again.calls] == [2, 2, 3, 3]  # rounds after the first climb.repeats


def test_the_climb_as_a_policy_on_the_engine_decides_as_the_ascent_with_its_measures_does():
    """channels_last 2x faster (runs jittered by 1%): the engine runs the policy's turns one run at a time, and the
    result is the one ``ascend`` reaches with each request measured on its own."""
    from harness.climb.policy import ClimbLines, ClimbPolicy
    from harness.session import engine
    from harness.session.events import Display, Events
    from harness.store import RunRecord

    def trials(lines):
        fake = fake_trials(repeats=2)
        fake.events = Events(ClimbLines(Display(lines.append, None)))

        def trial(changes, step, role, round_, change, hooks=None):
            fake.order.append((role, round_))
            speed = (20.0 if ("channels_last", True) in changes else 10.0) * (1 + 0.01 * (len(fake.order) % 3))
            return RunRecord(run_id=str(len(fake.order)), status="ok", timestamp="", samples_per_s=speed), "cached"

        fake.trial = trial
        return fake

    axes, lines, alone = space.space("cpu", ["channels_last"]), [], trials([])
    on_engine = trials(lines)
    policy = ClimbPolicy(on_engine, ascent.climbing(dict(START), axes, CPU, DEFAULT_NOISE, 0.03, lambda step: None))
    assert engine.run(policy, on_engine.events) == 0
    def kind(name):
        return lambda accepted, candidate, step: compare(alone, accepted, candidate, step, name)

    measured = ascent.ascend(dict(START), axes, CPU, kind(ascent.COMPARE), DEFAULT_NOISE, 0.03,
                             confirm=kind(ascent.AGAIN), final=kind(ascent.FINAL))
    assert policy.result == measured and [s.outcome for s in measured.steps] == [ascent.ACCEPTED]
    assert measured.final is not None and measured.final.low > 1 and on_engine.order == alone.order
    assert [r for _, r in on_engine.order] == [0, 0, 1, 1, 2, 2, 3, 3, 0, 0, 1, 1]  # compare, again, the end check
    assert lines[-5] == "step 2: the start and the best, measured side by side" and len(lines) == 13


def test_a_comparison_copies_every_run_from_the_one_sweep_that_holds_them_all_or_measures_every_run(tmp_path):
    """The policy asks once, at a comparison's start, with all its runs; each of them then copies from that sweep
    alone, or from none; a size of the batch search copies from any sweep."""
    from harness.climb.trials import SEARCH, Trials
    from harness.session.events import Events
    from harness.store import RunRecord

    class Sourced(Trials):
        def __init__(self, source):
            self.repeats, self.busy, self.used, self.source = 2, [], set(), "stale"
            self.ctx, self.events = SimpleNamespace(remeasure_busy=True, results_dir=str(tmp_path)), Events()
            self.budget = ascent.Budget(seconds=100, start=0.0)
            self.answer, self.asked, self.sources = source, [], []

        def whole_source(self, runs):
            self.asked.append([(run.role, run.round_) for run in runs])
            return self.answer

        def trial(self, changes, step, role, round_, change, hooks=None):
            rule = self._cache(role)
            self.sources.append(None if rule is None else rule.sweep)
            return RunRecord(run_id=str(len(self.sources)), status="ok", timestamp="", samples_per_s=10.0), "cached"

    copied = Sourced("climb-earlier")
    compare(copied, [], (("channels_last", True),), 1)
    assert copied.asked == [[("candidate", 0), ("incumbent", 0), ("incumbent", 1), ("candidate", 1)]]
    assert copied.sources == ["climb-earlier"] * 4
    measured = Sourced(None)
    compare(measured, [], (("channels_last", True),), 1)
    assert measured.sources == [None] * 4
    assert measured._cache(SEARCH).sweep == ""  # the batch search reads memory: any sweep's run of a size


def test_a_step_cut_short_by_the_budget_says_how_many_of_its_runs_are_stored():
    with pytest.raises(ascent.BudgetSpent, match="; 3 of 4 runs of this step are stored, and a re-run measures the "
                                                 "step again whole"):
        compare(fake_trials(repeats=2, budget_after=3), [], (("channels_last", True),), 1)
    with pytest.raises(ascent.BudgetSpent, match="budget left$"):
        compare(fake_trials(repeats=2, budget_after=0), [], (("channels_last", True),), 1)


@pytest.mark.parametrize("override, says", [
    ("climb.repeats=0", "climb.repeats=0 must be a whole number >= 1"),
    ("climb.budget_min=-1", "climb.budget_min=-1.0 must be a positive number"),
    ("climb.knobs=[chanels_last]", "Did you mean 'channels_last'"),
    ("climb.budget=3", "budget"),
])
def test_bad_climb_settings_stop_with_one_line_and_exit_2(results, override, says, capfd):
    out = in_process(capfd, "climb", override, f"results_dir={results}")
    assert out.returncode == 2, out.stdout + out.stderr
    assert says in out.stdout + out.stderr and "Traceback" not in out.stdout + out.stderr
    assert not (results / "runs").exists() or not any((results / "runs").iterdir())


# the example's own small 3D net (a workload file of the user's): channels_last acts on it, and its runs are short
WORKLOAD = ("--config-dir", "examples/conf", "workload=tiny_net")
TINY = (*WORKLOAD, "measure.steps=3", "measure.warmup_steps=1", "climb.repeats=1", "sweep.remeasure_busy=false",
        "climb.knobs=[channels_last,pin_memory]")


@pytest.mark.slow  # minutes of the default tier's 8; the same path runs in faster tests
def test_a_tiny_climb_writes_a_ladder_that_sweep_reruns_from_the_store(results):
    out = harness_cli("climb", *TINY, "climb.budget_min=5", f"results_dir={results}")
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert "| step | pass | knob | value | vs incumbent [95% band]" in text
    assert "| data.pin_memory | false -> true | - | 0+0 | skipped |" in text  # cannot act on a CPU: no process
    line = next(x for x in text.splitlines() if x.startswith("Ladder written to "))
    name = line.split("+ladder=")[1].split()[0]
    assert (results / "ladders" / f"{name}.yaml").exists()

    from harness.store import load_runs

    frame = load_runs(results)
    assert set(frame["ladder"]) == {"climb"} and (frame["cached_from"] == "").all()
    assert sorted(frame["rung"]) == [0, 1, 3]  # step 1: incumbent + candidate; step 2: the skipped candidate

    again = harness_cli("climb", *TINY, "climb.budget_min=5", f"results_dir={results}")
    assert again.returncode == 0, again.stdout + again.stderr
    frame = load_runs(results)
    second = frame[frame["sweep_id"] == sorted(set(frame["sweep_id"]))[-1]]
    ran = second[second["status"] == "ok"]
    assert len(ran) == 2 and (ran["cached_from"] != "").all()  # nothing measured again

    sweep = harness_cli("sweep", *WORKLOAD, f"+ladder={name}", "sweep.repeats=1", "sweep.remeasure_busy=false",
                        f"results_dir={results}")
    assert sweep.returncode == 0, sweep.stdout + sweep.stderr
    frame = load_runs(results)
    rerun = frame[frame["ladder"] == name]
    assert len(rerun) >= 1 and (rerun["cached_from"] != "").all()


# a user's own model, inline, in a folder of theirs: every command the climb prints runs as printed

CLIMB_NETS = """
from torch import nn


class Tiny(nn.Module):
    def __init__(self, width: int = 4, num_classes: int = 2):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(8, width), nn.ReLU(), nn.Linear(width, num_classes))

    def forward(self, x):
        return self.net(x)
"""
# channels_last cannot act on 1D samples, pin_memory not on a CPU: both are skipped at once, no process starts
CUSTOM = ("--config-dir", "conf", "workload=custom", "workload.model._target_=climbnets13.Tiny",
          "+workload.model.width=8", "workload.input_shape=[1,8]", "measure.warmup_steps=1", "measure.steps=3",
          "climb.repeats=1", "climb.knobs=[channels_last,pin_memory]")


def _user_folder(tmp_path):
    (tmp_path / "conf" / "workload").mkdir(parents=True)
    (tmp_path / "climbnets13.py").write_text(CLIMB_NETS)
    return tmp_path, f"results_dir='{tmp_path / 'my résultats'}'"  # quoted for Hydra: an accent, a space


def _shell(line: str, cwd) -> subprocess.CompletedProcess:
    """A printed command line, run by a shell as a user would paste it (this interpreter as ``python``)."""
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="200",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def _printed(text: str, prefix: str) -> str:
    line = next(x for x in text.splitlines() if prefix in x)
    return line.split(prefix, 1)[1]


@pytest.mark.slow  # a climb, a run and three sweeps, each a fresh interpreter: ~40 s on a quiet 2-core CPU
def test_every_command_a_climb_of_a_custom_model_prints_runs_as_printed(tmp_path):
    folder, results_dir = _user_folder(tmp_path)
    out = harness_cli("climb", *CUSTOM, results_dir, cwd=folder)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "custom: climbnets13.Tiny (smoke)" in out.stdout and "<" not in out.stdout.split("Stopped:")[1]
    results = folder / "my résultats"
    (ladder,) = (results / "ladders").glob("*.yaml")
    assert ladder.name.startswith("climb-climbnets13.Tiny-cpu-")
    assert "workload=custom workload.model._target_=climbnets13.Tiny" in yaml.safe_load(ladder.read_text())["notes"][0]
    commands = {what: _printed(out.stdout, prefix) for what, prefix in (
        ("best", "Best command: "), ("rerun", "re-run it (from the store, in seconds): "),
        ("ci", "Gate CI on it: "), ("every", "Every run: "))}
    for what, line in commands.items():
        ran = _shell(line, folder)
        # runs as printed: 0, or 5 when a loaded machine made every run of a sweep's first round busy (it says so)
        busy = ran.returncode == 5 and "every run of the first round was busy" in ran.stdout + ran.stderr
        assert ran.returncode == 0 or busy, (what, line, ran.stdout, ran.stderr)
    from harness.store import load_runs

    frame = load_runs(results)
    assert set(frame["workload"]) == {"custom"} and (results / "baselines" / f"{ladder.stem}.parquet").exists()
    rows = frame[frame["ladder"] == ladder.stem]
    copied = rows["cached_from"].fillna("").astype(str) != ""
    # the re-run measured its baseline (again, once, when the machine was busy), the CI line copied it
    assert 1 <= int((~copied).sum()) <= 2 and int(copied.sum()) == 1, rows[["run_id", "cached_from"]]


def test_the_commands_a_climb_of_a_custom_model_prints_compose_and_its_table_runs(tmp_path, monkeypatch):
    from harness.commands import hydra_edge, sweep

    folder, results_dir = _user_folder(tmp_path)
    out = harness_cli("climb", *CUSTOM, results_dir, cwd=folder)
    assert out.returncode == 0, out.stdout + out.stderr
    table = _shell(_printed(out.stdout, "Every run: "), folder)  # the store alone: no torch, a second
    assert table.returncode == 0 and "workload custom: climbnets13.Tiny (smoke)" in table.stdout
    monkeypatch.chdir(folder)  # the printed lines are run from where the climb was
    monkeypatch.syspath_prepend(str(folder))
    best = shlex.split(_printed(out.stdout, "Best command: "))[4:]
    composed = hydra_edge.plain_settings(hydra_edge.compose_settings(hydra_edge.with_config_dirs(best)))
    assert composed["workload"]["model"] == {"_target_": "climbnets13.Tiny", "width": 8}
    assert composed["results_dir"] == str(folder / "my résultats")
    rerun = shlex.split(_printed(out.stdout, "re-run it (from the store, in seconds): "))[4:]
    plan = sweep.plan_sweep(hydra_edge.with_config_dirs(rerun))
    assert plan.settings["workload"] == composed["workload"] and plan.ladder.name.startswith("climb-climbnets13.Tiny-")
    sys.modules.pop("climbnets13", None)


@pytest.mark.slow  # minutes of the default tier's 8; the same path runs in faster tests
def test_a_climb_run_again_says_what_it_resumes_and_keeps_its_budget(tmp_path):
    folder, results_dir = _user_folder(tmp_path)
    first = harness_cli("climb", *CUSTOM, results_dir, cwd=folder)
    assert first.returncode == 0, first.stdout + first.stderr
    climb_id = _printed(first.stdout, "#### climb ").split(":")[0]
    (state,) = (folder / "my résultats" / "climbs").glob("*.json")
    saved = json.loads(state.read_text())
    assert saved["climb_ids"] == [climb_id] and saved["steps"] == 2 and saved["spent_s"] > 0
    state.write_text(json.dumps({**saved, "spent_s": 29 * 60.0}))  # as if it had spent 29 of its 30 minutes
    again = harness_cli("climb", *CUSTOM, results_dir, cwd=folder)
    assert again.returncode == 0, again.stdout + again.stderr
    said = " ".join(again.stdout.split())  # the console wraps its lines
    assert (f"resuming climb {climb_id} (stopped: pass 1 changed nothing): its 2 decided step(s) and the 0 run(s) "
            "it measured are taken from the store" in said)  # both knobs were skipped at once: nothing measured
    assert "it used 29.0 of the 30 min budget, 1.0 min are left" in said
    took = re.search(r"Took (\d+\.\d) \(29\.0 of them before it resumed\) of 30 min\.", said)
    assert took and float(took.group(1)) >= 29.0, said
    resumed = json.loads(state.read_text())
    assert resumed["climb_ids"][0] == climb_id and len(resumed["climb_ids"]) == 2 and resumed["spent_s"] >= 29 * 60


def test_the_best_band_combines_the_steps_bands_instead_of_multiplying_their_ends():
    steps = [SimpleNamespace(confirmed=None, ratio=SimpleNamespace(value=1.5, low=1.0, high=2.25)),
             SimpleNamespace(confirmed=SimpleNamespace(value=1.2, low=0.8, high=1.8), ratio=None)]
    value, low, high = output.total(SimpleNamespace(kept=steps))
    half = math.log(1.5) * math.sqrt(2)  # each step's band is x/÷ 1.5: two of them, x/÷ 1.5 ** sqrt(2)
    assert value == pytest.approx(1.8) and low == pytest.approx(1.8 / math.exp(half))
    assert high == pytest.approx(1.8 * math.exp(half)) and 0.8 < low and high < 4.05  # the ends' product: 0.8-4.05x
    kept = [SimpleNamespace(**vars(s), changes=[("batch_size", 4)]) for s in steps]
    lines = output.best_lines(SimpleNamespace(kept=kept, accepted=kept, final=None, final_why="", dropped=()), {}, [])
    assert lines[0].startswith(f"Best: 1.80x over the start, band {low:.2f}-{high:.2f}x (the kept steps together")
