"""The validation pass of a workload's own training (``val.every_n_steps=N``): the step it calls on each validation
batch, decided once before the loop, and the pass, run and timed as the default step's
(``harness.workload.knobs.validation_pass``): after the step it follows, inside that step's time, so that a record
holds the same fields and the analysis reads a pass's cost as its step's extra over an ordinary one.

The step, the first that applies: ``workload.val_step`` (``val_step(model, batch) -> loss``); a LightningModule's
own ``validation_step(batch, batch_idx)`` (``batch_idx`` from 0 each pass; it may return None, as Lightning's often
do: they log their metrics), over its ``val_dataloader()``'s data when the workload names no dataset; a Hugging Face
model's ``model(**batch)``, and the default step of a workload that only counts its batches, as they train. A
result is read as a training step's (``harness.workload.step.loss.loss_reader``), without requiring grad; what holds no
loss is a :class:`StepError` naming the step. A user's step with none of them has no pass: ``val.every_n_steps`` is
skipped with the reason (``harness.workload.own_knobs``).

The pass: ``model.eval()``, ``torch.no_grad()`` (``torch.inference_mode()`` with ``val.inference_mode``), the
training's autocast, each batch moved as the training's are, the loss read back (the metric a trainer logs), then
``model.train()``.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch

from harness.workload.step import lightning
from harness.workload.step.interface import OwnStep, ValCall, ValStep
from harness.workload.step.loop import collate_of, mover_for
from harness.workload.step.loss import loss_reader


def with_own_val_data(val: ValStep, spec, module, fns) -> ValStep:
    """``val`` given a LightningModule's own ``val_dataloader()`` data (the child's; ``has_own_val_data`` says
    when), collated by ``workload.collate`` where the workload names one, else by that loader's collate_fn."""
    val.dataset, collate = lightning.module_data(module, lightning.module_name(spec), "val_dataloader")
    val.collate = fns.collate if fns.collate is not None else collate
    return val


def has_own_val_data(spec, module, own: OwnStep | None) -> bool:
    """Whether the validation batches come from a LightningModule's own ``val_dataloader()``."""
    return (own is not None and own.lightning and spec.dataset is None
            and lightning.overrides(type(module), "val_dataloader"))


def val_data(spec, own: OwnStep | None, val: ValStep) -> tuple[Any, Any]:
    """The validation loader's own data: (the module's validation dataset, else its training one, else None; the
    collate function: ``workload.collate``, else that loader's, else None)."""
    if val.dataset is not None:
        return val.dataset, val.collate
    return (own.dataset if own is not None else None), collate_of(spec, own)


def through_ddp(model, own: OwnStep | None, val: ValStep | None, wrap: Callable[[Any], Any]):
    """DDP (``wrap``: ``knobs.apply_ddp``, its knobs as given) around ``model``. A LightningModule's steps call its
    own forward, which DDP would never see (no gradient sync): DDP wraps its :class:`lightning.StepModule` instead and
    the steps are called through it, as Lightning's strategies redirect them; a ``val_step`` gets the module."""
    if own is None or not own.lightning:
        return wrap(model)
    ddp = wrap(lightning.StepModule(model))
    own.call = lightning.training_step_call(model, through=ddp)
    if val is not None and val.may_return_none:  # the module's own validation_step
        val.call = lightning.validation_step_call(model, through=ddp)
    elif val is not None:
        val.call = functools.partial(_on_module, val.call, model)
    return ddp


def _on_module(call: ValCall, module, _model, batch, batch_idx: int):
    return call(module, batch, batch_idx)


def own_validation_pass(cfg, prep, loader, val: ValStep) -> Callable[[], None]:
    """One pass of ``cfg.val.steps`` batches of ``loader`` (a new iterator each pass) through ``val``, as the
    default step's pass runs (``knobs.validation_pass``)."""
    grad_off = torch.inference_mode if cfg.val.inference_mode else torch.no_grad
    move = mover_for(cfg, prep.device, prep.memory_format != torch.contiguous_format)
    read, model, call, steps, device = val_reader(val), prep.model, val.call, cfg.val.steps, prep.device

    def run() -> None:
        model.eval()
        with grad_off(), prep.autocast():
            for index, batch in zip(range(steps), loader):
                read(call(model, move(batch), index))
        if device.type == "cuda":  # a step that returned nothing to read: its work ends inside this step's time
            torch.cuda.synchronize(device)
        model.train()

    return run


def val_reader(val: ValStep) -> Callable[[Any], float | None]:
    """What reads a validation step's loss back to the host (None where a LightningModule's returned nothing)."""
    read = loss_reader(val.name, grad=False)
    if val.may_return_none:
        return lambda result: None if result is None else float(read(result))
    return lambda result: float(read(result))
