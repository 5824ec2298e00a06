"""The climb as a policy over the session engine (``harness.session.engine``): the engine runs one run a turn,
the climb's decisions (``ascent.climbing``) say which measurement comes next, and what a person sees is a
listener of the session's events (:class:`ClimbLines`).

A measurement the ascent asks for (a candidate against the incumbent, an accepted one measured again, the start
against the best) is a :class:`Comparison`: ``climb.repeats`` rounds, the candidate first in round 0 (a candidate
that cannot run costs one run), then the order alternates (ABBA), so that a slow drift of the machine favours
neither side. A candidate of two changes (checkpointing to fit a larger batch) also measures the first change
alone: the ladder the climb writes has a rung for it, and re-running that ladder must find it in the store. The
look after each run decides: the comparison's next run, or its answer handed to the ascent, which decides the
next measurement or ends the climb. A run of a busy machine is measured again once (``sweep.remeasure_busy``),
before anything is decided on it.

On a GPU the batch's values come from a search for the largest batch that fits the incumbent
(:func:`largest_batch`): a policy of its own over the same engine, one size a turn (``harness.session.probe``), told
to the same listeners.
"""

from __future__ import annotations

import json

from rich.markup import escape

from harness.climb import output
from harness.climb.ascent import (AGAIN, FINAL, NOT_RUN, BudgetSpent, Climbing, ClimbResult, Measured, Request,
                                  climbing)
from harness.climb.space import ClimbConfig, Facts, space
from harness.climb.trials import SEARCH, Run, Trials, label_of, last_line, measured
from harness.session import engine
from harness.session.probe import DEFAULT_MAX, OK, Probe, Search
from harness.session.events import OUTCOMES, Display, Event, Events
from harness.session.runner import Outcome
from harness.analysis.stats.busy import busy_reason


class Comparison:
    """The runs of one request in the order they run, and what they said so far; ``answer`` once it is done (all
    its runs, or one that was not ok, or settings that do not fit together)."""

    def __init__(self, request: Request, repeats: int):
        whole, candidate = request.kind == FINAL, request.candidate
        self.request = request
        self.roles = ["candidate"] + (["enabled"] if len(candidate) > 1 and not whole else []) + ["incumbent"]
        changes = {"candidate": [*request.accepted, *candidate], "enabled": [*request.accepted, *candidate[:-1]],
                   "incumbent": list(request.accepted)}
        first = repeats if request.kind == AGAIN else 0  # measured again: the rounds after the first repeats
        self.runs = [Run(request.step, role, round_, label_of(role, candidate), tuple(changes[role]), repeats)
                     for round_ in range(first, first + repeats)
                     for role in (self.roles if (round_ - first) % 2 == 0 else self.roles[::-1])]
        self.records: dict[str, list] = {role: [] for role in self.roles}
        self.at, self.cached, self.busy = 0, 0, ""
        self.answer: Measured | None = None

    def add(self, record, how: str) -> None:
        """The record that stands for the next run (measured again if it was busy)."""
        run = self.runs[self.at]
        self.at += 1
        self.records[run.role].append(record)
        self.cached += how == "cached"
        self.busy = self.busy or ((busy_reason(record) or "") if record.status == "ok" else "")
        if record.status != "ok":
            failed = {"incumbent" if run.role == "incumbent" else "candidate": record.status}
            self.answer = measured(self.records, self.cached, failed.get("candidate", "ok"),
                                   last_line(record.error), failed.get("incumbent", "ok"))
        elif self.at == len(self.runs):
            self.answer = measured(self.records, self.cached, "ok", "", busy=self.busy)

    def refused(self, exc: ValueError) -> None:
        """Settings that do not fit together: nothing ran."""
        self.answer = measured(self.records, self.cached, "skipped", str(exc))

    def spent(self, exc: BudgetSpent) -> BudgetSpent:
        """The budget cannot pay for the next run: what the ascent is told."""
        done = sum(map(len, self.records.values()))
        if not done:
            return exc
        return BudgetSpent(f"{exc}; {done} of {len(self.runs)} runs of this step are stored, and a re-run measures "
                           "the step again whole (a comparison's runs all come from one session)")


class ClimbPolicy:
    """The climb's decisions over the session engine: one run a turn, the ascent's next request after each look."""

    keep_going = False  # a run that cannot start ends the climb with its error

    def __init__(self, trials: Trials, climb: Climbing):
        self.trials, self.climb = trials, climb
        self.remeasure_busy = trials.ctx.remeasure_busy
        self.comparison: Comparison | None = None
        self.result = None  # the ascent's ClimbResult, once it ended
        self.last: tuple | Exception | None = None  # the turn just run: (record, how), or why it did not run
        self.said = False
        self._next(lambda: next(climb))

    def _next(self, answer) -> None:
        """The ascent's next request (``answer()`` hands it the last one's answer), or its result."""
        try:
            request = answer()
        except StopIteration as done:
            self.comparison, self.result = None, done.value
            return
        self.comparison, self.said = Comparison(request, self.trials.repeats), False
        self.trials.source = self.trials.whole_source(self.comparison.runs)  # copied whole, or measured whole
        # until the end check, each run keeps time for it (2 x climb.repeats runs) once a change was accepted
        whole = request.kind == FINAL or not request.accepted
        self.trials.budget.reserve_runs = 0 if whole else 2 * self.trials.repeats

    def next_turns(self, round_: int, events: Events) -> list[Run] | None:
        comparison = self.comparison
        if comparison is None:
            return None
        if comparison.request.kind == FINAL and not self.said:
            events.say(f"step {comparison.request.step}: the start and the best, measured side by side")
            self.said = True
        return [comparison.runs[comparison.at]]

    def held(self, turn: Run) -> bool:
        return False  # a climb run again replays from the store's copies (``Trials.trial``)

    def measure(self, turn: Run, again: bool, hooks: engine.Hooks) -> Outcome:
        try:
            record, how = self.trials.trial(list(turn.changes), turn.step, turn.role, turn.round_, turn.change, hooks)
        except (ValueError, BudgetSpent) as exc:  # nothing ran: the look tells the ascent
            self.last = exc
            return Outcome(None, "not run", str(exc))
        self.last = (record, how)
        if why := busy_reason(record) if record.status == "ok" else None:
            self.trials.busy.append(why)
        return Outcome(record, how)

    def look(self, rounds: int, events: Events) -> bool:
        """After each run: the comparison's next run, or its answer handed to the ascent for its next request."""
        comparison, last = self.comparison, self.last
        if isinstance(last, ValueError):
            comparison.refused(last)
        elif not isinstance(last, BudgetSpent) and self.trials.stopped_by_budget(last[0]):
            last = BudgetSpent("a run was stopped at the end of the budget")  # stored and said, but not counted
        elif not isinstance(last, BudgetSpent):
            comparison.add(*last)
        if isinstance(last, BudgetSpent):
            self._next(lambda: self.climb.throw(comparison.spent(last)))
        elif comparison.answer is not None:
            self._next(lambda: self.climb.send(comparison.answer))
        return self.comparison is not None


def compare(trials: Trials, request: Request, events: Events | None = None) -> Measured:
    """One request measured on its own through the engine (a measuring function of ``ascent.ascend``); BudgetSpent
    when the budget cannot pay for its first run."""
    def one() -> Climbing:
        return (yield request)

    policy = ClimbPolicy(trials, one())
    engine.run(policy, events or trials.events)
    return policy.result


class BatchSearch:
    """The search for the largest batch that fits ``changes`` over the start, as a policy over the session engine:
    one size a turn (the probe's next: a fresh process, or a stored run a re-run replays), its status told to the
    probe at the look. A run of a busy machine is noted, not measured again: its memory, not its speed, counts."""

    keep_going = False  # a run that cannot start ends the climb with its error
    remeasure_busy = False

    def __init__(self, trials: Trials, changes, probe: Probe):
        self.trials, self.changes, self.probe = trials, list(changes), probe
        self.record = None

    def next_turns(self, round_: int, events: Events) -> list[Run] | None:
        size = self.probe.next()
        if size is None:
            return None
        return [Run(0, SEARCH, 0, f"batch_size={size} (fit search)", (*self.changes, ("batch_size", size)),
                    self.trials.repeats)]

    def held(self, turn: Run) -> bool:
        return False

    def measure(self, turn: Run, again: bool, hooks: engine.Hooks) -> Outcome:
        record, how = self.trials.trial(list(turn.changes), 0, SEARCH, 0, turn.change, hooks)
        self.trials.busy += [why] if record.status == "ok" and (why := busy_reason(record)) else []
        self.record = record
        return Outcome(record, how)

    def look(self, rounds: int, events: Events) -> bool:
        """The size's status told to the probe; BudgetSpent for a run stopped at the end of the budget."""
        if self.trials.stopped_by_budget(self.record):
            raise BudgetSpent("a run was stopped at the end of the budget")
        self.probe.tell(self.record.status)
        return self.probe.next() is not None


def largest_batch(trials: Trials, changes, now: int, high: int) -> Search:
    """The search for the largest batch_size that fits ``changes`` over the start, from ``now`` (the incumbent's:
    known to fit, not run again) up to ``high``, each size a turn of the session engine (:class:`BatchSearch`)."""
    probe = Probe(now, high)
    probe.tell(OK)
    search = BatchSearch(trials, changes, probe)
    if probe.next() is not None:
        engine.run(search, trials.events)
    return probe.found


class ClimbLines:
    """The climb as a person sees it (a listener of its session's events): a status line while a run is measured,
    then its status and speed; a busy run's second measurement; each decided step."""

    def __init__(self, display: Display):
        self.display = display
        self.shown = self.progress = self.record = None

    def on(self, event: Event) -> None:
        if event.kind == "started":
            self.shown = self.display.progress(event.turn.label)
            self.progress = self.shown.__enter__()
        elif event.kind == "progress" and self.progress is not None:
            self.progress.update(event.info, event.elapsed)
        elif event.kind in OUTCOMES or event.kind == "failed":
            self.close()
            self.record = event.outcome.record if event.outcome is not None else None
            if self.record is not None:
                self.display.say(_status(event.turn.label, self.record, event.kind))
        elif event.kind == "busy" and self.record is not None:
            self.display.say(f"{event.turn.label}: machine busy ({escape(busy_reason(self.record) or '')}): not "
                             "trustworthy; measuring it again")
        elif event.kind in ("said", "looked"):
            self.display.say(event.text)

    def close(self) -> None:
        """The status line of a run in progress ended (the run ended, or the climb with it)."""
        shown, self.shown, self.progress = self.shown, None, None
        if shown is not None:
            shown.__exit__(None, None, None)


def _status(label: str, record, kind: str) -> str:
    how = "not run" if kind == "skipped" else kind
    if record.status == "ok":
        return f"{label}: ok ({how}) {record.samples_per_s:.2f} samples/s"
    return f"{label}: {record.status} ({how}) {escape(last_line(record.error)[:160])}"


def ascend(start: dict, options: ClimbConfig, facts: Facts, trials: Trials, noise,
           tracker) -> ClimbResult:
    """The ascent from ``start`` (flat settings) as the climb's policy over the session engine, with the climb's
    spent time saved after every step and however it ends, Ctrl-C included (``tracker``: ``resume.Tracker``)."""
    def on_step(step) -> None:
        trials.events.emit("looked", text=output.step_line(step))
        tracker.step(decided=step.outcome != NOT_RUN)

    stopped = ""
    try:
        policy = ClimbPolicy(trials, climbing(start, space(facts.device, options.knobs), facts, noise,
                                              options.min_effect, on_step))
        engine.run(policy, trials.events)
        stopped = policy.result.stopped
        return policy.result
    finally:
        tracker.save(stopped)


def batch_bound(start: dict, trials: Trials, display: Display, options: ClimbConfig):
    """``Facts.largest_batch`` on a GPU: fit's search for the largest batch_size that fits the incumbent, from its
    batch (known to fit) up to fit.max's GPU default, each size a turn of the session engine (a fresh process:
    ``largest_batch``), once per incumbent (the batch aside). None on a CPU (said once): no allocator runs out
    there, the search would only find fit.max."""
    if "batch" not in [a.name for a in space(start["device"], options.knobs)]:
        return None
    if start["device"] != "cuda":
        display.say("batch: on a CPU nothing runs out of memory below fit.max, so no search for the largest batch "
                    "that fits: the batch doubles while it wins")
        return None
    found: dict[str, int | None] = {}

    def largest(settings: dict) -> int | None:
        key = json.dumps({k: v for k, v in settings.items() if k != "batch_size"}, sort_keys=True, default=str)
        if key not in found:
            now = int(settings["batch_size"])
            changes = [(k, v) for k, v in settings.items() if k != "batch_size" and start.get(k) != v]
            result = largest_batch(trials, changes, now, max(now, DEFAULT_MAX["cuda"]))
            decided = result.smallest_oom is not None or result.stopped.startswith("every size")
            found[key] = result.largest if decided else None  # an error or a timeout says nothing about memory
            display.say(f"batch: the largest batch_size that fits from {now}: {found[key] or 'not found'} "
                        f"({result.stopped}; {len(result.tried) - 1} run(s)); the batch tries x2, x4, ... up to it")
        return found[key]

    return largest

