"""``climb``'s batch knob on a GPU: fit's search for the largest batch that fits the incumbent, then the batch x2,
x4, ... up to it, each judged as any knob; on a CPU no search (the batch doubles). Simulated: no process runs."""

import dataclasses

import pytest

from harness.climb import ascent, policy, session, space
from harness.session.events import Display, Events
from harness.store import RunRecord
from tests.test_climb import DEFAULT_NOISE, START, SimulatedMachine

CUDA = space.Facts(device="cuda", usable_cpus=2)
CHECKPOINTING = (("activation_checkpointing", True),)


def test_the_batch_tries_doublings_up_to_the_largest_that_fits_then_one_past_it():
    values = space.AXES_BY_NAME["batch"].values
    assert values(START, dataclasses.replace(CUDA, largest_batch=lambda s: 40)) == [8, 16, 32, 40, 64]
    assert values({**START, "activation_checkpointing": True},
                  dataclasses.replace(CUDA, largest_batch=lambda s: 32)) == [8, 16, 32]  # nothing could fit 64
    assert values(START, dataclasses.replace(CUDA, largest_batch=lambda s: 4)) == [8]  # past it: checkpointing
    assert values(START, CUDA) == [8]  # no search (a CPU): x2 while it wins


def test_on_a_gpu_the_climb_searches_once_per_incumbent_and_judges_each_batch_up_to_the_bound():
    machine = SimulatedMachine(noise_cv=0.005)  # +10% a doubling up to 16; 32 runs out of memory
    searched = []

    def largest(settings):
        searched.append(settings["batch_size"])
        return machine.oom_at - 1

    facts = dataclasses.replace(CUDA, largest_batch=largest)
    result = ascent.ascend(dict(START), space.space("cuda", ["batch"]), facts, machine.measure, DEFAULT_NOISE, 0.03,
                           confirm=machine.measure)
    batch = [(s.value, s.enabling, s.outcome) for s in result.steps]
    assert batch == [(8, (), ascent.ACCEPTED), (16, (), ascent.ACCEPTED), (31, (), ascent.REJECTED),
                     (32, (), ascent.OOM), (32, CHECKPOINTING, ascent.OOM)]
    assert result.best["batch_size"] == 16 and searched == [4, 8, 16, 16]  # asked of each incumbent (cached)


def test_a_search_cut_by_the_budget_ends_the_climb_and_says_why():
    def spent(settings):
        raise ascent.BudgetSpent("the next run (~60 s) would not finish in the 10 s of budget left")

    result = ascent.ascend(dict(START), space.space("cuda", ["batch"]), dataclasses.replace(CUDA, largest_batch=spent),
                           SimulatedMachine().measure, DEFAULT_NOISE, 0.03)
    assert result.steps == [] and result.stopped == ("budget spent: the next run (~60 s) would not finish in the 10 s "
                                                     "of budget left")


class FakeTrials:
    """The climb's trials for the search: out of memory above ``fits`` samples a step, told to no one."""

    def __init__(self, fits):
        self.fits, self.runs, self.busy, self.repeats = fits, [], [], 1
        self.events = Events()

    def trial(self, changes, step, role, round_, change, hooks=None):
        size = dict(changes)["batch_size"]
        self.runs.append((tuple(c for c in changes if c[0] != "batch_size"), size))
        return RunRecord(run_id=f"r{size}", status="ok" if size <= self.fits else "oom", timestamp=""), "measured"

    def stopped_by_budget(self, record) -> bool:
        return False


def test_the_search_runs_fresh_sizes_from_the_incumbent_batch_and_only_once_per_incumbent():
    trials, said = FakeTrials(fits=40), []
    start = {**START, "device": "cuda"}
    largest = policy.batch_bound(start, trials, session.Display(said.append, None), space.ClimbConfig())
    assert largest(start) == 40 and largest({**start, "batch_size": 8}) == 40  # the batch aside: searched once
    assert [size for _, size in trials.runs] == [8, 16, 32, 64, 48, 40, 44, 42, 41]  # 4 fits: not run again
    assert said == ["batch: the largest batch_size that fits from 4: 40 (batch_size=40 fits and batch_size=41 runs "
                    "out of memory; 9 run(s)); the batch tries x2, x4, ... up to it"]
    largest({**start, "precision": "bf16-mixed"})  # another incumbent: searched again, with its change
    assert trials.runs[-1][0] == (("precision", "bf16-mixed"),)


def test_on_a_cpu_the_climb_skips_the_search_and_says_so():
    said = []
    options = space.ClimbConfig()
    assert policy.batch_bound({**START, "device": "cpu"}, FakeTrials(8), session.Display(said.append, None),
                                options) is None
    assert said == ["batch: on a CPU nothing runs out of memory below fit.max, so no search for the largest batch "
                    "that fits: the batch doubles while it wins"]
    knobs = dataclasses.replace(options, knobs=["precision"])  # no batch knob: nothing to say
    assert policy.batch_bound({**START, "device": "cpu"}, FakeTrials(8), session.Display(said.append, None),
                                knobs) is None and len(said) == 1


def test_each_size_of_the_search_is_a_turn_of_the_engine_told_to_the_climbs_listeners_and_noted_when_busy():
    from harness.climb.policy import ClimbLines, largest_batch
    from tests.test_climb import fake_trials

    lines, trials = [], fake_trials()
    trials.events = Events(ClimbLines(Display(lines.append, None)))

    def trial(changes, step, role, round_, change, hooks=None):
        size = dict(changes)["batch_size"]
        assert hooks.turn.change == change and hooks.events is trials.events  # the engine's hooks for this turn
        trials.order.append((changes, role, change))
        return RunRecord(run_id="r", status="ok" if size <= 20 else "oom", timestamp="", samples_per_s=5.0,
                         other_cpu_pct=60.0 if size == 16 else None, error="CUDA out of memory"), "measured"

    trials.trial = trial
    found = largest_batch(trials, [("precision", "bf16-mixed")], 8, 32)
    assert found.tried == [(8, "ok"), (16, "ok"), (32, "oom"), (24, "oom"), (20, "ok"), (22, "oom"), (21, "oom")]
    assert found.largest == 20 and found.stopped == "batch_size=20 fits and batch_size=21 runs out of memory"
    assert trials.order[0] == ([("precision", "bf16-mixed"), ("batch_size", 16)], "fit search",
                               "batch_size=16 (fit search)")  # 8, the incumbent's, is known to fit: not run
    assert len(trials.order) == 6 and trials.busy == ["other processes used 60% of the CPUs"]  # noted, run once
    assert lines[:2] == [r"\[fit search] batch_size=16 (fit search): ok (measured) 5.00 samples/s",
                         r"\[fit search] batch_size=32 (fit search): oom (measured) CUDA out of memory"]
    assert len(lines) == 6


def test_a_search_run_stopped_by_the_budget_ends_the_search_with_budget_spent():
    from harness.climb.policy import largest_batch

    trials = FakeTrials(fits=64)
    trials.stopped_by_budget = lambda record: record.run_id == "r16"
    with pytest.raises(ascent.BudgetSpent, match="stopped at the end of the budget"):
        largest_batch(trials, [], 8, 64)
    assert [size for _, size in trials.runs] == [16]
