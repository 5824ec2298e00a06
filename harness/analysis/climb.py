"""``climb``'s decisions: greedy coordinate ascent over training settings, without measuring anything.

Plain Python (no torch, no Hydra), so the whole climb can be driven by simulated measurements in tests;
``harness.commands.climb`` supplies the real ones (fresh processes, interleaved with the incumbent).

The climb, and why it is built this way:
  * **One knob at a time, from the user's settings.** Every candidate changes one setting of the
    incumbent (the best settings so far), so an accepted step is a ladder rung and the result re-runs as
    a ladder (``sweep +ladder=...``).
  * **Ordered by expected gain** (:data:`AXES`, priors per device: the guides' claims on GPUs, this
    repository's measurements on a CPU), so a short budget is spent on the likely wins first.
  * **Accepted only when faster beyond noise AND by a minimum effect** (pyperf's rule: significant is not
    enough, 0.5% is not worth a setting): the 95% band of candidate / incumbent, from the one noise model
    (``harness.analysis.noise_model``), must exclude 1x, and the ratio must reach ``1 + min_effect``.
  * **Ordinal axes walk while they win**: the batch doubles while each doubling is accepted; an
    out-of-memory ends the batch axis for the rest of the climb (a larger batch cannot fit either); the
    largest batch that ran and won is kept. Loader workers grow the same way, up to the usable CPUs.
  * **Passes** repeat over every axis until one pass accepts nothing (settings interact: more workers
    may pay only at a bigger batch) or the budget is spent. A knob that cannot act on this device
    (TF32 on a CPU) is skipped once and not proposed again.
  * **Settings that change the model** (width, patch size, deep supervision) are not in the space: a
    faster but different model is not a speed-up of this training.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, List, Optional

from harness.registry import unknown_choice

if TYPE_CHECKING:  # the noise model pulls in scipy: imported where a decision is made, not by every command
    from harness.analysis import noise_model
    from harness.analysis.stats import Ratio

ACCEPTED, REJECTED, SKIPPED, OOM, FAILED, NOT_RUN = "accepted", "rejected", "skipped", "oom", "failed", "not run"
COMPILE_PRIOR = 3.0  # a first compiled run is assumed to take this many times the longest run so far
MIN_TRIAL_S = 5.0  # never start a measurement with less budget left than this


@dataclass
class ClimbConfig:
    """The ``climb.*`` settings (registered with Hydra at the edge, in ``harness.commands.hydra_edge``)."""

    budget_min: float = 30.0  # wall-clock minutes for the whole climb; no trial starts that would not finish
    repeats: int = 2  # runs per side (candidate and incumbent), interleaved, each a fresh process
    min_effect: float = 0.03  # an accepted change is at least this much faster (and faster beyond noise)
    knobs: Optional[List[str]] = None  # axis names to climb (None: every axis of the default space)


def check(cfg: ClimbConfig) -> None:
    """ValueError naming the bad ``climb.*`` value and what is valid."""
    if not (isinstance(cfg.budget_min, (int, float)) and cfg.budget_min > 0):
        raise ValueError(f"climb.budget_min={cfg.budget_min!r} must be a positive number of minutes")
    if not (isinstance(cfg.repeats, int) and cfg.repeats >= 1):
        raise ValueError(f"climb.repeats={cfg.repeats!r} must be a whole number >= 1 (runs per side)")
    if not (0 <= cfg.min_effect < 1):
        raise ValueError(f"climb.min_effect={cfg.min_effect!r} must be a fraction in [0, 1), e.g. 0.03 for 3%")
    for name in cfg.knobs or ():
        if name not in AXES_BY_NAME:
            raise unknown_choice("climb.knobs entry", name, AXES_BY_NAME)


# ------------------------------------------------------------------------------------------
# the knob space


@dataclass(frozen=True)
class Facts:
    """What the climb knows about where it runs."""

    device: str  # "cpu" or "cuda"
    usable_cpus: int


@dataclass(frozen=True)
class Axis:
    """One setting the climb may change, the values it tries from an incumbent, and its expected gain."""

    name: str
    key: str
    gain_cpu: float  # expected speed-up (x), for the order: this repository's CPU measurements, or guesses
    gain_cuda: float  # the guides' claims (phase2: precision 2-3x, batch 1.3-1.5x, workers 1.5-2x, ...)
    values: Callable[[dict, Facts], list]  # candidate values from the incumbent's settings, best first
    ends_on_oom: bool = False
    fits_with: tuple[str, Any] | None = None  # a change that may make a value that ran out of memory fit

    def gain(self, device: str) -> float:
        return self.gain_cuda if device == "cuda" else self.gain_cpu


def _precision(s: dict, f: Facts) -> list:
    order = ("bf16-mixed", "16-mixed", "32") if f.device == "cuda" else ("bf16-mixed", "32")
    return [p for p in order if p != s["precision"]]


def _double_batch(s: dict, f: Facts) -> list:
    return [2 * int(s["batch_size"])]


def _compile(s: dict, f: Facts) -> list:
    modes = ("default", "max-autotune", "reduce-overhead", "off") if f.device == "cuda" else \
        ("default", "max-autotune", "off")
    return [m for m in modes if m != s["compile"] and not (m == "off" and s["compile"] == "off")]


def _workers(s: dict, f: Facts) -> list:
    now = int(s["data.num_workers"])
    more = min(max(1, 2 * now), f.usable_cpus)  # 0, 1, 2, 4, ... up to the CPUs this process may use
    return [more] if more > now else []


def _prefetch(s: dict, f: Facts) -> list:
    now = s["data.prefetch_factor"] or 2  # PyTorch's default with workers
    return [2 * now] if s["data.num_workers"] > 0 and 2 * now <= 16 else []


def _persistent(s: dict, f: Facts) -> list:
    return [True] if s["data.num_workers"] > 0 and not s["data.persistent_workers"] else []


def _switch_on(key: str) -> Callable[[dict, Facts], list]:
    def values(s: dict, f: Facts) -> list:
        return [] if s[key] is True else [True]

    return values


def _fused(s: dict, f: Facts) -> list:
    return [] if s["optimizer.fused"] is True or s["optimizer.foreach"] is True else [True]


AXES = (
    Axis("precision", "precision", 1.10, 2.0, _precision),
    Axis("batch", "batch_size", 1.05, 1.3, _double_batch, ends_on_oom=True,
         fits_with=("activation_checkpointing", True)),  # checkpointing: only to fit a larger batch
    Axis("compile", "compile", 1.05, 1.3, _compile),  # on a CPU a first compile also costs a minute or more
    Axis("channels_last", "channels_last", 1.15, 1.2, _switch_on("channels_last")),
    Axis("workers", "data.num_workers", 1.05, 1.5, _workers),
    Axis("tf32", "tf32", 1.0, 1.3, _switch_on("tf32")),
    Axis("cudnn_benchmark", "cudnn_benchmark", 1.0, 1.1, _switch_on("cudnn_benchmark")),
    Axis("fused_optimizer", "optimizer.fused", 1.02, 1.05, _fused),
    Axis("pin_memory", "data.pin_memory", 1.0, 1.05, _switch_on("data.pin_memory")),
    Axis("prefetch", "data.prefetch_factor", 1.01, 1.02, _prefetch),
    Axis("persistent_workers", "data.persistent_workers", 1.01, 1.02, _persistent),
)
AXES_BY_NAME = {a.name: a for a in AXES}


def space(device: str, knobs: list[str] | None = None) -> list[Axis]:
    """The axes to climb, by expected gain on this device (largest first; ties keep the table's order)."""
    chosen = [AXES_BY_NAME[n] for n in knobs] if knobs else list(AXES)
    return sorted(chosen, key=lambda a: -a.gain(device))


# ------------------------------------------------------------------------------------------
# one comparison and its decision


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
    from harness.analysis import noise_model

    r = noise_model.ratio(m.candidate, m.incumbent, noise)
    if r.low > 1 and r.value >= 1 + min_effect:
        return Decision(ACCEPTED, r, f"faster beyond noise and by >= {min_effect:.0%}")
    if r.low > 1:
        return Decision(REJECTED, r, f"faster beyond noise, but by less than {min_effect:.0%}")
    if r.high < 1:
        return Decision(REJECTED, r, "slower beyond noise")
    return Decision(REJECTED, r, "within noise")


# ------------------------------------------------------------------------------------------
# the budget


@dataclass
class Budget:
    """Wall-clock budget; estimates a run from the runs measured so far (cached runs cost nothing)."""

    seconds: float
    start: float
    durations: dict[str, float] = field(default_factory=dict)  # settings key -> seconds of its last fresh run
    compiled: bool = False  # a compiled run has been measured (its time is among the durations)

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
        if left < MIN_TRIAL_S or (guess is not None and guess > left):
            about = f"~{guess:.0f} s" if guess is not None else "its run"
            return f"the next run ({about}) would not finish in the {max(left, 0):.0f} s of budget left"
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

    @property
    def changes(self) -> tuple[tuple[str, Any], ...]:
        return self.enabling + ((self.key, self.value),)


@dataclass
class ClimbResult:
    start: dict
    best: dict
    steps: list[Step]
    stopped: str  # why the climb ended

    @property
    def accepted(self) -> list[Step]:
        return [s for s in self.steps if s.outcome == ACCEPTED]


Change = tuple[str, Any]
Measure = Callable[[list[Change], tuple[Change, ...], int], Measured]


def ascend(start: dict, axes: list[Axis], facts: Facts, measure: Measure, noise: noise_model.Noise,
           min_effect: float, on_step: Callable[[Step], Any] | None = None) -> ClimbResult:
    """Greedy coordinate ascent from ``start`` (flat resolved settings).

    ``measure(accepted_changes, candidate_changes, step)`` measures the candidate (the incumbent = start +
    accepted changes, plus the candidate's change: one, or an enabling change and then one) against the
    incumbent and returns a :class:`Measured`; it raises :class:`BudgetSpent` when the budget cannot pay
    for it, which ends the climb. ``on_step`` hears of each step as it is decided."""
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
                value = refit.pop(axis.name) if enabling else _untried(axis, best, facts, tried)
                if value is _NONE:
                    break
                tried.add(_tried_key(best, axis.key, value))
                step = Step(len(steps) + 1, pass_, axis.name, axis.key, value, best[axis.key], NOT_RUN,
                            enabling=enabling)
                try:
                    m = measure(list(accepted), step.changes, step.step)
                except BudgetSpent as exc:
                    steps.append(dataclasses.replace(step, why=str(exc)))
                    _tell(on_step, steps[-1])
                    return ClimbResult(start, best, steps, f"budget spent: {exc}")
                d = decide(m, noise, min_effect)
                steps.append(dataclasses.replace(step, outcome=d.outcome, ratio=d.ratio, why=d.why, cached=m.cached,
                                                 runs=(m.candidate.n, m.incumbent.n), parts=_parts(d, m, noise)))
                _tell(on_step, steps[-1])
                if m.incumbent_status != "ok":  # it ran ok before: the machine or the settings broke, not the knob
                    return ClimbResult(start, best, steps, f"the incumbent did not run ok at step {step.step}")
                if d.outcome == ACCEPTED:
                    best.update(step.changes)
                    accepted.extend(step.changes)
                    changed = True
                elif d.outcome == OOM and axis.ends_on_oom and not enabling and _can_fit(axis, best):
                    refit[axis.name] = value
                elif d.outcome == SKIPPED or (d.outcome == OOM and axis.ends_on_oom) or enabling:
                    ended.add(axis.name)
        if not changed:
            return ClimbResult(start, best, steps, f"pass {pass_} changed nothing")


_NONE = object()


def _can_fit(axis: Axis, settings: dict) -> bool:
    """The axis has a change that may fit what ran out of memory, and the incumbent does not have it yet."""
    return axis.fits_with is not None and settings.get(axis.fits_with[0]) != axis.fits_with[1]


def _parts(d: Decision, m: Measured, noise: noise_model.Noise) -> tuple:
    """An accepted two-change candidate: the enabling change's ratio, then the main change's (ladder claims)."""
    if d.outcome != ACCEPTED or m.enabled is None or not m.enabled.n:
        return ()
    from harness.analysis import noise_model

    return (noise_model.ratio(m.enabled, m.incumbent, noise), noise_model.ratio(m.candidate, m.enabled, noise))


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


# ------------------------------------------------------------------------------------------
# what the climb writes and prints


def training_note(key: str, before: Any, after: Any) -> str:
    """What an accepted change does to the training itself ("" when it only changes speed)."""
    if key == "batch_size":
        k = after / before
        return (f"batch_size {before} -> {after}: each step sees {k:g}x the samples; scale the learning rate "
                f"(linear rule: lr x {k:g}, with warm-up) and check that the model still converges")
    if key == "precision" and after != "32":
        return (f"precision={after}: lower-precision arithmetic; compare the loss curve and final accuracy "
                "with fp32 before adopting it")
    if key == "tf32" and after:
        return "tf32=true: matmuls and convolutions in TF32 (10-bit mantissa); check the accuracy"
    return ""


def format_value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return "null" if value is None else str(value)


def ratio_text(r: Ratio | None) -> str:
    return "-" if r is None else f"{r.value:.2f}x [{r.low:.2f}-{r.high:.2f}]"


TRAJECTORY_HEADER = ("step", "pass", "knob", "value", "vs incumbent [95% band]", "runs", "decision", "why")


def trajectory_table(result: ClimbResult) -> str:
    """The trajectory as a markdown table: one row per candidate tried."""
    lines = ["| " + " | ".join(TRAJECTORY_HEADER) + " |", "|" + "---|" * len(TRAJECTORY_HEADER)]
    for s in result.steps:
        runs = f"{s.runs[0]}+{s.runs[1]}" + (f" ({s.cached} cached)" if s.cached else "")
        value = f"{format_value(s.before)} -> {format_value(s.value)}" + "".join(
            f" (with {k}={format_value(v)})" for k, v in s.enabling)
        cells = (str(s.step), str(s.pass_), s.key, value,
                 ratio_text(s.ratio), runs, f"**{s.outcome}**" if s.outcome == ACCEPTED else s.outcome, s.why)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def total(result: ClimbResult) -> tuple[float, float, float] | None:
    """The product of the accepted steps' ratios and band ends (None when nothing was accepted).

    The start and the best settings were never measured side by side, so this is what the steps say
    together; its range is wider than a direct comparison's band would be."""
    if not result.accepted:
        return None
    prod = [math.prod(getattr(s.ratio, f) for s in result.accepted) for f in ("value", "low", "high")]
    return prod[0], prod[1], prod[2]


def ladder_file(result: ClimbResult, workload: str, base: dict, climb_id: str, hardware: str) -> dict:
    """The best settings as a ladder (baseline = the start, one rung per accepted change, claims = what
    was measured), as the mapping ``harness.sweeps.ladder.parse`` reads."""
    rungs = []
    for s in result.accepted:
        ratios = s.parts if len(s.parts) == len(s.changes) else (None,) * len(s.enabling) + (s.ratio,)
        for (key, value), r, against in zip(s.changes, ratios, ("the incumbent",) * len(s.enabling) + (
                "the rung before" if s.enabling else "the incumbent",)):
            rung: dict[str, Any] = {"set": {key: value}}
            if r is not None:
                rung["claim"] = [round(r.low, 3), round(r.high, 3)]
                rung["source"] = (f"climb {climb_id} step {s.step}: measured {r.value:.3f}x [{r.low:.3f}-{r.high:.3f}] "
                                  f"against {against}, {s.runs[0]}+{s.runs[1]} runs")
            if (key, value) in s.enabling:
                rung["note"] = f"only to fit {s.key}={format_value(s.value)}, which ran out of memory without it"
            rungs.append(rung)
    out: dict[str, Any] = {
        "description": f"Fastest settings `climb` found on {hardware}: {len(rungs)} accepted change(s)",
        "guide": f"measured by python -m harness climb (sweep {climb_id})",
        "workload": workload,
        "base": dict(base),
        "rungs": rungs,
    }
    notes = [n for n in (training_note(s.key, s.before, s.value) for s in result.accepted) if n]
    t = total(result)
    if t is not None:  # not a total claim: the start and the end were never measured side by side
        notes.append(f"the accepted steps multiply to {t[0]:.2f}x (bands {t[1]:.2f}-{t[2]:.2f}x); this sweep's "
                     "x baseline measures the whole climb directly")
    if notes:
        out["notes"] = notes
    return out


def command_line(workload: str, settings: dict) -> str:
    """``python -m harness run ...`` with ``settings`` (flat key -> value) as overrides."""
    parts = [f"workload={workload}"] + [f"{k}={_override_value(v)}" for k, v in settings.items()]
    return "python -m harness run " + " ".join(parts)


def _override_value(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(str(v) for v in value) + "]"
    return format_value(value)
