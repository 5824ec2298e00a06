"""The workload's step run once on the meta device in the parent (no memory, no arithmetic), before any child starts:
a step that returns no loss or a non-scalar one (and, with ``val.every_n_steps``, a validation step: eval mode, no
grad), a LightningModule whose training_step returns None or whose configure_optimizers returns no optimizer, a model
whose output the default loss cannot take (a tuple), a vocabulary smaller than the token ids, a Hugging Face model
handed batches that are not named tensors: each one line, exit 2; the default step handed a dict or a list that is no
(input, target) pair, or a model whose forward wants the targets (a detector), each one line naming ``workload.step``.
Run on the objects ``harness.workload.preflight.resolve`` made once (nothing is built here), where the parent knows
the batch (synthetic data; for the default step, a workload's own dataset's first item,
``harness.workload.first_item``); what the meta device cannot compute is the child's to find."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import torch

from harness.names import target_of
from harness.workload.batches import describe
from harness.workload.step import lightning
from harness.workload.step.huggingface import is_hugging_face
from harness.workload.step.loss import reader_for
from harness.workload.step.interface import StepError


def check(objects) -> list[str]:
    """Check a workload's step on its objects as resolved on the meta device (``harness.workload.preflight.OnMeta``:
    nothing is built here); the notes a run should print (a LightningModule's scheduler that is not stepped).
    ValueError with one line for what cannot be measured."""
    spec, model, own, batch, notes = objects.spec, objects.model, objects.own, objects.batch, []
    if model is None:
        return notes
    if is_hugging_face(model):
        _check_vocabulary(spec, model)
    if own is not None and own.lightning:  # what the meta device or a missing Trainer stops is the child's to report
        name = own.name.removesuffix(": training_step")
        _run(lambda: lightning.first_optimizer(model.configure_optimizers(), name, notes))
    if batch is None:
        return notes
    if own is None:
        _check_default_batch(spec, batch)
    elif own.check_batch is not None:  # a Hugging Face model handed the synthetic tensors' (input, target) pairs
        own.check_batch(batch)
    result = _run(lambda: own.call(model, batch)) if own is not None else _default_forward(spec, model, batch[0])
    if result is not UNKNOWN and own is not None:
        reader_for(result, own.name)
    elif result is not UNKNOWN and not isinstance(result, torch.Tensor) and objects.loss is not None:
        _check_default_loss(spec, objects.loss, result, batch[1])
    if objects.val is not None:
        _check_validation(model, objects.val, batch)
    return notes


DEFAULT_STEP_FIX = ("name a step that takes the batch and returns the loss: workload.step._target_=mypkg.train.step "
                    "(step(model, batch) -> loss; docs/own-training.md)")


def _check_default_batch(spec, batch) -> None:
    """The default step unpacks an ``(input, target)`` pair: a dict, or a list of another length, is refused."""
    if isinstance(batch, Mapping):
        raise StepError(f"workload {spec.name!r} gives batches of named tensors (a dict: {describe(batch)}); the "
                        f"default step takes (input, target) pairs (loss_fn(model(x), y)): {DEFAULT_STEP_FIX}")
    if isinstance(batch, torch.Tensor) or (isinstance(batch, (tuple, list)) and len(batch) != 2):
        what = f"a {type(batch).__name__} of {len(batch)}" if isinstance(batch, (tuple, list)) else "one tensor"
        raise StepError(f"workload {spec.name!r} gives batches that are {what} ({describe(batch)}), not "
                        f"(input, target) pairs, which the default step takes (loss_fn(model(x), y)): "
                        f"{DEFAULT_STEP_FIX}")  # another kind of batch is the child's to report


def _default_forward(spec, model, x) -> Any:
    """The default step's forward, ``model(x)``, on the meta batch; a model whose forward wants the targets (a
    torchvision detector in training mode) is refused naming a step."""
    try:
        return model(x)
    except (StepError, ImportError):
        raise
    except Exception as exc:
        if _takes_targets(model) and "target" in str(exc).lower():
            raise StepError(f"workload.model._target_={target_of(spec.model)!r} wants the targets in its forward "
                            f"(forward(images, targets), as torchvision's detection models do: {str(exc)[:80]}); the "
                            f"default step calls model(x) alone: {DEFAULT_STEP_FIX}") from None
        return UNKNOWN


def _takes_targets(model) -> bool:
    try:
        return "targets" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError, AttributeError):
        return False


def _check_validation(model, val, batch) -> None:
    """The workload's own validation step on the meta batch, as the pass calls it (eval mode, no grad)."""
    model.eval()
    with torch.no_grad():
        result = _run(lambda: val.call(model, batch, 0))
    model.train()
    if result is not UNKNOWN and not (result is None and val.may_return_none):
        reader_for(result, val.name, grad=False)


UNKNOWN = object()  # what the meta device could not compute


def _run(call) -> Any:
    """``call()``'s result; UNKNOWN where the meta device cannot compute it (a value read, an operator it lacks)."""
    try:
        return call()
    except (StepError, ImportError):
        raise
    except Exception:
        return UNKNOWN


def _check_default_loss(spec, loss, out: Any, y) -> None:
    """A model output that is no tensor (a tuple, a dict) handed to the default step's loss: refused when the
    loss cannot take it."""
    try:
        loss(out, y)
    except Exception as exc:
        if "meta" in str(exc).lower() or isinstance(exc, NotImplementedError):
            return
        raise StepError(f"workload.model._target_={spec.model.get('_target_')!r} returns a {type(out).__name__}, "
                        f"which the default step's loss cannot take ({type(exc).__name__}: {str(exc)[:120]}); name "
                        "a step that computes the loss from it: workload.step._target_=mypkg.train.step "
                        "(step(model, batch) -> loss)") from None


def _check_vocabulary(spec, model) -> None:
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    if spec.synthetic == "tokens" and spec.dataset is None and vocab is not None and spec.num_classes > vocab:
        raise StepError(f"workload.num_classes={spec.num_classes} draws token ids the model's vocabulary does not "
                        f"have (its config.vocab_size={vocab}): set workload.num_classes to at most {vocab}")
