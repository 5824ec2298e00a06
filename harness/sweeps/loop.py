"""The sweep loop: every rung of a ladder, round after round, in this process; each rung measured in its own.

Rounds are outermost, so repeats interleave, in serpentine order (rung 0..K, then K..0, ...: a slow drift of
the machine cancels in every pair of rounds instead of favouring the first rungs); ``sweep.repeats=auto`` looks
after every round and stops when every verdict is decided (``harness.sweeps.rounds``). Rungs never run in
parallel: a rung builds on the earlier rungs that ran ok (``harness.sweeps.rungs``). A run made while the
machine was busy (``harness.analysis.stats.busy``) is measured again, once, in the same round. A (rung, round) this
sweep already has a record for (a requeued campaign job) is kept, not measured again. A rung the parent could
not even start is reported, and the loop goes on with the next; with ``stop_on_oom`` the rungs after the first
out-of-memory are not run (``rungs.run_rung`` says so). The rungs measured fork from one warm launcher
(``harness.run.parent.launcher``), and share their synthetic data, for the whole loop. What a person sees is the
caller's ``display``: no printing here, but for the duty cycle and the store's compaction at the end.
"""

from __future__ import annotations

import dataclasses
import functools
import shlex
import sys
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from harness.run.parent import launcher, phases
from harness.config import ladder as ladder_mod
from harness.sweeps import budget
from harness.sweeps import rounds as rounds_mod
from harness.sweeps import rungs as rungs_mod
from harness import config as config_mod
from harness.analysis.gate.answers import BUSY
from harness.analysis.stats.busy import busy_reason
from harness import store

# run(on_start, on_progress) measures (or copies) one rung: what a display wraps its status line around
RunRung = Callable[[Callable[..., Any] | None, Callable[..., Any] | None], rungs_mod.RungOutcome]


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


class LoopDisplay(Protocol):
    """What a person sees of the loop (``harness.commands.sweep`` draws it with rich)."""

    def already_measured(self, turn: Turn) -> None: ...

    def measure(self, turn: Turn, run: RunRung) -> None: ...

    def could_not_run(self, turn: Turn, exc: Exception) -> None: ...

    def say(self, text: str) -> None: ...


def turns(ladder: ladder_mod.Ladder, repeats: int, auto: bool = False) -> list[Turn]:
    """Every (rung, round) of ``repeats`` rounds in the order they run: rounds outermost, serpentine."""
    return [turn for round_ in range(repeats) for turn in round_turns(ladder, round_, repeats, auto)]


def round_turns(ladder: ladder_mod.Ladder, round_: int, repeats: int, auto: bool = False) -> list[Turn]:
    """The rungs of one round in the order they run: forward in even rounds, backward in odd ones."""
    return [Turn(rung, round_, len(ladder.rungs), repeats, auto) for rung in rounds_mod.order(list(ladder.rungs),
                                                                                             round_)]


def run_ladder(ctx: rungs_mod.SweepContext, machine, display: LoopDisplay) -> int:
    """Measure (or take from the cache) every rung of every round, in order; the records go to the store. At the
    end, the duty cycle of the runs measured (their windows over the loop's wall time), when any was.

    Before each round, how long it should take (``harness.sweeps.budget``); within ``sweep.budget_min`` no round
    is started that would not fit, and no run once it is spent (a run in flight finishes).

    Returns 1 if a rung could not even be started, 2 if the first round would not fit in the budget (nothing is
    measured), 5 (busy) when every run of the first round was measured on a busy machine (no run could count, so
    it stops there), else 0: failed runs are data, shown in the table."""
    ctx, noise = rounds_mod.with_calibration(ctx, machine)
    plan = rounds_mod.RoundPlan.of(ctx)
    if plan.auto:
        display.say(f"sweep.repeats=auto: rounds until every verdict is decided, at most {plan.max_rounds} within "
                    f"sweep.budget_min={ctx.budget_min:g}; "
                    + (noise.describe() if noise.calibrated else "no calibration"))
    done = rungs_mod.measured_rungs(ctx)
    code = 0
    measured: list = []
    started = rounds_mod.clock()
    first = _round_context(ctx, machine, 0)  # nothing is stored before round 0 starts: its source holds
    estimate = budget.stored_round(first, machine, done)
    display.say(budget.first_round_line(estimate, plan.budget_s))
    if refusal := budget.first_round_refusal(estimate, plan.budget_s):
        display.say(refusal)
        return 2
    with launcher.warm() as session:
        session.begin(_first_to_measure(first, machine, plan, done))
        for round_ in range(plan.max_rounds):
            refusal = plan.refusal(len(ctx.ladder.rungs)) if round_ else ""
            if refusal:
                display.say(refusal)
                break
            if round_ and (line := plan.round_line(round_, len(ctx.ladder.rungs))):
                display.say(line)
            round_ctx = _round_context(ctx, machine, round_) if round_ else first
            spent = ""
            busy: list[str | None] = []  # each turn of the round: why its run was busy (None: it counts)
            for turn in round_turns(ctx.ladder, round_, plan.max_rounds, plan.auto):
                if (turn.rung.index, turn.round_) in done:
                    display.already_measured(turn)
                    busy.append(None)
                    continue
                if spent := plan.run_refusal(turn.label):
                    display.say(spent)
                    break
                code = max(code, _turn(round_ctx, machine, display, turn, plan, measured, busy))
            if spent:
                break
            if round_ == 0 and busy and all(busy):
                display.say(f"stop: every run of the first round was busy ({busy[0]}): no run can count, so no "
                            "more are made; stop the other work and run the same command again")
                return BUSY
            if plan.auto:
                judgement, action = rounds_mod.look(ctx, noise, round_ + 1, plan.max_rounds)
                display.say(rounds_mod.look_line(judgement, action))
                if action != "another round":
                    break
    if measured:
        print(phases.duty_cycle(measured, rounds_mod.clock() - started))
    return code


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
    torch; a later run that is measured starts the launcher itself) or is not forked (several devices)."""
    turn = round_turns(ctx.ladder, 0, plan.max_rounds, plan.auto)[0]
    if machine is None or (turn.rung.index, turn.round_) in done:  # no machine: runs a caller fakes
        return None
    try:
        cfg = rungs_mod.rung_config(ctx, turn.rung.index, machine)
    except ValueError:
        return None  # the rung says so itself when it runs
    if cfg.devices > 1 or rungs_mod.would_be_cached(ctx, cfg):
        return None
    return config_mod.to_dict(cfg)


def _turn(ctx: rungs_mod.SweepContext, machine, display: LoopDisplay, turn: Turn, plan: rounds_mod.RoundPlan,
          measured: list, busy: list | None = None) -> int:
    """One rung of one round; a run of a busy machine measured again, once (a run of the store this sweep has not
    used yet may stand in, as for any rung: a sweep run again replays its store). 1 if it could not start.
    ``busy`` gets why the run that stands was busy (None when it was not, or was not measured now)."""
    for again in (False, True):
        outcomes: list[rungs_mod.RungOutcome] = []
        try:
            display.measure(turn, functools.partial(_run, ctx, machine, turn, plan, again, outcomes, measured,
                                                    getattr(display, "before_launch", None)))
        except Exception as exc:  # a rung the parent could not even start: say so, go on with the next
            display.could_not_run(turn, exc)
            return 1
        record = outcomes[-1].record if outcomes else None
        fresh = bool(outcomes) and outcomes[-1].how == "measured"
        why = busy_reason(record) if record is not None and record.status == "ok" else None
        if not why or again or not ctx.remeasure_busy:
            if busy is not None:
                busy.append(why if fresh else None)
            return 0
        display.say(f"{turn.label} machine busy ({why}): not trustworthy; measuring it again")
    return 0


def _run(ctx: rungs_mod.SweepContext, machine, turn: Turn, plan: rounds_mod.RoundPlan, again: bool, outcomes: list,
         measured: list, before_launch=None, on_start=None, on_progress=None) -> rungs_mod.RungOutcome:
    """``rungs.run_rung`` for a display to wrap: the outcome kept in ``outcomes``, a measured run's time in the plan
    and its record in ``measured`` (for the duty cycle)."""
    began = rounds_mod.clock()
    outcome = rungs_mod.run_rung(ctx, turn.rung.index, turn.round_, machine, on_start, on_progress,
                                 before_launch=before_launch)
    if outcome.how == "measured":
        plan.measured(rounds_mod.clock() - began, again)
        if outcome.record is not None:
            measured.append(outcome.record)
    outcomes.append(outcome)
    return outcome


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
