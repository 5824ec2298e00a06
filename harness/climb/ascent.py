"""The climb's decisions and budget: accept a candidate only when faster beyond noise, walk every axis while
it wins, stop when a pass changes nothing or the budget cannot pay for the next run. Measures nothing itself:
``climbing`` yields each measurement it needs next (a :class:`Request`), answered by the climb's policy over the
session engine (``harness.climb.policy``), or through ``ascend`` by functions (a simulation in tests).

A decision is the rung x round model of the sweep table (``harness.analysis.stats.blocks``) on a paired table:
incumbent and candidate measured in the same rounds (ABBA), the round effects cancel, the machine's fit
calibration pooled with the runs' own variance. With one run a side and no calibration there is no band, and
nothing is accepted. A run made while the machine was busy is measured again; if it still is, the step is not
decided (``BUSY``). Every accepted change is measured once more with other runs, and kept only when that band
too lies above 1x: among the ~10 candidates a climb tries, the one whose runs came out high by chance would
otherwise stay (the winner's curse); that band is the claim the ladder writes. At the end the start and the best
are measured side by side (``final``); when that check does not show the best faster, only the changes that held
when measured again are kept."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Generator

from harness.climb.space import Axis, Facts
from harness.analysis.stats import blocks
from harness.analysis.stats.speedup import band_text

if TYPE_CHECKING:  # the noise model pulls in scipy: imported where a decision is made, not by every command
    from harness.analysis.stats import noise_model
    from harness.analysis.stats.speedup import Ratio

ACCEPTED, REJECTED, SKIPPED, OOM, FAILED, NOT_RUN = "accepted", "rejected", "skipped", "oom", "failed", "not run"
BUSY = "busy"  # a run still not trustworthy after it was measured again: the step decides nothing
COMPILE_PRIOR = 3.0  # a first compiled run is assumed to take this many times the longest run so far
MIN_TRIAL_S = 5.0  # never start a measurement with less budget left than this


@dataclass(frozen=True)
class Measured:
    """What measuring a candidate against the incumbent gave (ok runs only in the Runs)."""

    candidate_status: str  # "ok", or the first status that was not: oom, skipped, error, nan, timeout
    candidate: noise_model.Runs
    incumbent: noise_model.Runs
    reason: str = ""  # why a run was skipped or failed
    cached: int = 0  # runs taken from the store rather than measured
    enabled: noise_model.Runs | None = None  # a two-change candidate: the incumbent with the enabling change alone
    incumbent_status: str = "ok"  # the first status of an incumbent run that was not ok
    busy: str = ""  # why a run was still not trustworthy after it was measured again (``busy.busy_reason``)


@dataclass(frozen=True)
class Decision:
    outcome: str  # ACCEPTED, REJECTED, SKIPPED, OOM, FAILED
    ratio: Ratio | None
    why: str


def decide(m: Measured, noise: noise_model.Noise, min_effect: float) -> Decision:
    """Accept only a candidate faster beyond noise (band above 1x) and by at least ``min_effect``."""
    if m.incumbent_status != "ok":
        return Decision(FAILED, None, f"the incumbent ended {m.incumbent_status}: {m.reason}".strip(": "))
    if m.candidate_status == "skipped":
        return Decision(SKIPPED, None, m.reason or "cannot act here")
    if m.candidate_status == "oom":
        return Decision(OOM, None, m.reason or "out of memory")
    if m.candidate_status != "ok" or not m.candidate.n:
        return Decision(FAILED, None, f"{m.candidate_status}: {m.reason}".strip(": "))
    if not m.incumbent.n:
        return Decision(FAILED, None, f"the incumbent did not run ok this time: {m.reason}".strip(": "))
    if m.busy:
        return Decision(BUSY, None, f"no verdict: machine busy ({m.busy}): not trustworthy")
    r = paired_ratios(m, noise)[-1]
    if math.isnan(r.low):
        return Decision(REJECTED, r, "no band: one run a side and no calibration (climb.repeats=2, or calibrate, as "
                                     "the climb's first line says)")
    if r.low > 1 and r.value >= 1 + min_effect:
        return Decision(ACCEPTED, r, f"faster beyond noise and by >= {min_effect:.0%}")
    if r.low > 1:
        return Decision(REJECTED, r, f"faster beyond noise, but by less than {min_effect:.0%}")
    if r.high < 1:
        return Decision(REJECTED, r, "slower beyond noise")
    return Decision(REJECTED, r, "within noise")


def paired_ratios(m: Measured, noise: noise_model.Noise) -> list[Ratio]:
    """The candidate over the incumbent from the paired table (rows: incumbent, [enabled,] candidate; a side's
    runs in round order); with an enabling change first the enabled over the incumbent and the candidate over
    the enabled, then the candidate over the incumbent."""
    import numpy as np

    sides = [m.incumbent] + ([m.enabled] if m.enabled is not None and m.enabled.n else []) + [m.candidate]
    logs = np.full((len(sides), max(s.n for s in sides)), np.nan)
    for row, side in enumerate(sides):
        logs[row, :side.n] = side.logs()
    cv, df = (noise.cv, noise.df) if noise.calibrated else (None, 0.0)
    model = blocks.fit(logs, cv, df)
    last = len(sides) - 1
    pairs = [(1, 0), (2, 1)] if len(sides) == 3 else []
    return [blocks.contrast(model, new, old).ratio(0.05) for new, old in pairs + [(last, 0)]]


# ------------------------------------------------------------------------------------------
# the budget


@dataclass
class Budget:
    """Wall-clock budget; estimates a run from the runs measured so far (cached runs cost nothing)."""

    seconds: float
    start: float
    durations: dict[str, float] = field(default_factory=dict)  # settings key -> seconds of its last fresh run
    compiled: bool = False  # a compiled run has been measured (its time is among the durations)
    reserve_runs: int = 0  # runs of the longest duration kept for the check at the end (start against best)

    def left(self, now: float) -> float:
        return self.seconds - (now - self.start)

    def record(self, key: str, seconds: float, compiles: bool) -> None:
        self.durations[key] = seconds
        self.compiled = self.compiled or compiles

    def estimate(self, key: str, compiles: bool) -> float | None:
        """Seconds a fresh run of these settings will likely take (None before any run was measured)."""
        if key in self.durations:
            return self.durations[key]
        if not self.durations:
            return None
        longest = max(self.durations.values())
        return longest * COMPILE_PRIOR if compiles and not self.compiled else longest

    def refusal(self, key: str, compiles: bool, now: float) -> str:
        """Why a fresh run of these settings must not start ("" when it may)."""
        left, guess = self.left(now), self.estimate(key, compiles)
        kept = self.reserve_runs * max(self.durations.values(), default=0.0)
        if left < MIN_TRIAL_S or (guess is not None and guess + kept > left):
            about = f"~{guess:.0f} s" if guess is not None else "its run"
            also = f" and the ~{kept:.0f} s kept for the start against the best" if kept and guess is not None else ""
            return f"the next run ({about}){also} would not finish in the {max(left, 0):.0f} s of budget left"
        return ""


class BudgetSpent(Exception):
    """Raised by a measuring function when a run it needs would not finish within the budget."""


# ------------------------------------------------------------------------------------------
# the ascent


@dataclass(frozen=True)
class Step:
    """One candidate tried: ``key`` from ``before`` to ``value`` (with ``enabling`` changes first, if any)."""

    step: int
    pass_: int
    axis: str
    key: str
    value: Any
    before: Any  # the incumbent's value of ``key``
    outcome: str
    ratio: Ratio | None = None
    why: str = ""
    runs: tuple[int, int] = (0, 0)  # ok runs of candidate, incumbent
    cached: int = 0
    enabling: tuple[tuple[str, Any], ...] = ()  # e.g. activation_checkpointing=true to fit a larger batch
    parts: tuple[Ratio, ...] = ()  # accepted with enabling changes: each change's own ratio, in order
    confirmed: Ratio | None = None  # accepted: the band of the runs measured once more after it (the ladder's claim)
    confirmed_parts: tuple[Ratio, ...] = ()  # the same for each change of an accepted two-change candidate

    @property
    def changes(self) -> tuple[tuple[str, Any], ...]:
        return self.enabling + ((self.key, self.value),)


@dataclass
class ClimbResult:
    start: dict
    best: dict
    steps: list[Step]
    stopped: str  # why the climb ended
    final: Ratio | None = None  # the best over the start, measured side by side at the end (None: not measured)
    final_why: str = ""  # what that check said, and what is kept
    dropped: tuple[int, ...] = ()  # accepted steps the end check does not keep (their step numbers)

    @property
    def accepted(self) -> list[Step]:
        return [s for s in self.steps if s.outcome == ACCEPTED]

    @property
    def kept(self) -> list[Step]:
        """The accepted steps the ladder and the best command keep."""
        return [s for s in self.accepted if s.step not in self.dropped]


Change = tuple[str, Any]
Measure = Callable[[list[Change], tuple[Change, ...], int], Measured]
COMPARE, AGAIN, FINAL = "compare", "again", "final"  # what a Request asks to measure


@dataclass(frozen=True)
class Request:
    """The next measurement the ascent decided on: ``kind`` COMPARE (the candidate ``candidate`` over the incumbent,
    start + ``accepted``), AGAIN (an accepted candidate measured once more, with other runs) or FINAL (the start
    against the best: ``candidate`` every change kept, ``accepted`` empty). Answered with a :class:`Measured`, or
    with :class:`BudgetSpent` thrown in when the budget cannot pay for it."""

    kind: str
    accepted: list
    candidate: tuple
    step: int


Climbing = Generator[Request, Measured, ClimbResult]


def ascend(start: dict, axes: list[Axis], facts: Facts, measure: Measure, noise: noise_model.Noise,
           min_effect: float, on_step: Callable[[Step], Any] | None = None,
           confirm: Measure | None = None, final: Measure | None = None) -> ClimbResult:
    """Greedy coordinate ascent from ``start`` (flat resolved settings), then (``final`` given and a change
    accepted) the start against the best, side by side: ``final([], best_changes, step)`` (:func:`finish`). The
    decisions are :func:`climbing`'s; this answers its requests with the functions given."""
    return drive(climbing(start, axes, facts, noise, min_effect, on_step, confirm is not None, final is not None),
                 {COMPARE: measure, AGAIN: confirm, FINAL: final})


def drive(climb: Climbing, measures: dict[str, Measure]) -> ClimbResult:
    """Answer each request of ``climb`` with ``measures[kind]``, to its end (a session's policy answers them with
    runs instead: ``harness.climb.policy``)."""
    try:
        request = next(climb)
        while True:
            try:
                measured = measures[request.kind](request.accepted, request.candidate, request.step)
            except BudgetSpent as exc:
                request = climb.throw(exc)
            else:
                request = climb.send(measured)
    except StopIteration as done:
        return done.value


def climbing(start: dict, axes: list[Axis], facts: Facts, noise: noise_model.Noise, min_effect: float,
             on_step: Callable[[Step], Any] | None = None, confirm: bool = True, final: bool = True) -> Climbing:
    """The climb's decisions as a generator: it yields each :class:`Request` it needs answered and returns the
    :class:`ClimbResult` (``confirm``: an accepted candidate is measured again; ``final``: the start against the
    best at the end)."""
    result = yield from _climb(start, axes, facts, noise, min_effect, on_step, confirm)
    return (yield from finish(result, noise)) if final else result


def _climb(start: dict, axes: list[Axis], facts: Facts, noise: noise_model.Noise, min_effect: float,
           on_step: Callable[[Step], Any] | None, confirm: bool) -> Climbing:
    """Greedy coordinate ascent from ``start`` (flat resolved settings).

    Each candidate is asked for as a COMPARE :class:`Request` (the incumbent = start + accepted changes, plus the
    candidate's change: one, or an enabling change and then one); :class:`BudgetSpent` thrown in for it ends the
    climb. ``confirm``: an accepted candidate is asked for once more (AGAIN), with other runs: its band is the one
    the ladder claims (False: no claim is written). ``on_step`` hears of each step as it is decided."""
    best, steps, accepted = dict(start), [], []
    ended: set[str] = set()
    tried: set[str] = set()
    refit: dict[str, Any] = {}  # axis -> the value that ran out of memory, tried next with the axis's fits_with
    pass_ = 0
    while True:
        pass_ += 1
        changed = False
        for axis in axes:
            while axis.name not in ended:
                enabling = (axis.fits_with,) if axis.name in refit else ()
                try:  # the batch's values may need a search for the largest that fits (Facts.largest_batch)
                    value = refit.pop(axis.name) if enabling else _untried(axis, best, facts, tried)
                except BudgetSpent as exc:
                    return ClimbResult(start, best, steps, f"budget spent: {exc}")
                if value is _NONE:
                    break
                tried.add(_tried_key(best, axis.key, value))
                step = Step(len(steps) + 1, pass_, axis.name, axis.key, value, best[axis.key], NOT_RUN,
                            enabling=enabling)
                step, stop = yield from _step(step, list(accepted), confirm, noise, min_effect)
                steps.append(step)
                _tell(on_step, step)
                if step.outcome == ACCEPTED:
                    best.update(step.changes)
                    accepted.extend(step.changes)
                    changed = True
                if stop:
                    return ClimbResult(start, best, steps, stop)
                if step.outcome == ACCEPTED:
                    continue
                if step.outcome == OOM and axis.ends_on_oom and not enabling and _can_fit(axis, best):
                    refit[axis.name] = value
                elif step.outcome == SKIPPED or (step.outcome == OOM and axis.ends_on_oom) or enabling:
                    ended.add(axis.name)
        if not changed:
            return ClimbResult(start, best, steps, f"pass {pass_} changed nothing")


def _step(step: Step, accepted: list, confirm: bool, noise: noise_model.Noise,
          min_effect: float) -> Generator[Request, Measured, tuple[Step, str]]:
    """One candidate measured, decided and (accepted) measured again; why the climb must stop ("": go on)."""
    try:
        m = yield Request(COMPARE, accepted, step.changes, step.step)
    except BudgetSpent as exc:
        return dataclasses.replace(step, why=str(exc)), f"budget spent: {exc}"
    d = decide(m, noise, min_effect)
    step = dataclasses.replace(step, outcome=d.outcome, ratio=d.ratio, why=d.why, cached=m.cached,
                               runs=(m.candidate.n, m.incumbent.n), parts=_parts(d, m, noise))
    if m.incumbent_status != "ok":  # it ran ok before: the machine or the settings broke, not the knob
        return step, f"the incumbent did not run ok at step {step.step}"
    if d.outcome != ACCEPTED or not confirm:
        return step, ""
    try:
        again = yield Request(AGAIN, accepted, step.changes, step.step)
    except BudgetSpent as exc:
        return (dataclasses.replace(step, why=step.why + "; not measured again (budget spent): kept only if "
                                    "the start and the best side by side show it faster"), f"budget spent: {exc}")
    if again.candidate_status != "ok" or again.incumbent_status != "ok" or again.busy or not again.candidate.n:
        why = again.busy and f"machine busy ({again.busy})" or again.reason or again.candidate_status
        return dataclasses.replace(step, outcome=BUSY if again.busy else REJECTED,
                                   why=f"{step.why}; measured again: {why}: not kept"), ""
    ratios = paired_ratios(again, noise)
    confirmed = ratios[-1] if not math.isnan(ratios[-1].low) else None
    said = f"{step.why}; measured again: {band_text(ratios[-1])}"
    if confirmed is None or confirmed.low <= 1:  # the accepting runs were the lucky ones: not kept
        return dataclasses.replace(step, outcome=REJECTED, confirmed=confirmed,
                                   why=f"{said}: not faster beyond noise this time, not kept"), ""
    return dataclasses.replace(step, confirmed=confirmed, confirmed_parts=tuple(ratios[:-1]), why=said), ""


def finish(result: ClimbResult, noise: noise_model.Noise) -> Climbing:
    """The start and the best measured side by side (a FINAL request); what the ladder and the best command keep:
    every accepted change when the best is faster beyond noise, none when it is slower beyond noise, and otherwise
    (no verdict, or the check could not run) only the changes whose runs measured again held (``Step.confirmed``)."""
    if not result.accepted:
        return result
    unheld = tuple(s.step for s in result.accepted if s.confirmed is None)
    changes = tuple(c for s in result.accepted for c in s.changes)
    try:
        m = yield Request(FINAL, [], changes, len(result.steps) + 1)
    except BudgetSpent as exc:
        return _ended(result, None, f"not measured ({exc})", unheld)
    if m.candidate_status != "ok" or m.incumbent_status != "ok" or m.busy or not m.candidate.n or not m.incumbent.n:
        why = m.busy and f"machine busy ({m.busy})" or m.reason or m.candidate_status
        return _ended(result, None, f"no verdict ({why})", unheld)
    r = paired_ratios(m, noise)[-1]
    if math.isnan(r.low):  # one run a side and no calibration
        return _ended(result, None, f"no verdict ({band_text(r)})", unheld)
    if r.low > 1:
        return _ended(result, r, f"{band_text(r)}: faster beyond noise", ())
    if r.high < 1:
        return _ended(result, r, f"{band_text(r)}: slower beyond noise", tuple(s.step for s in result.accepted))
    return _ended(result, r, f"{band_text(r)}: within noise", unheld)


def _ended(result: ClimbResult, r: Ratio | None, said: str, dropped: tuple[int, ...]) -> ClimbResult:
    best = dict(result.start)
    for s in result.accepted:
        if s.step not in dropped:
            best.update(s.changes)
    kept = len(result.accepted) - len(dropped)
    what = ("every accepted change is kept" if not dropped else "the start is kept" if not kept else
            f"only the {kept} change(s) that held when measured again are kept")
    return dataclasses.replace(result, best=best, final=r, dropped=dropped,
                               final_why=f"the start and the best side by side: {said}; {what}")


_NONE = object()


def _can_fit(axis: Axis, settings: dict) -> bool:
    """The axis has a change that may fit what ran out of memory, and the incumbent does not have it yet."""
    return axis.fits_with is not None and settings.get(axis.fits_with[0]) != axis.fits_with[1]


def _parts(d: Decision, m: Measured, noise: noise_model.Noise) -> tuple:
    """An accepted two-change candidate: the enabling change's ratio, then the main change's."""
    if d.outcome != ACCEPTED or m.enabled is None or not m.enabled.n:
        return ()
    return tuple(paired_ratios(m, noise)[:-1])


def _tell(on_step, step: Step) -> None:
    if on_step is not None:
        on_step(step)


def _tried_key(settings: dict, key: str, value: Any) -> str:
    return json.dumps([settings, key, value], sort_keys=True, default=str)


def _untried(axis: Axis, settings: dict, facts: Facts, tried: set[str]):
    for value in axis.values(settings, facts):
        if _tried_key(settings, axis.key, value) not in tried:
            return value
    return _NONE
