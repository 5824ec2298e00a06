"""The session engine with a fake measurement (no torch, no child processes): a new measuring command is a policy
(and maybe a sink), not a new loop. The toy policy below measures each config twice, the second time copied from
the store where the store allows it; it is written against the engine's interface alone."""

from __future__ import annotations

import ast
import inspect

import pytest

from harness.records.make import make_record
from harness.records.sinks import Pipeline
from harness.run.parent import runner as parent
from harness.session import engine, runner
from harness.session.cache import CacheRule
from harness.session.events import Event, Events
from harness.store import load_records
from tests.conftest import tiny_config


class Twice:
    """Toy policy: each config measured twice, in two rounds; the second round may copy the first's runs."""

    remeasure_busy, keep_going = False, True

    def __init__(self, configs: dict[str, object], pipeline: Pipeline, copy: bool):
        self.configs, self.pipeline, self.copy = configs, pipeline, copy
        self.kept: dict[str, list[str]] = {name: [] for name in configs}

    def next_turns(self, round_: int, events: Events):
        return [Turn(name, round_) for name in self.configs] if round_ < 2 else None

    def held(self, turn) -> bool:
        return False

    def measure(self, turn, again: bool, hooks: engine.Hooks):
        cfg = self.configs[turn.name]
        hooks.started(cfg)
        # the second round may copy a run of the first (the rule asks the store: same settings, same environment)
        cache = CacheRule(str(self.pipeline.sinks[0].results_dir)) if self.copy and turn.round_ else None
        outcome = runner.run_one(cfg, {"sweep_id": "twice", "round": turn.round_}, self.pipeline, cache,
                                 ({}, "env"), hooks.progress)
        self.kept[turn.name].append(outcome.record.run_id)
        return outcome

    def look(self, rounds: int, events: Events) -> bool:
        events.emit("looked", text=f"after round {rounds}: {sum(map(len, self.kept.values()))} runs")
        return True


class Turn:
    def __init__(self, name: str, round_: int):
        self.name, self.round_, self.label = name, round_, f"[{name}, round {round_ + 1}/2]"


class Lines:
    """A listener that keeps every event but progress."""

    def __init__(self):
        self.events: list[Event] = []

    def on(self, event: Event) -> None:
        if event.kind != "progress":
            self.events.append(event)

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]

    def texts(self) -> list[str]:
        return [e.text for e in self.events if e.text]


class Kept:
    """A second sink: every record it is handed (an export, a live page)."""

    def __init__(self):
        self.records = []

    def put(self, record):
        self.records.append(record)


@pytest.fixture
def fake_runs(monkeypatch):
    """``store_asked`` as a record made at once and handed to the pipeline's sinks, as the real one does."""
    calls = []

    def measure(cfg, env, env_key, on_progress=None, skip_reason=None, pipeline=None, **labels):
        calls.append(labels["round"])
        on_progress({"phase": "measure"}, 0.1)
        return pipeline.put(make_record(cfg, env, env_key, "ok", "", None, samples_per_s=10.0, **labels))

    monkeypatch.setattr(parent, "store_asked", measure)
    return calls


@pytest.mark.parametrize("copy", [False, True])
def test_a_toy_policy_runs_on_the_engine_and_its_records_reach_every_sink(tmp_path, fake_runs, copy):
    configs = {"a": tiny_config(results_dir=str(tmp_path)), "b": tiny_config(results_dir=str(tmp_path), batch_size=4)}
    kept, lines = Kept(), Lines()
    policy = Twice(configs, Pipeline.to_store(tmp_path, kept), copy)
    assert engine.run(policy, Events(lines)) == 0
    assert fake_runs == ([0, 0] if copy else [0, 0, 1, 1])
    second = "cached" if copy else "measured"
    assert lines.kinds() == ["started", "measured", "started", "measured", "looked",
                             "started", second, "started", second, "looked"]
    assert lines.texts() == ["after round 1: 2 runs", "after round 2: 4 runs"]
    stored = {r.run_id: r for r in load_records(tmp_path)}
    assert [r.run_id for r in kept.records] == [policy.kept[name][k] for k in (0, 1) for name in "ab"]
    assert set(stored) == {r.run_id for r in kept.records}
    for name in "ab":
        first, again = (stored[i] for i in policy.kept[name])
        assert (first.round, again.round, again.cached_from) == (0, 1, first.run_id if copy else "")


def test_the_toy_policy_is_under_sixty_lines_and_the_engine_imports_no_command():
    assert len(inspect.getsource(Twice).splitlines()) < 60
    imported = {n.module for n in ast.walk(ast.parse(inspect.getsource(engine))) if isinstance(n, ast.ImportFrom)}
    assert imported == {"__future__", "typing", "harness.analysis.stats.busy", "harness.session.events"}


def test_an_event_of_an_unknown_kind_is_refused_with_the_kinds():
    with pytest.raises(ValueError, match="unknown event kind 'measurd'.*measured"):
        Event("measurd")


def test_a_turn_that_cannot_start_is_told_and_the_session_goes_on(tmp_path):
    class Broken(Twice):
        def measure(self, turn, again, hooks):
            if turn.name == "a":
                raise OSError("no room")
            return runner.Outcome(None, "not run", "the policy said so")

    lines = Lines()
    assert engine.run(Broken({"a": None, "b": None}, Pipeline(), False), Events(lines)) == 1
    assert lines.kinds() == ["failed", "not run", "looked", "failed", "not run", "looked"]
    assert str(lines.events[0].error) == "no room"


def test_a_turn_collects_its_environment_once_and_asks_the_skip_reason_once(tmp_path, monkeypatch):
    """One turn without a session's environment: the environment collected once (git left out), the skip reason
    asked once and handed down; the git state added only for a run measured, never for a copy."""
    from harness.run.parent import env as env_mod, fingerprint
    from harness.workload import applicability

    asked = {"collect": [], "git": 0, "skip": 0}
    monkeypatch.setattr(env_mod, "collect", lambda device, git=True: asked["collect"].append(git) or {"cpu_model": "x"})
    monkeypatch.setattr(fingerprint, "git_state", lambda: asked.__setitem__("git", asked["git"] + 1) or ("abc", False))
    real_skip = applicability.skip_reason
    monkeypatch.setattr(applicability, "skip_reason",
                        lambda *a, **k: asked.__setitem__("skip", asked["skip"] + 1) or real_skip(*a, **k))
    made = []
    monkeypatch.setattr(parent, "execute_asked", lambda cfg, env, key, reason, on_progress=None, store=None, **labels:
                        made.append((env, reason)) or make_record(cfg, env, key, "ok", "", None, samples_per_s=1.0))
    cfg = tiny_config(results_dir=str(tmp_path))
    measured = runner.run_one(cfg, {"sweep_id": "s"}, Pipeline())
    assert (measured.how, asked, made) == ("measured", {"collect": [False], "git": 1, "skip": 1},
                                           [({"cpu_model": "x", "git_commit": "abc", "git_dirty": False}, "")])
    assert measured.record.git_commit == "abc"
    copied = runner.run_one(cfg, {"sweep_id": "s"}, Pipeline(), OneOriginal(measured.record))
    assert (copied.how, asked, len(made)) == ("cached", {"collect": [False, False], "git": 1, "skip": 2}, 1)


class OneOriginal:
    """A cache rule that holds one original, whatever the settings (what ``CacheRule.original`` answers)."""

    def __init__(self, original):
        self.original = lambda cfg, key: original
