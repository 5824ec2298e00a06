"""The sweep loop: every rung of a ladder, round after round, in this process; each rung measured in its own.

Rounds are outermost, so repeats interleave, in serpentine order (rung 0..K, then K..0, ...: a slow drift of
the machine cancels in every pair of rounds instead of favouring the first rungs); ``sweep.repeats=auto`` looks
after every round and stops when every verdict is decided (``harness.sweeps.rounds``). Rungs never run in
parallel: a rung builds on the earlier rungs that ran ok (``harness.sweeps.rungs``). A run made while the
machine was busy (``harness.analysis.stats.busy``) is measured again, once, in the same round (the engine,
``harness.session.engine``, runs the rounds; this module is the sweep's policy over it). A (rung, round) this
sweep already has a record for (a requeued campaign job) is kept, not measured again. A rung the parent could
not even start is reported, and the loop goes on with the next; with ``stop_on_oom`` the rungs after the first
out-of-memory are not run (``rungs.run_rung`` says so). The rungs measured fork from one warm launcher
(``harness.run.parent.launcher``), and share their synthetic data, for the whole loop. What a person sees is told
to the caller's listeners as events: no printing here, but for the duty cycle and the store's compaction at the end.
"""

from __future__ import annotations

import dataclasses
import shlex
import sys
from dataclasses import dataclass
from typing import Any, Callable

from harness.run.parent import launcher, phases
from harness.config import ladder as ladder_mod
from harness.sweeps import budget
from harness.sweeps import rounds as rounds_mod
from harness.sweeps import rungs as rungs_mod
from harness import config as config_mod
from harness import store
from harness.analysis.gate.answers import BUSY
from harness.analysis.stats.busy import busy_reason
from harness.session import engine
from harness.session.events import Events, Listener

@dataclass(frozen=True)
class Turn:
    """One rung of one round."""

    rung: ladder_mod.Rung
    round_: int
    rungs: int  # rungs in the ladder
    rounds: int  # the sweep's repeats (repeats=auto: the most rounds)
    auto: bool = False

    @property
    def label(self) -> str:
        """``[rung 2/4]``, ``[rung 2/4, round 1/3]`` with repeats, ``[rung 2/4, round 1 of up to 6]`` with
        repeats=auto (plain text)."""
        if self.auto:
            return f"[rung {self.rung.index + 1}/{self.rungs}, round {self.round_ + 1} of up to {self.rounds}]"
        rounds = f", round {self.round_ + 1}/{self.rounds}" if self.rounds > 1 else ""
        return f"[rung {self.rung.index + 1}/{self.rungs}{rounds}]"


def turns(ladder: ladder_mod.Ladder, repeats: int, auto: bool = False) -> list[Turn]:
    """Every (rung, round) of ``repeats`` rounds in the order they run: rounds outermost, serpentine."""
    return [turn for round_ in range(repeats) for turn in round_turns(ladder, round_, repeats, auto)]


def round_turns(ladder: ladder_mod.Ladder, round_: int, repeats: int, auto: bool = False) -> list[Turn]:
    """The rungs of one round in the order they run: forward in even rounds, backward in odd ones."""
    return [Turn(rung, round_, len(ladder.rungs), repeats, auto) for rung in rounds_mod.order(list(ladder.rungs),
                                                                                             round_)]


def run_ladder(ctx: rungs_mod.SweepContext, machine, *listeners: Listener) -> int:
    """Measure (or take from the cache) every rung of every round, in order (the engine, ``harness.session``, runs
    the :class:`LadderPolicy`); the records go to the store, what happens to ``listeners`` as events. At the end,
    the duty cycle of the runs measured (their windows over the loop's wall time), when any was.

    Before each round, how long it should take (``harness.sweeps.budget``); within ``sweep.budget_min`` no round
    is started that would not fit, and no run once it is spent (a run in flight finishes).

    Returns 1 if a rung could not even be started, 2 if the first round would not fit in the budget (nothing is
    measured), 5 (busy) when every run of the first round was measured on a busy machine (no run could count, so
    it stops there; not with ``sweep.remeasure_busy=false``, which keeps a busy run as measured and goes on),
    else 0: failed runs are data, shown in the table."""
    events = Events(*listeners)
    ctx, noise = rounds_mod.with_calibration(ctx, machine)
    policy = LadderPolicy(ctx, machine, noise)
    if policy.plan.auto:
        events.say(f"sweep.repeats=auto: rounds until every verdict is decided, at most {policy.plan.max_rounds} "
                   f"within sweep.budget_min={ctx.budget_min:g}; "
                   + (noise.describe() if noise.calibrated else "no calibration"))
    started = rounds_mod.clock()
    policy.first = _round_context(ctx, machine, 0)  # nothing is stored before round 0 starts: its source holds
    estimate = budget.stored_round(policy.first, machine, policy.done)
    events.say(budget.first_round_line(estimate, policy.plan.budget_s))
    if refusal := budget.first_round_refusal(estimate, policy.plan.budget_s):
        events.emit("decided", text=refusal)
        return 2
    with launcher.warm() as session:
        session.begin(_first_to_measure(policy.first, machine, policy.plan, policy.done))
        code = engine.run(policy, events, _before_launch(listeners))
    if policy.all_busy:
        return BUSY
    if policy.measured:
        print(phases.duty_cycle(policy.measured, rounds_mod.clock() - started))
    return code


def _before_launch(listeners) -> Callable[[config_mod.RunConfig], Any] | None:
    """The listeners' ``before_launch(cfg)`` (the console's glance at the machine's fitness), where they have one."""
    hooks = [h for h in (getattr(listener, "before_launch", None) for listener in listeners) if h is not None]
    return (lambda cfg: [h(cfg) for h in hooks]) if hooks else None


class LadderPolicy:
    """A sweep's decisions: every rung each round, serpentine; ``repeats=auto`` looks after every round and stops
    when every verdict is decided, after ``max_repeats`` rounds, or before a round past the time budget; no run
    starts once the budget is spent; a first round whose every run was busy ends the sweep (unless busy runs are
    kept as measured, ``sweep.remeasure_busy=false``)."""

    def __init__(self, ctx: rungs_mod.SweepContext, machine, noise):
        self.ctx, self.machine, self.noise = ctx, machine, noise
        self.plan = rounds_mod.RoundPlan.of(ctx)
        self.done = rungs_mod.measured_rungs(ctx)
        self.remeasure_busy = ctx.remeasure_busy
        self.keep_going = True  # a rung that cannot start is reported; the next builds without it
        self.first: rungs_mod.SweepContext = ctx
        self.round_ctx = ctx
        self.measured: list = []  # records of the runs measured (for the duty cycle)
        self.busy: dict[tuple[int, int], str | None] = {}  # this round's turns: why the run that stands was busy
        self.all_busy = False  # every run of the first round was busy: the sweep stopped there

    def next_turns(self, round_: int, events: Events) -> list[Turn] | None:
        if round_ >= self.plan.max_rounds:
            return None
        rungs = len(self.ctx.ladder.rungs)
        refusal = self.plan.refusal(rungs) if round_ else ""
        if refusal:
            events.emit("decided", text=refusal)
            return None
        if round_ and (line := self.plan.round_line(round_, rungs)):
            events.say(line)
        self.round_ctx = _round_context(self.ctx, self.machine, round_) if round_ else self.first
        self.busy = {}
        return round_turns(self.ctx.ladder, round_, self.plan.max_rounds, self.plan.auto)

    def held(self, turn: Turn) -> bool:
        held = (turn.rung.index, turn.round_) in self.done
        if held:
            self.busy[turn.rung.index, turn.round_] = None
        return held

    def measure(self, turn: Turn, again: bool, hooks: engine.Hooks) -> rungs_mod.RungOutcome:
        """``rungs.run_rung``: a measured run's time kept in the plan, its record for the duty cycle, and why it was
        busy; no run once the budget is spent (``engine.Stop``)."""
        if not again and (spent := self.plan.run_refusal(turn.label)):
            raise engine.Stop(spent)
        self.busy.pop((turn.rung.index, turn.round_), None)
        began = rounds_mod.clock()
        outcome = rungs_mod.run_rung(self.round_ctx, turn.rung.index, turn.round_, self.machine, hooks.started,
                                     hooks.progress, before_launch=hooks.launching)
        record = outcome.record
        if outcome.how == "measured":
            self.plan.measured(rounds_mod.clock() - began, again)
            if record is not None:
                self.measured.append(record)
        fresh = outcome.how == "measured" and record is not None and record.status == "ok"
        self.busy[turn.rung.index, turn.round_] = busy_reason(record) if fresh else None
        return outcome

    def look(self, rounds: int, events: Events) -> bool:
        busy = list(self.busy.values())
        if rounds == 1 and busy and all(busy) and self.remeasure_busy:
            events.emit("decided", text=f"stop: every run of the first round was busy ({busy[0]}): no run can count, "
                                         "so no more are made; stop the other work and run the same command again")
            self.all_busy = True
            return False
        if not self.plan.auto:
            return True
        judgement, action = rounds_mod.look(self.ctx, self.noise, rounds, self.plan.max_rounds)
        events.emit("looked", text=rounds_mod.look_line(judgement, action))
        if action == "another round":
            return True
        events.emit("decided", text="")
        return False


def _round_context(ctx: rungs_mod.SweepContext, machine, round_: int) -> rungs_mod.SweepContext:
    """The sweep's context for one round: the one earlier sweep its runs may be copied from, if any
    (``rungs.round_source``); no machine: runs a caller fakes, no cache."""
    if machine is None:
        return ctx
    return dataclasses.replace(ctx, copy_from=rungs_mod.round_source(ctx, machine, round_))


def _first_to_measure(ctx: rungs_mod.SweepContext, machine, plan: rounds_mod.RoundPlan,
                      done: set[tuple[int, int]]) -> dict | None:
    """The settings of the sweep's first run, for the warm launcher to start on while the sweep still reads its
    store; None when that run is in this sweep or the cache already (a sweep replayed from the store imports no
    torch; a later run that is measured starts the launcher itself) or is not forked (several devices or nodes)."""
    turn = round_turns(ctx.ladder, 0, plan.max_rounds, plan.auto)[0]
    if machine is None or (turn.rung.index, turn.round_) in done:  # no machine: runs a caller fakes
        return None
    try:
        cfg = rungs_mod.rung_config(ctx, turn.rung.index, machine)
    except ValueError:
        return None  # the rung says so itself when it runs
    if cfg.devices > 1 or cfg.nodes > 1 or rungs_mod.would_be_cached(ctx, cfg):
        return None
    return config_mod.to_dict(cfg)


def auto_compact(results_dir: str) -> None:
    """Past ``store.AUTO_COMPACT_LOOSE`` loose files, compact the store, after the last measurement: it never
    waits for the lock (another compaction running means skip) and a failure only warns."""
    try:
        done = store.maybe_compact(results_dir)
    except (OSError, ValueError) as exc:
        print(f"warning: the store was not compacted ({exc}); the runs are safe as they are. "
              f"Try `python -m harness store compact --results {shlex.quote(str(results_dir))}`", file=sys.stderr)
        return
    if done is not None and not done.busy:
        print(f"store: {done.summary()}")
