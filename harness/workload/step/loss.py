"""What a step returns, read as a loss once, on its first call, and the reader kept: a scalar tensor; a mapping with
a ``"loss"`` entry (a Hugging Face ``ModelOutput``, a Lightning step's dict); or a mapping of scalar losses, summed
(torchvision's detection models). Anything else is a :class:`StepError` naming the step and what it returned.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable

import torch

from harness.workload.step.interface import StepError

LOSS_FORMS = "a scalar tensor, a mapping with a 'loss' entry, or a mapping of scalar losses (summed)"


def loss_reader(name: str, grad: bool = True) -> Callable[[Any], torch.Tensor]:
    """What reads a step's result as its loss: decided on the first result (and checked there), kept after.
    ``grad``: the loss must require grad (a training step's; a validation step's is computed under no_grad)."""
    chosen: Callable[[Any], torch.Tensor] | None = None

    def read(result: Any) -> torch.Tensor:
        nonlocal chosen
        if chosen is None:
            chosen = reader_for(result, name, grad)
        return chosen(result)

    return read


def reader_for(result: Any, name: str, grad: bool = True) -> Callable[[Any], torch.Tensor]:
    """How to read the loss from results like ``result``; StepError when it holds none."""
    if isinstance(result, torch.Tensor):
        check_loss(result, name, "", grad)
        return itself
    if isinstance(result, Mapping) and "loss" in result:
        check_loss(result["loss"], name, "['loss']", grad)
        return _its_loss
    if isinstance(result, Mapping) and result:
        for key, value in result.items():
            if not isinstance(value, torch.Tensor) or value.dim() != 0:
                raise StepError(f"{name} returned a mapping with no 'loss' entry, and its {key!r} is "
                                f"{_what(value)}, not a scalar loss: return {LOSS_FORMS}")
            check_loss(value, name, f"[{key!r}]", grad)
        return _summed
    raise StepError(f"{name} returned {_what(result)}: return the loss, {LOSS_FORMS}")


def check_loss(loss: Any, name: str, where: str, grad: bool = True) -> None:
    """A loss the harness can step on: a scalar tensor that requires grad (``grad``; any scalar tensor without)."""
    if not isinstance(loss, torch.Tensor):
        raise StepError(f"{name} returned a loss{where} that is {_what(loss)}: return {LOSS_FORMS}")
    if loss.dim() != 0:
        raise StepError(f"{name} returned a loss{where} of shape {list(loss.shape)}, not a scalar: reduce it "
                        "(.mean() or .sum()) in the step")
    if grad and not loss.requires_grad:
        raise StepError(f"{name} returned a loss{where} that does not require grad (computed under no_grad, or "
                        "detached): the harness calls backward on it")


def itself(result):
    """The result as the loss (a scalar tensor; and the identity, where a batch needs no moving)."""
    return result


def _its_loss(result):
    return result["loss"]


def _summed(result):
    return sum(result.values())


def _what(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {list(value.shape)}"
    return f"a {type(value).__name__}"
