"""An epoch boundary's cost, and a change's speedup at the guide's epoch length.

A knob that acts at an epoch boundary (persistent loader workers: no worker restart when a new epoch begins)
is measured on short epochs (20 steps at full size, 5 on a CPU), so that a window of 50 steps holds several
boundaries. The guides' epochs are far longer (the SEResNet speech guide's holds 10,000 samples, 313 steps of
32; the A100 guide's 4,000 steps), so the boundary's cost weighs 15-200x more per step in the window than in
the guide's training, and a speedup measured there overstates the guide's.

This module reads from each run's per-step times (no new measurement): the mean step that starts no epoch and
runs no validation pass, and an epoch boundary's extra time (the mean first step of an epoch over that, at
least 0: the worker start and the first batch a new iterator waits for), then derives the run's throughput at an
epoch of the guide's length: ``samples_a_step x L / (L x step + boundary)``. A claim with ``component:
epoch`` and ``epoch_samples: N`` is judged on that derived throughput (a record's ``claim_component`` is
``epoch:N``). Validation passes are left out of both sides: a claim about them is judged on its own. Plain Python.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from harness.analysis.stats import noise_model, speedup

PREFIX = "epoch:"


@dataclass(frozen=True)
class EpochCost:
    """One run's steps split at its epoch boundaries."""

    samples_per_step: float
    step_ms: float  # the mean step that starts no epoch and runs no validation pass
    boundary_ms: float  # what a step that starts an epoch costs beyond that (>= 0)
    epoch_steps: int  # the measured epoch's length in steps
    boundaries: int  # how many epoch starts the window held

    def samples_per_s(self, epoch_samples: float) -> float:
        """Throughput at an epoch of ``epoch_samples`` (one boundary's cost an epoch)."""
        steps = max(epoch_samples / self.samples_per_step, 1.0)
        return 1000.0 * self.samples_per_step * steps / (steps * self.step_ms + self.boundary_ms)


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


def label(component_name: str) -> str:
    """How the table names the part a claim is about: ``epoch of 10,000 samples`` for ``epoch:10000``."""
    n = epoch_samples(component_name)
    return component_name if n is None else f"per epoch of {n:,} samples"


def cost_of(run) -> EpochCost | None:
    """A record's epoch boundaries and their cost (None without per-step times, an epoch length or a boundary)."""
    try:
        config = json.loads(run.get("config_json") or "{}")
        every = int((config.get("data") or {}).get("epoch_steps") or 0)
        val_every = int((config.get("val") or {}).get("every_n_steps") or 0)
        first, per_step = int(run.get("warmup_steps")), float(run.get("samples_per_step"))
    except (TypeError, ValueError):
        return None
    steps = speedup.floats(run.get("step_ms"))
    if every <= 0 or not steps or not per_step > 0:
        return None
    starts, plain = [], []
    for i, ms in enumerate(steps):
        step = first + i  # the loader's first epoch begins with the first warm-up step
        if val_every and (step + 1) % val_every == 0:
            continue  # a validation pass ran after this step
        (starts if step % every == 0 else plain).append(ms)
    if not starts or not plain:
        return None
    base = sum(plain) / len(plain)
    boundary = max(sum(starts) / len(starts) - base, 0.0)
    return EpochCost(per_step, base, boundary, every, len(starts))


def runs_at(costs: list[EpochCost], epoch_samples_: int) -> noise_model.Runs | None:
    """The runs' throughputs at the guide's epoch length, as one side of a comparison."""
    values = [c.samples_per_s(epoch_samples_) for c in costs]
    return noise_model.Runs(values) if values else None


def verdict(new: list[EpochCost], old: list[EpochCost], epoch_samples_: int, low: float,
            high: float) -> tuple[speedup.Ratio | None, str]:
    """(the speedup at the guide's epoch length, the verdict on it); :func:`reading` says how it was derived."""
    a, b = runs_at(new, epoch_samples_), runs_at(old, epoch_samples_)
    if a is None or b is None:
        return None, "not measured: no epoch boundary inside both measured windows"
    measured = noise_model.ratio(a, b)
    return measured, f"{speedup.verdict(measured, low, high)} (at the guide's epoch {measured.value:.2f}x)"


def reading(what: str, new: list[EpochCost], old: list[EpochCost], epoch_samples_: int,
            measured: speedup.Ratio | None) -> str:
    """One line under the table: how a claim's speedup at the guide's epoch was derived ("" without one)."""
    if measured is None or not new or not old:
        return ""
    steps = round(epoch_samples_ / new[0].samples_per_step)
    ms_old = speedup.median([c.boundary_ms for c in old])
    ms_new = speedup.median([c.boundary_ms for c in new])
    return (f"{what}: at the guide's epoch ({epoch_samples_:,} samples, {steps:,} steps) {measured.value:.2f}x, "
            f"derived from an epoch start's cost over a step, {ms_old:.0f} -> {ms_new:.0f} ms, measured on epochs of "
            f"{new[0].epoch_steps} steps.")


