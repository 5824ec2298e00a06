"""Measuring ``check --against REF``: every config with REF's code and the working tree's, interleaved.

Order: rounds outermost; within a round the configs in serpentine order (forward, then backward the next
round) and the two sides of a config back to back, REF first or the working tree first by turns of the config's
own rounds (ABBA, ``order``), so a drift of the machine or an order effect falls on both sides alike and neither
side always runs second. Each run is a fresh
``python -m harness run <the config's overrides> results_dir=<side folder>`` with the same interpreter and
environment, its current folder and ``PYTHONPATH`` in that side's tree, so the child imports the measured
code (the user's model, or this repository's harness and models) from its own side. The child's record
is copied into the check's store (``<results>/checks``) with the sweep's labels and ``against_side`` /
``against_commit``; the side folders under ``<results>/.against/runs/<check id>`` keep the originals and
each run's log.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from harness import shell
from harness.fileio import write_text_atomic
from harness.run.parent import lifetime
from harness.records.sinks import StoreSink
from harness.session import engine
from harness.session import runner as session_runner
from harness.session.events import OUTCOMES, Event, Events
from harness.store import RunRecord, load_records, load_runs
from harness.sweeps.replay import Replay, hydra_value
from harness.sweeps.worktree import Tree, against_dir

REF, WORK = "ref", "work"


@dataclass(frozen=True)
class Turn:
    """One run of the check: a config, a round, a side."""

    replay: Replay
    round_: int
    side: str


@dataclass
class AgainstPlan:
    """Everything one check measures, decided before the first run."""

    check_id: str
    trees: dict[str, Tree]  # REF and WORK
    subfolder: Path  # where the command ran, relative to the repository's top: each side's run starts there
    replays: list[Replay]
    rounds: int
    checks_store: Path  # <results>/checks
    scratch: Path  # <results>/.against/runs/<check id>
    extra_search: list[str] = field(default_factory=list)  # file:// URIs of config folders the check wrote
    sweep_id: str = ""  # the sweep whose configs are measured again

    def cwd(self, side: str) -> Path:
        """Where the side's runs start: the same subfolder of its tree as the command's (the top if REF lacks it)."""
        folder = self.trees[side].root / self.subfolder
        return folder if folder.is_dir() else self.trees[side].root


def plan_scratch(results_dir: Path, check_id: str) -> Path:
    return against_dir(results_dir) / "runs" / check_id


def order(configs: int, rounds: int) -> list[tuple[int, int, str]]:
    """(config index, round, side) of every run in the order they run: rounds outermost, the configs in
    serpentine order, each config's two sides back to back with the side that runs first taken from the config's
    own index and the round, so that every config runs REF first in every other round (ABBA per config: over an
    even number of rounds an order effect falls on both sides alike, whatever the number of configs)."""
    out = []
    for round_ in range(rounds):
        indices = range(configs) if round_ % 2 == 0 else reversed(range(configs))
        for k in indices:
            sides = (REF, WORK) if (round_ + k) % 2 == 0 else (WORK, REF)
            out += [(k, round_, side) for side in sides]
    return out


def turns(replays: list[Replay], rounds: int) -> list[Turn]:
    """Every run of the check in the order it runs (``order``)."""
    return [Turn(replays[k], round_, side) for k, round_, side in order(len(replays), rounds)]


def write_workload_files(plan: AgainstPlan) -> None:
    """The workloads that are not shipped, as files of a config folder of the check's own (see ``replay``)."""
    folder = plan.scratch / "conf" / "workload"
    for replay in plan.replays:
        if replay.workload_file:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{replay.workload_file}.yaml").write_text(replay.workload_yaml)
    if folder.is_dir():
        plan.extra_search = [folder.parent.resolve().as_uri()]


def command(plan: AgainstPlan, turn: Turn) -> list[str]:
    """The child's command line: ``python -m harness run`` with the config's overrides and the side's folder."""
    overrides = shell.with_search_path(list(turn.replay.overrides), plan.extra_search)
    folder = (plan.scratch / turn.side).resolve()
    return [sys.executable, "-m", "harness", "run", *overrides, f"results_dir={hydra_value(str(folder))}"]


def child_env(plan: AgainstPlan, side: str) -> dict[str, str]:
    """This process's environment, with ``PYTHONPATH`` leading to the side's tree; entries inside the other side's
    tree are dropped so that one side never imports the other's code."""
    env = dict(os.environ)
    other = plan.trees[WORK if side == REF else REF].root.resolve()
    mine = plan.trees[side].root.resolve()
    kept = [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
            if p and not (_inside(Path(p), other) and not _inside(Path(p), mine))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([str(plan.cwd(side)), str(mine)] + kept))
    return env


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root)
        return True
    except ValueError:
        return False


class RunFailed(RuntimeError):
    """A child that ended without storing a record (bad settings for that side's code, a crash of the harness)."""


def run_turn(plan: AgainstPlan, turn: Turn) -> RunRecord:
    """Measure one turn in a fresh process; its record, labelled and stored in the check's store."""
    folder = plan.scratch / turn.side
    logs = folder / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"round{turn.round_}-rung{turn.replay.rung}.log"
    before = _run_ids(folder)
    with open(log_path, "wb") as log:  # the run, its measuring child and their workers die with this process
        proc = lifetime.start(command(plan, turn), cwd=plan.cwd(turn.side), env=child_env(plan, turn.side),
                              stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        with lifetime.tracked(proc):
            code = proc.wait()
    new = [r for r in load_records(folder) if r.run_id not in before]
    if not new:
        tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
        raise RunFailed(f"the {side_name(turn.side)} run of rung {turn.replay.rung} exited {code} without a record: "
                        + " / ".join(line.strip() for line in tail) + f" (log: {log_path})")
    record = label(new[0], plan, turn)
    StoreSink(plan.checks_store).put(record)
    tree = plan.trees[turn.side]
    if (tree.root / "harness" / "__init__.py").is_file() and record.git_commit not in ("", tree.commit):
        raise RunFailed(f"the {side_name(turn.side)} run imported the harness of commit {record.git_commit[:12]}, "
                        f"not its own tree's ({tree.commit[:12]} in {tree.root}): an installed copy shadows it; "
                        "run from the repository's top folder")
    return record


def label(record: RunRecord, plan: AgainstPlan, turn: Turn) -> RunRecord:
    """The child's record with the check's labels: the sweep's place of the config, the round, the side, its commit."""
    return dataclasses.replace(record, sweep_id=plan.check_id, campaign_id="", ladder=turn.replay.ladder,
                               rung=turn.replay.rung, change=turn.replay.change, round=turn.round_,
                               against_side=turn.side, against_commit=plan.trees[turn.side].label)


def _run_ids(folder: Path) -> set[str]:
    if not folder.is_dir():
        return set()
    return set(load_runs(folder, columns=["run_id"])["run_id"])


def side_name(side: str) -> str:
    return "REF" if side == REF else "working tree"


def measure(plan: AgainstPlan, show: Callable[[int, int, Turn, RunRecord | None], None],
            go_on: Callable[[int], bool] | None = None) -> int:
    """Run every turn in order that the check's store does not hold yet (a resumed check goes on where it
    stopped); ``show(i, n, turn, record)`` before (record None) and after each run; before each round after the
    first, ``go_on(rounds done)`` says whether to start it (None: all ``plan.rounds``). The rounds measured. An
    interrupt kills the running run's whole tree (``harness.run.parent.lifetime``) and propagates."""
    write_workload_files(plan)
    rounds = AgainstRounds(plan, go_on)
    engine.run(rounds, Events(_Shown(show, rounds.order)))
    return rounds.measured


class AgainstRounds:
    """The check's runs as a policy over the session engine: round after round, each config on both sides in the
    plan's order; a run the check's store holds is not run again; a run that fails ends the check."""

    remeasure_busy = False  # the paired analysis judges a busy pair itself
    keep_going = False

    def __init__(self, plan: AgainstPlan, go_on: Callable[[int], bool] | None):
        self.plan, self.go_on = plan, go_on
        self.order = turns(plan.replays, plan.rounds)
        self.done = stored_turns(plan)
        self.measured = plan.rounds

    def next_turns(self, round_: int, events: Events) -> list[Turn] | None:
        return [t for t in self.order if t.round_ == round_] if round_ < self.plan.rounds else None

    def held(self, turn: Turn) -> bool:
        return (turn.round_, turn.replay.rung, turn.side) in self.done

    def measure(self, turn: Turn, again: bool, hooks: engine.Hooks) -> session_runner.Outcome:
        hooks.started(None)
        return session_runner.Outcome(run_turn(self.plan, turn), "measured")

    def look(self, rounds: int, events: Events) -> bool:
        if rounds >= self.plan.rounds or self.go_on is None or self.go_on(rounds):
            return True
        self.measured = rounds
        return False


class _Shown:
    """``show(i, n, turn, record)`` as a listener of the check's events."""

    def __init__(self, show: Callable[[int, int, Turn, RunRecord | None], None], order: list[Turn]):
        self.show, self.order = show, order

    def on(self, event: Event) -> None:
        if event.kind == "started":
            self.show(self.order.index(event.turn) + 1, len(self.order), event.turn, None)
        elif event.kind in OUTCOMES:
            self.show(self.order.index(event.turn) + 1, len(self.order), event.turn, event.outcome.record)


def stored_turns(plan: AgainstPlan) -> set[tuple[int, int, str]]:
    """(round, rung, side) of every run the check's store holds for this check."""
    if not (plan.checks_store / "runs").is_dir() and not (plan.checks_store / "compacted").is_dir():
        return set()
    frame = load_runs(plan.checks_store, columns=["round", "rung", "against_side"],
                      where={"sweep_id": plan.check_id})
    return {(int(r), int(g), str(s)) for r, g, s in zip(frame["round"], frame["rung"], frame["against_side"])}


# ------------------------------------------------------------------------------------------
# resuming: the same command again goes on with the check it interrupted

PLAN_FILE = "check.json"  # in a check's scratch folder: what it measures, to find it again


def check_key(ref_commit: str, work: Tree, work_diff: str, sweep_id: str, rounds: tuple[int, int],
              subfolder: Path, overrides: list[str]) -> str:
    """What makes two checks the same measurement: both trees' code (uncommitted changes by their diff), the
    sweep, the rounds (before the first look, and the most: they set the looks' levels), where it runs and the
    user's settings."""
    text = json.dumps([ref_commit, work.label, work_diff, sweep_id, rounds, str(subfolder), overrides])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def unfinished_check(results_dir: Path, key: str, finished: Callable[[str], bool]) -> str | None:
    """The id of the latest check of ``key`` under ``results_dir`` that never finished (``finished(id)`` False)."""
    found = []
    for path in (against_dir(results_dir) / "runs").glob(f"*/{PLAN_FILE}"):
        try:
            kept = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(kept, dict) and kept.get("key") == key and not finished(str(kept.get("check_id"))):
            found.append(str(kept["check_id"]))
    return max(found) if found else None


def keep_plan(plan: AgainstPlan, key: str) -> None:
    """The check's key in its scratch folder, so that the same command finds it if it is interrupted."""
    plan.scratch.mkdir(parents=True, exist_ok=True)
    write_text_atomic(plan.scratch / PLAN_FILE, json.dumps({"key": key, "check_id": plan.check_id}))
