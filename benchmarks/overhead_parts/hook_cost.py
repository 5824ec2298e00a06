"""The step hook's own cost: a user's step (``workload.step``, a function ``step(model, batch) -> loss``) that
computes exactly what the default step does, ``loss_fn(model(x), y)``, against the default step itself, both
through the harness's measuring loop (``train_and_measure``) on the tiny model, alternating in this one process.
What differs is the hook's path alone: the batch handed over whole, the step called, its result read as a loss."""

from __future__ import annotations

import statistics

from .common import config
from .inproc import TINY, alternated, measured_step_s

# the user's step, named as a workload names it; its loss is the loss the default step builds for TINY
# (a segmentation target: cross-entropy), given to it as a nested node
HOOK = [("workload.step._target_", f"{__name__}.user_step"), ("workload.step._partial_", True),
        ("workload.step.loss_fn._target_", "torch.nn.CrossEntropyLoss")]


def user_step(model, batch, loss_fn):
    """The default step's computation, written as a user's own step."""
    x, y = batch
    return loss_fn(model(x), y)


def hook_cost(rounds: int, steps: int) -> list[dict[str, float]]:
    """Seconds a step of the hook's side and of the default step's, per round: both through the harness's
    measuring loop on the tiny model, ``steps`` measured steps a side."""
    default = config(TINY + [("measure.steps", steps)])
    hook = config(TINY + HOOK + [("measure.steps", steps)])
    return alternated(rounds, {"hook": lambda: measured_step_s(hook), "default": lambda: measured_step_s(default)})


def differences_us(rounds: list[dict[str, float]]) -> list[float]:
    """Microseconds the hook adds to a step, per round (negative when its side was faster)."""
    return [(r["hook"] - r["default"]) * 1e6 for r in rounds]


def ratios(rounds: list[dict[str, float]]) -> list[float]:
    """The hook's step time over the default step's, per round."""
    return [r["hook"] / r["default"] for r in rounds]


def default_step_us(rounds: list[dict[str, float]]) -> float:
    """The default step's median time, microseconds."""
    return statistics.median(r["default"] for r in rounds) * 1e6
