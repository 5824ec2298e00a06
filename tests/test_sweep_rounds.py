"""The sweep loop's rounds with a fake measurement (no torch, no child processes): serpentine order, a busy run
measured again, sweep.repeats=auto stopping when decided or when its budget is spent, a resumed sweep."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from harness import config as config_mod
from harness.analysis.stats import noise_model
from harness.analysis.views import table as table_mod
from harness.store import RunRecord, load_runs, store_record, utc_timestamp
from harness.config import ladder as ladder_mod
from harness.sweeps import loop, rounds
from harness.sweeps import rungs as rungs_mod

PHASE2 = ladder_mod.load("phase2")  # claims: bf16 2-3x, batch 1.3-1.5x, workers 1.5-2x, total 3-4x


class Display:
    """What the loop shows, as lists."""

    def __init__(self):
        self.lines: list[str] = []
        self.estimates: list[str] = []  # "round N: ..." before a round (harness.sweeps.budget)
        self.cached: list[tuple[int, int]] = []

    def on(self, event):  # a listener of the sweep's events (harness.session.events)
        if event.kind == "already":
            self.already_measured(event.turn)
        elif event.kind == "failed":
            self.could_not_run(event.turn, event.error)
        elif event.text:
            self.say(event.text)

    def already_measured(self, turn):
        self.cached.append((turn.rung.index, turn.round_))

    def could_not_run(self, turn, exc):
        raise AssertionError(f"could not run {turn}: {exc}")

    def say(self, text):
        (self.estimates if text.startswith("round ") else self.lines).append(text)


class FakeRuns:
    """Stands in for ``rungs.run_rung``: stores a record of rung k at ``speeds[k]`` samples/s times process noise
    of CV ``cv`` (seeded); ``busy`` cells are measured first on a busy machine, then on a quiet one (on a busy one
    again with ``again_busy``)."""

    def __init__(self, speeds, cv=0.01, busy=(), seed=0, again_busy=False):
        self.speeds, self.cv, self.busy, self.again_busy = speeds, cv, set(busy), again_busy
        self.rng = np.random.default_rng(seed)
        self.calls: list[tuple[int, int]] = []

    def __call__(self, ctx, rung, round_, machine, on_start=None, on_progress=None, before_launch=None):
        busy = (rung, round_) in self.busy and (self.again_busy or (rung, round_) not in self.calls)
        self.calls.append((rung, round_))
        sps = self.speeds[rung] * float(np.exp(self.rng.normal(0.0, self.cv)))
        record = RunRecord(run_id=f"{ctx.sweep_id}-{len(self.calls)}", status="ok",
                           timestamp=f"2026-11-24T10:{len(self.calls) // 60:02d}:{len(self.calls) % 60:02d}+0000",
                           workload="unet3d", size="smoke", device="cpu", env_key="env", cpu_model="cpu",
                           cpu_count=2, sweep_id=ctx.sweep_id, ladder=ctx.ladder.name, rung=rung, round=round_,
                           change=ctx.ladder.rungs[rung].change("smoke"), samples_per_s=sps,
                           other_cpu_pct=50.0 if busy else 1.0, **ladder_mod.claim_fields(ctx.ladder, rung),
                           **dict(ctx.record_fields))
        store_record(record, ctx.results_dir)
        return rungs_mod.RungOutcome(record, "measured", frozenset())


@pytest.fixture
def fake(monkeypatch):
    """Install a FakeRuns; no calibration is looked for (that needs the environment of a real run)."""
    monkeypatch.setattr(rounds, "_chosen", lambda ctx, machine: noise_model.DEFAULT)

    def install(runs: FakeRuns) -> FakeRuns:
        monkeypatch.setattr(rungs_mod, "run_rung", runs)
        return runs

    return install


def context(results, repeats, max_repeats=6, sweep_id="s", budget_min=10.0):
    return rungs_mod.SweepContext(sweep_id=sweep_id, ladder=PHASE2, settings={"results_dir": str(results)},
                                  user_keys=frozenset(), repeats=repeats, max_repeats=max_repeats,
                                  budget_min=budget_min)


CLEAR = [10.0, 25.0, 35.0, 59.5]  # bf16 2.5x, batch 1.4x, workers 1.7x: every claim confirmed, total 5.95x exceeds


def test_rounds_run_in_serpentine_order(tmp_path, fake):
    runs = fake(FakeRuns(CLEAR))
    assert loop.run_ladder(context(tmp_path, 3), None, Display()) == 0
    assert runs.calls == [(0, 0), (1, 0), (2, 0), (3, 0), (3, 1), (2, 1), (1, 1), (0, 1),
                                                  (0, 2), (1, 2), (2, 2), (3, 2)]
    turns = loop.turns(PHASE2, 2)
    assert [(t.round_, t.rung.index) for t in turns] == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 3), (1, 2), (1, 1),
                                                         (1, 0)]
    assert turns[5].label == "[rung 3/4, round 2/2]" and loop.turns(PHASE2, 1)[0].label == "[rung 1/4]"
    assert loop.turns(PHASE2, 6, auto=True)[0].label == "[rung 1/4, round 1 of up to 6]"


def test_auto_stops_once_every_verdict_is_decided(tmp_path, fake):
    runs = fake(FakeRuns(CLEAR))
    display = Display()
    assert loop.run_ladder(context(tmp_path, "auto"), None, display) == 0
    rounds_run = 1 + max(k for _, k in runs.calls)
    assert 2 <= rounds_run < 6 and len(runs.calls) == 4 * rounds_run
    assert display.lines[0].startswith("sweep.repeats=auto: rounds until every verdict is decided, at most 6")
    assert display.lines[1] == "after round 1: 0 of 4 verdicts decided (no band yet (one round and no calibration)): " \
                               "another round"
    assert display.lines[-1].startswith(f"after round {rounds_run}: 4 of 4 verdicts decided (bands at ")
    assert display.lines[-1].endswith("): stop: decided")
    frame = load_runs(tmp_path)
    assert set(frame["auto_max_rounds"]) == {6} and set(frame["noise_df"]) == {0.0}
    table = table_mod.build_table(frame, "s", str(tmp_path))
    assert [r.verdict for r in table.rows[1:]] == ["confirms"] * 3 and table.total_verdict == "exceeds"
    assert any(n.startswith(f"sweep.repeats=auto: decided after {rounds_run} round(s)") for n in table.notes)


def test_auto_stops_when_its_round_budget_is_spent_and_the_table_names_what_is_open(tmp_path, fake):
    runs = fake(FakeRuns([10.0, 22.0, 31.0, 50.0], cv=0.25, seed=3))  # noisy: nothing decides in 3 rounds
    display = Display()
    loop.run_ladder(context(tmp_path, "auto", max_repeats=3), None, display)
    assert max(k for _, k in runs.calls) == 2 and display.lines[-1].split("): ")[1].startswith("stop: budget spent")
    table = table_mod.build_table(load_runs(tmp_path), "s", str(tmp_path))
    note = next(n for n in table.notes if n.startswith("sweep.repeats=auto"))
    assert note.startswith("sweep.repeats=auto: the round budget was spent after 3 round(s)")
    assert "with verdicts still open: " in note and "sweep.max_repeats" in note


def test_a_busy_run_is_measured_again_once_in_the_same_round(tmp_path, fake):
    runs = fake(FakeRuns(CLEAR, busy={(1, 0)}))
    display = Display()
    loop.run_ladder(context(tmp_path, 1), None, display)
    assert runs.calls == [(0, 0), (1, 0), (1, 0), (2, 0), (3, 0)]
    assert display.lines == ["[rung 2/4] machine busy (other processes used 50% of the CPUs): not trustworthy; "
                             "measuring it again"]
    table = table_mod.build_table(load_runs(tmp_path), "s", str(tmp_path))
    assert any("(1 measured again on a quiet one in the same round)" in n for n in table.notes)


def test_a_sweep_whose_first_round_is_busy_throughout_stops_there_with_exit_5(tmp_path, fake):
    cells = {(k, r) for k in range(4) for r in range(3)}
    fake(FakeRuns(CLEAR, busy=cells, again_busy=True))
    display = Display()
    assert loop.run_ladder(context(tmp_path, 3), None, display) == 5
    assert len(load_runs(tmp_path)) == 2 * 4  # the first round, each run measured again once; no second round
    assert display.lines[-1].startswith("stop: every run of the first round was busy (other processes used 50% of "
                                        "the CPUs): no run can count")
    fake(FakeRuns(CLEAR, busy={(1, 0)}))  # one busy run, measured again quietly: the sweep goes on
    assert loop.run_ladder(context(tmp_path / "quiet", 2), None, Display()) == 0
    # busy runs kept as measured (sweep.remeasure_busy=false): every round is made, busy throughout, exit 0
    runs = fake(FakeRuns(CLEAR, busy=cells, again_busy=True))
    kept = dataclasses.replace(context(tmp_path / "kept", 2), remeasure_busy=False)
    assert loop.run_ladder(kept, None, Display()) == 0 and len(runs.calls) == 2 * 4


def test_a_measured_sweep_run_again_adds_nothing(tmp_path, fake):
    runs = fake(FakeRuns(CLEAR))
    loop.run_ladder(context(tmp_path, "auto"), None, Display())
    measured = len(runs.calls)
    display = Display()
    loop.run_ladder(context(tmp_path, "auto"), None, display)  # the same sweep again: every round is there
    assert len(runs.calls) == measured and len(display.cached) == measured
    assert display.lines[-1].endswith("stop: decided")


def test_the_time_budget_refuses_a_round_that_would_end_past_it():
    plan = rounds.RoundPlan(auto=True, max_rounds=6, budget_s=600.0, started=0.0)
    assert plan.refusal(4, now=100.0) == ""  # nothing measured yet: no estimate
    for _ in range(4):
        plan.measured(20.0)  # a round of 4 rungs takes 2 minutes: every run was busy and measured again
        plan.measured(10.0, again=True)
    assert plan.refusal(4, now=400.0) == ""
    assert plan.refusal(4, now=500.0) == ("stop: time budget spent (another round would take ~2.0 min after 8.3 of "
                                          "sweep.budget_min=10; sweep.budget_min=11 would let it start)")
    assert rounds.RoundPlan(auto=False, max_rounds=3).refusal(4, now=1e9) == ""


@pytest.mark.parametrize("bad, message", [
    ({"repeats": 0}, "sweep.repeats=0 must be at least 1"),
    ({"repeats": "many"}, "sweep.repeats=many must be at least"),
    ({"repeats": "auto", "budget_min": 0}, "sweep.budget_min=0 must be a positive number of minutes"),
    ({"repeats": "auto", "max_repeats": 1}, "sweep.max_repeats=1 must be a whole number of rounds >= 2")])
def test_bad_sweep_settings_are_refused_by_name(bad, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        config_mod.validate_sweep(config_mod.SweepConfig(**bad))
    config_mod.validate_sweep(config_mod.SweepConfig(repeats="auto"))
    config_mod.validate_sweep(config_mod.SweepConfig(repeats=3))


@pytest.mark.parametrize("name", ladder_mod.available())
@pytest.mark.parametrize("repeats", [1, "auto"])
def test_every_shipped_ladder_sweeps_to_its_table(tmp_path, fake, name, repeats):
    """Every claim, group and total of every shipped ladder goes through the sequential looks and the table (a
    claim with no figure, "minor", among them): a sweep ends in a table, never a traceback."""
    ladder = ladder_mod.load(name)
    speeds = [10.0 * 1.2 ** k for k in range(len(ladder.rungs))]
    fake(FakeRuns(speeds, cv=0.05, seed=len(name)))
    ctx = rungs_mod.SweepContext(sweep_id="s", ladder=ladder, settings={"results_dir": str(tmp_path)},
                                 user_keys=frozenset(), repeats=repeats, max_repeats=3)
    assert loop.run_ladder(ctx, None, Display()) == 0
    frame = load_runs(tmp_path)
    assert len(frame) == len(ladder.rungs) * (1 if repeats == 1 else int(frame["round"].max()) + 1)
    table = table_mod.build_table(frame, "s", str(tmp_path))
    assert [r.rung for r in table.rows] == list(range(len(ladder.rungs)))
    for rung in ladder.rungs:
        if rung.claim is not None and not rung.claim.has_figure:
            verdict = table.rows[rung.index].verdict
            assert not verdict.startswith(("confirms", "inconclusive", "falls short", "exceeds", "reverses")), verdict


def test_the_fastest_configs_table_shows_the_basic_unet_rungs_flop_ratio_in_its_notes(tmp_path, fake):
    from harness.analysis.views import render

    ladder = ladder_mod.load("connectomics_fastest")
    fake(FakeRuns([10.0] * len(ladder.rungs), cv=0.05, seed=1))
    ctx = rungs_mod.SweepContext(sweep_id="s", ladder=ladder, settings={"results_dir": str(tmp_path)},
                                 user_keys=frozenset(), repeats=1)
    assert loop.run_ladder(ctx, None, Display()) == 0
    text = render.render(table_mod.build_table(load_runs(tmp_path), "s", str(tmp_path)))
    assert "Counted FLOPs a training sample: 121x the 32-channel last level assumed before" in text


class FakeMeasure:
    """Stands in for ``runner.store_asked`` under the real ``run_rung`` (its cache included): a record of the
    resolved settings at ``speeds[rung]`` samples/s; ``calls`` lists (sweep, rung, round) measured."""

    def __init__(self, speeds, now=False, cv=0.0, seed=0, busy=()):
        self.speeds, self.calls, self.now = speeds, [], now
        self.cv, self.rng = cv, np.random.default_rng(seed)  # process noise of CV ``cv`` (seeded)
        self.busy = set(busy)  # (sweep, rung, round)s measured on a busy machine the first time, at half speed

    def __call__(self, cfg, env, env_key, on_progress=None, skip_reason=None, pipeline=None, **fields):
        cell = (fields["sweep_id"], fields["rung"], fields["round"])
        busy = cell in self.busy and cell not in self.calls
        self.calls.append(cell)
        record = RunRecord(run_id=f"{fields['sweep_id']}-{len(self.calls)}", status="ok",
                           timestamp=utc_timestamp() if self.now else
                           f"2026-11-24T11:{len(self.calls) // 60:02d}:{len(self.calls) % 60:02d}+0000",
                           workload="unet3d", size="smoke", device="cpu", env_key=env_key, cpu_model="cpu",
                           cpu_count=2, config_hash=config_mod.config_hash(cfg), samples_per_s=self.speeds[
                               fields["rung"]] * float(np.exp(self.rng.normal(0.0, self.cv))) / (2 if busy else 1),
                           other_cpu_pct=50.0 if busy else 1.0, **fields)
        store_record(record, cfg.results_dir)
        return record


@pytest.fixture
def measured_by(monkeypatch):
    """Install a FakeMeasure under the real rung runner, in one faked environment ("env")."""
    from harness.run.parent import runner
    from harness.run.parent import env as env_mod

    monkeypatch.setattr(env_mod, "environment", lambda device, git=True: ({}, "env"))
    monkeypatch.setattr(env_mod, "environment_key", lambda device: "env")

    def install(measure: FakeMeasure) -> FakeMeasure:
        monkeypatch.setattr(runner, "store_asked", measure)
        return measure

    return install


def test_a_round_is_copied_whole_from_one_earlier_sweep_or_measured_whole(tmp_path, fake, measured_by):
    """A run copied from another session never stands beside runs measured today in one round: a sweep of phase2
    after one of its first two rungs measures its rounds whole; a sweep of phase2 after one of phase2 copies the
    earlier sweep's round whole and measures the round it lacks."""
    from harness.run.parent import runner

    measure = measured_by(FakeMeasure(CLEAR))
    machine = runner.Machine(cuda_available=False)
    short = dataclasses.replace(PHASE2, rungs=PHASE2.rungs[:2])
    for sweep_id, ladder, repeats in (("first-two", short, 1), ("a", PHASE2, 1), ("b", PHASE2, 2)):
        ctx = rungs_mod.SweepContext(sweep_id=sweep_id, ladder=ladder, settings={"results_dir": str(tmp_path)},
                                     user_keys=frozenset(), repeats=repeats)
        assert loop.run_ladder(ctx, machine, Display()) == 0
    assert measure.calls == [("first-two", 0, 0), ("first-two", 1, 0)] + [("a", k, 0) for k in range(4)] + [
        ("b", k, 1) for k in (3, 2, 1, 0)]
    copies = load_runs(tmp_path, where={"sweep_id": "b"})
    copied = copies[copies["round"] == 0]["cached_from"]
    assert sorted(copied) == [f"a-{k}" for k in range(3, 7)]


def test_a_sweep_copied_from_an_earlier_one_replays_its_rounds_in_order_and_stops_where_it_stopped(
        tmp_path, fake, measured_by):
    """A sweep of phase2 run again on the same store measures nothing: each of its rounds is the earlier sweep's
    round of the same number, a busy run and the run measured again after it included, so its looks see what the
    earlier looks saw, and it stops after as many rounds with the same verdicts (copied newest first, it looked at
    the last rounds first, and the busy run was left out with a later round's run in its place)."""
    from harness.run.parent import runner

    # noisy, with one busy run: three rounds to decide
    measure = measured_by(FakeMeasure([10.0, 24.0, 34.0, 60.0], cv=0.06, seed=3, busy={("a", 1, 0)}))
    displays = {}
    for sweep_id in ("a", "b"):
        ctx = rungs_mod.SweepContext(sweep_id=sweep_id, ladder=PHASE2, settings={"results_dir": str(tmp_path)},
                                     user_keys=frozenset(), repeats="auto")
        displays[sweep_id] = Display()
        loop.run_ladder(ctx, runner.Machine(cuda_available=False), displays[sweep_id])
    rounds_run = 1 + max(k for _, _, k in measure.calls)
    assert rounds_run >= 3 and all(s == "a" for s, _, _ in measure.calls)  # the second sweep measured nothing
    frame = load_runs(tmp_path)
    original = dict(zip(frame["run_id"], frame["round"]))
    copies = frame[frame["sweep_id"] == "b"]
    assert sorted(copies["round"]) == sorted(frame[frame["sweep_id"] == "a"]["round"])
    assert all(original[src] == k for src, k in zip(copies["cached_from"], copies["round"]))
    busy_cell = copies[(copies["rung"] == 1) & (copies["round"] == 0)]
    assert sorted(busy_cell["other_cpu_pct"]) == [1.0, 50.0]  # the busy run and the run measured again after it
    looks = [[line for line in displays[s].lines if line.startswith("after round ")] for s in ("a", "b")]
    assert len(looks[0]) == rounds_run and looks[1] == looks[0]
    tables = [table_mod.build_table(frame, s, str(tmp_path)) for s in ("a", "b")]
    assert [r.verdict for r in tables[1].rows] == [r.verdict for r in tables[0].rows]
    assert tables[1].total_verdict == tables[0].total_verdict


def test_a_sweep_of_this_session_lends_its_runs_to_a_round_in_part(tmp_path, fake, measured_by):
    """An interrupted sweep resumed (or a ladder after another) within the session: its runs stand beside fresh ones
    in a round, as the README's resume promises; the rungs it lacks are measured."""
    from harness.run.parent import runner

    measure = measured_by(FakeMeasure(CLEAR, now=True))
    short = dataclasses.replace(PHASE2, rungs=PHASE2.rungs[:2])
    for sweep_id, ladder in (("first-two", short), ("a", PHASE2)):
        ctx = rungs_mod.SweepContext(sweep_id=sweep_id, ladder=ladder, settings={"results_dir": str(tmp_path)},
                                     user_keys=frozenset(), repeats=1)
        assert loop.run_ladder(ctx, runner.Machine(cuda_available=False), Display()) == 0
    assert measure.calls == [("first-two", 0, 0), ("first-two", 1, 0), ("a", 2, 0), ("a", 3, 0)]


def test_dropped_rungs_are_the_earlier_rungs_with_no_ok_record():
    import pandas as pd

    from harness.sweeps import rungs as rungs_mod

    mine = pd.DataFrame({"rung": pd.array([0, 0, 1, 2, 2, None, 3], dtype="Int64"),
                         "status": pd.array(["ok", "oom", "oom", "failed", "ok", "oom", None], dtype="string")})
    assert rungs_mod.dropped_rungs(mine, 0) == frozenset()
    assert rungs_mod.dropped_rungs(mine, 2) == frozenset({1})  # rung 0 ran ok once: built on
    assert rungs_mod.dropped_rungs(mine, 3) == frozenset({1})  # rung 2's later run was ok
    assert rungs_mod.dropped_rungs(mine, 9) == frozenset({1, 3})  # a record without a status is not ok
    assert rungs_mod.dropped_rungs(mine.iloc[0:0], 4) == frozenset()
