"""The session engine: round after round of a policy's turns, a look after each, until the policy decides.

A policy is what a measuring command decides (a ladder's rounds until decided, a climb's next knob, a fit's next
size, a check's next round): the engine only runs it. Per turn it tells the listeners and keeps going whatever
happens to one turn: a turn the policy already holds (a resumed session) is told as ``already``; a turn that
cannot even start is told as ``failed`` and makes the session's exit code 1 (or, where the policy cannot go on
without its answer, ends the session with its error); a run of a busy machine is measured again, once, in the same
round, where the policy asks for it (``remeasure_busy``).
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence

from harness.analysis.stats.busy import busy_reason
from harness.session.events import Events


class Stop(Exception):
    """Raised by a policy's ``measure`` to end the session before that turn runs (a time budget spent): told as
    ``decided`` with its text; what was measured stays, and the exit code is what it was."""


class Hooks:
    """What a policy's ``measure`` hands the runner for one turn: the events it tells on the way."""

    def __init__(self, events: Events, turn: Any, before_launch=None):
        self.events, self.turn, self.before_launch = events, turn, before_launch

    def started(self, cfg, dropped: frozenset[int] = frozenset()) -> None:
        self.events.emit("started", self.turn, cfg=cfg, dropped=frozenset(dropped))

    def progress(self, info: dict, elapsed: float) -> None:
        self.events.emit("progress", self.turn, info=info, elapsed=elapsed)

    def launching(self, cfg, reason: str = "") -> None:
        """A run is about to be measured, or recorded as skipped (``reason``): ``runner.run_one``'s
        ``before_launch``, told to the session's ``before_launch(cfg)`` where it has one."""
        if self.before_launch is not None:
            self.before_launch(cfg)


class Policy(Protocol):
    """A measuring command's decisions over the engine."""

    remeasure_busy: bool  # a run of a busy machine measured again, once
    keep_going: bool  # a turn that cannot start: told, and the session goes on (else the error ends it)

    def next_turns(self, round_: int, events: Events) -> Sequence[Any] | None:
        """The turns of round ``round_`` in the order they run; None: the session ends (the policy tells why as
        ``decided`` when a look did not)."""

    def held(self, turn: Any) -> bool:
        """Whether the session has a record of ``turn`` already (it is not run again)."""

    def measure(self, turn: Any, again: bool, hooks: Hooks) -> Any:
        """Measure or copy one turn (``again``: a busy run's second try); an outcome with ``.record`` and ``.how``."""

    def look(self, rounds: int, events: Events) -> bool:
        """After ``rounds`` rounds: whether another may come (a look told as ``looked``, an end as ``decided``)."""


def run(policy: Policy, events: Events, before_launch=None) -> int:
    """Run ``policy`` to its end; 1 if a turn could not even start, else 0 (failed runs are data, in the records).
    ``before_launch(cfg)``: called before each run measured (``runner.run_one``)."""
    code, round_ = 0, 0
    while (turns := policy.next_turns(round_, events)) is not None:
        for turn in turns:
            if policy.held(turn):
                events.emit("already", turn)
                continue
            try:
                code = max(code, _turn(policy, turn, events, before_launch))
            except Stop as stop:
                events.emit("decided", turn, text=str(stop))
                return code
        round_ += 1
        if not policy.look(round_, events):
            break
    return code


def _turn(policy: Policy, turn: Any, events: Events, before_launch) -> int:
    """One turn; a run of a busy machine measured again, once. 1 if it could not start."""
    for again in (False, True):
        try:
            outcome = policy.measure(turn, again, Hooks(events, turn, before_launch))
        except Stop:
            raise
        except Exception as exc:  # a turn the parent could not even start: say so, go on with the next
            events.emit("failed", turn, error=exc)
            if not policy.keep_going:
                raise
            return 1
        events.emit(outcome.how, turn, outcome=outcome)
        record = outcome.record
        why = busy_reason(record) if record is not None and record.status == "ok" else None
        if not why or again or not policy.remeasure_busy:
            return 0
        events.emit("busy", turn, text=f"{turn.label} machine busy ({why}): not trustworthy; measuring it again")
    return 0
