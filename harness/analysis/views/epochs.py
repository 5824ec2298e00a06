"""An epoch boundary's cost, and a change's speedup at the guide's epoch length.

A knob that acts at an epoch boundary (persistent loader workers: no worker restart when a new epoch begins)
is measured on short epochs (20 steps at full size, 5 on a CPU), so that a window of 50 steps holds several
boundaries. The guides' epochs are far longer (the SEResNet speech guide's holds 10,000 samples, 313 steps of
32; the A100 guide's 4,000 steps), so the boundary's cost weighs 15-200x more per step in the window than in
the guide's training, and a speedup measured there overstates the guide's.

This module reads from each run's per-step times (no new measurement): the steady step (the mean step of the later
half of its epochs, in whole waves of the loader's workers, none running a validation pass) and an epoch
boundary's cost, the excess of a whole epoch over as many steady steps (at least 0), averaged over the whole
epochs in the window. A
worker restart costs more than the epoch's first step: the first batch waits for the workers to start, and the
queue they refill spreads the wait over the next steps; counting only the first step charged the rest to every
step of the guide's long epoch (docs/statistics.md: the simulation). It then derives the run's throughput at an
epoch of the guide's length: ``samples_a_step x L / (L x step + boundary)``. A claim with ``component: epoch``
and ``epoch_samples: N`` is judged on that derived throughput (a record's ``claim_component`` is ``epoch:N``) with
the sweep's rung x round model (``harness.analysis.views.components``). Validation passes are left out of both
sides (a claim about them is judged on its own), except their loader's worker starts: a guide's epoch holds its
validation passes, whose loader starts its workers again every pass unless they are persistent, so each epoch is
charged ``every / val_every`` passes' starts of ``val.num_workers`` workers at the cost a worker of the training
loader's measured start (``boundary_ms / num_workers``). Plain Python.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from harness.analysis.stats import speedup

PREFIX = "epoch:"
SECONDS_PREFIX = "epoch_s:"  # a guide that gives its epoch in time (DETR's "~15 minutes per epoch"): S seconds


@dataclass(frozen=True)
class EpochCost:
    """One run's steps split at its epoch boundaries."""

    samples_per_step: float
    step_ms: float  # the mean steady step: the later half of an epoch, no validation pass
    boundary_ms: float  # what a whole epoch costs beyond as many steady steps (>= 0)
    epoch_steps: int  # the measured epoch's length in steps
    boundaries: int  # how many whole epochs the window held
    val_start_ms: float = 0.0  # an epoch's validation passes' worker starts (0: none, or persistent workers)

    def samples_per_s(self, epoch_samples: float) -> float:
        """Throughput at an epoch of ``epoch_samples`` (one boundary's cost and its validation starts an epoch)."""
        steps = max(epoch_samples / self.samples_per_step, 1.0)
        return (1000.0 * self.samples_per_step * steps
                / (steps * self.step_ms + self.boundary_ms + self.val_start_ms))


def component(epoch_samples: int) -> str:
    """A record's ``claim_component`` for a claim judged at an epoch of ``epoch_samples``."""
    return f"{PREFIX}{int(epoch_samples)}"


def epoch_samples(component_name: str) -> int | None:
    """The guide's epoch length in samples of an ``epoch:N`` component (None for any other component)."""
    if not isinstance(component_name, str) or not component_name.startswith(PREFIX):
        return None
    try:
        value = int(component_name[len(PREFIX):])
    except ValueError:
        return None
    return value if value > 0 else None


def epoch_seconds(component_name: str) -> int | None:
    """The guide's epoch in seconds of its baseline of an ``epoch_s:S`` component (None for any other component)."""
    if not isinstance(component_name, str) or not component_name.startswith(SECONDS_PREFIX):
        return None
    value = component_name[len(SECONDS_PREFIX):]
    return int(value) if value.isdigit() and int(value) > 0 else None


def in_samples(component_name: str, baseline: list[EpochCost]) -> str:
    """``epoch_s:S`` as ``epoch:N``: N the samples the ladder's baseline makes in S seconds at its steady pace here
    (the median of its runs'), so that an epoch lasts as long at the baseline here as the guide's did at its own and
    a boundary weighs on it as much; any other component as it is, and ``epoch_s:S`` too without a baseline cost."""
    seconds = epoch_seconds(component_name)
    if seconds is None or not baseline:
        return component_name
    pace = speedup.median([1000.0 * c.samples_per_step / c.step_ms for c in baseline if c.step_ms > 0])
    return component(max(1, round(seconds * pace)))


def label(component_name: str) -> str:
    """How the table names the part a claim is about: ``epoch of 10,000 samples`` for ``epoch:10000``."""
    n, seconds = epoch_samples(component_name), epoch_seconds(component_name)
    if seconds is not None:
        return f"per epoch of {seconds:,} s at the baseline's pace"
    return component_name if n is None else f"per epoch of {n:,} samples"


def cost_of(run) -> EpochCost | None:
    """A record's epoch boundaries and their cost (None without per-step times, an epoch length or a whole epoch)."""
    try:
        config = json.loads(run.get("config_json") or "{}")
        data = config.get("data") or {}
        every, workers = int(data.get("epoch_steps") or 0), int(data.get("num_workers") or 0)
        val = config.get("val") or {}
        val_every = int(val.get("every_n_steps") or 0)
        # kept workers (persistent: the validation loader's are when the training loader's are) start once, not a pass
        val_workers = 0 if data.get("persistent_workers") else int(val.get("num_workers") or 0)
        first, per_step = int(run.get("warmup_steps")), float(run.get("samples_per_step"))
    except (TypeError, ValueError):
        return None
    steps = speedup.floats(run.get("step_ms"))
    if every < 2 or not steps or not per_step > 0:
        return None
    return cost_from_steps(steps, first, every, val_every, per_step, workers, val_workers)


def steady_positions(every: int, workers: int = 0) -> int:
    """How many of an epoch's last steps are steady: its later half, cut to whole waves of the loader's workers
    (in-order workers started together hand over a wave of ``workers`` batches, then wait: a count of steps that
    is not a whole number of waves holds too many or too few of the waits)."""
    half = every // 2
    return workers * (half // workers) if workers >= 2 and half >= workers else half


def cost_from_steps(steps: list[float], first: int, every: int, val_every: int, per_step: float,
                    workers: int = 0, val_workers: int = 0) -> EpochCost | None:
    """The rule of the module docstring on one run's window: ``steps[i]`` is step ``first + i`` (the loader's first
    epoch begins with the first warm-up step), an epoch is ``every`` steps, a validation pass follows every
    ``val_every``-th step (0: none; such a step is neither an epoch's nor a steady one), starting ``val_workers``
    workers (0: none, or kept). None without a whole epoch in the window."""
    later = every - steady_positions(every, workers)  # positions later..every-1 are steady
    epochs_seen: dict[int, list[float]] = {}
    steady = []
    for i, ms in enumerate(steps):
        step = first + i
        if val_every and (step + 1) % val_every == 0:
            continue  # a validation pass ran after this step
        epoch, position = divmod(step, every)
        epochs_seen.setdefault(epoch, []).append(ms)
        if position >= later:
            steady.append(ms)
    whole = [e for e in epochs_seen if e * every >= first and (e + 1) * every <= first + len(steps)]
    if not whole or not steady:
        return None
    base = sum(steady) / len(steady)
    excess = [sum(ms - base for ms in epochs_seen[e]) for e in whole]
    boundary = max(sum(excess) / len(excess), 0.0)
    return EpochCost(per_step, base, boundary, every, len(excess),
                     val_starts_ms(boundary, workers, val_workers, every, val_every))


def val_starts_ms(boundary_ms: float, workers: int, val_workers: int, every: int, val_every: int) -> float:
    """What an epoch of ``every`` steps pays for its validation loader's worker starts: ``every / val_every`` passes,
    each starting ``val_workers`` workers at the training loader's measured start a worker (``boundary_ms /
    workers``); 0 without validation, without validation workers, or without a training start to measure it by."""
    if val_every <= 0 or val_workers <= 0 or workers <= 0:
        return 0.0
    return boundary_ms / workers * val_workers * every / val_every


def derived(costs: dict[int, EpochCost], epoch_samples_: int) -> dict[int, float]:
    """``{round: samples/s at the guide's epoch}`` of one rung's runs (``costs``: round -> its run's cost)."""
    return {r: c.samples_per_s(epoch_samples_) for r, c in costs.items()}


def reading(what: str, new: list[EpochCost], old: list[EpochCost], epoch_samples_: int,
            measured: speedup.Ratio | None) -> str:
    """One line under the table: how a claim's speedup at the guide's epoch was derived ("" without one)."""
    if measured is None or not new or not old:
        return ""
    steps = round(epoch_samples_ / new[0].samples_per_step)
    ms_old = speedup.median([c.boundary_ms for c in old])
    ms_new = speedup.median([c.boundary_ms for c in new])
    val_old = speedup.median([c.val_start_ms for c in old])
    val_new = speedup.median([c.val_start_ms for c in new])
    val = (f", plus its validation loader's worker starts, {val_old:.0f} -> {val_new:.0f} ms"
           if val_old or val_new else "")
    return (f"{what}: at the guide's epoch ({epoch_samples_:,} samples, {steps:,} steps) {measured.value:.2f}x, "
            f"derived from an epoch's excess over its steady steps, {ms_old:.0f} -> {ms_new:.0f} ms{val}, measured "
            f"on epochs of {new[0].epoch_steps} steps.")


