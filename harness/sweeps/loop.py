"""The sweep loop: every rung of a ladder, round after round, in this process; each rung measured in its own.

Rounds are outermost, so repeats interleave (rung 0..K, then again) and a slow drift of the machine spreads
over every rung instead of favouring the first. Rungs run in order, never in parallel: a rung builds on the
earlier rungs that ran ok (``harness.sweeps.rungs``). A (rung, round) this sweep already has a record for
(a requeued campaign job) is kept, not measured again. A rung the parent could not even start is reported,
and the loop goes on with the next; with ``stop_on_oom`` the rungs after the first out-of-memory are not
run (``rungs.run_rung`` says so). The rungs measured fork from one warm launcher (``harness.run.launcher``), and
share their synthetic data, for the whole loop. What a person sees is the caller's ``display``: no printing here,
but for the duty cycle and the store's compaction at the end.
"""

from __future__ import annotations

import functools
import shlex
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from harness.run import launcher, phases
from harness.sweeps import ladder as ladder_mod
from harness.sweeps import rungs as rungs_mod

# run(on_start, on_progress) measures (or copies) one rung: what a display wraps its status line around
RunRung = Callable[[Callable[..., Any] | None, Callable[..., Any] | None], rungs_mod.RungOutcome]


@dataclass(frozen=True)
class Turn:
    """One rung of one round."""

    rung: ladder_mod.Rung
    round_: int
    rungs: int  # rungs in the ladder
    rounds: int  # the sweep's repeats

    @property
    def label(self) -> str:
        """``[rung 2/4]``, or ``[rung 2/4, round 1/3]`` with repeats (plain text)."""
        rounds = f", round {self.round_ + 1}/{self.rounds}" if self.rounds > 1 else ""
        return f"[rung {self.rung.index + 1}/{self.rungs}{rounds}]"


class LoopDisplay(Protocol):
    """What a person sees of the loop (``harness.commands.sweep`` draws it with rich)."""

    def already_measured(self, turn: Turn) -> None: ...

    def measure(self, turn: Turn, run: RunRung) -> None: ...

    def could_not_run(self, turn: Turn, exc: Exception) -> None: ...


def turns(ladder: ladder_mod.Ladder, repeats: int) -> list[Turn]:
    """Every (rung, round) of a sweep in the order it runs: rounds outermost."""
    return [Turn(rung, round_, len(ladder.rungs), repeats) for round_ in range(repeats) for rung in ladder.rungs]


def run_ladder(ctx: rungs_mod.SweepContext, machine, display: LoopDisplay) -> int:
    """Measure (or take from the cache) every rung of every round, in order; the records go to the store. At the
    end, the duty cycle of the runs measured (their windows over the loop's wall time), when any was.

    Returns 1 if a rung could not even be started, else 0: failed runs are data, shown in the table."""
    done = rungs_mod.measured_rungs(ctx)
    code = 0
    measured: list = []
    started = time.monotonic()
    with launcher.warm():
        for turn in turns(ctx.ladder, ctx.repeats):
            if (turn.rung.index, turn.round_) in done:
                display.already_measured(turn)
                continue
            run = functools.partial(rungs_mod.run_rung, ctx, turn.rung.index, turn.round_, machine)
            try:
                display.measure(turn, functools.partial(_kept, run, measured))
            except Exception as exc:  # a rung the parent could not even start: say so, go on with the next
                display.could_not_run(turn, exc)
                code = 1
    if measured:
        print(phases.duty_cycle(measured, time.monotonic() - started))
    return code


def _kept(run: RunRung, measured: list, on_start=None, on_progress=None) -> rungs_mod.RungOutcome:
    """``run``, keeping the record of a run it measured (for the duty cycle)."""
    outcome = run(on_start, on_progress)
    if outcome.how == "measured" and outcome.record is not None:
        measured.append(outcome.record)
    return outcome


def auto_compact(results_dir: str) -> None:
    """Past ``store.AUTO_COMPACT_LOOSE`` loose files, compact the store, after the last measurement: it never
    waits for the lock (another compaction running means skip) and a failure only warns."""
    from harness import store

    try:
        done = store.maybe_compact(results_dir)
    except (OSError, ValueError) as exc:
        print(f"warning: the store was not compacted ({exc}); the runs are safe as they are. "
              f"Try `python -m harness store compact --results {shlex.quote(str(results_dir))}`", file=sys.stderr)
        return
    if done is not None and not done.busy:
        print(f"store: {done.summary()}")
