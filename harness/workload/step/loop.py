"""The loop's side of a workload's own step (``workload.step``, a LightningModule, a Hugging Face model or a
counting default step; ``harness.workload.step.adapters``): the micro-batch called as the loop calls the default
step's ``forward_backward`` (``harness.run.child.step``), the batches moved to the device, the zeroing, and the data
a step brings. Without one the default step is ``loss_fn(model(x), y)`` on the loader's ``(input, target)`` pair,
as every stored record measured it.

The harness keeps what the ladder's knobs act on around the user's step: autocast around it, the gradient scaler,
accumulation (the loss divided) and DDP's ``no_sync``, backward, the optimizer's step and ``zero_grad``, compile of
the model before the loop, channels_last of the model and of the batch's 4-D/5-D floating tensors, the logging
step's loss read and the measured window. The user's step computes the loss; it neither steps nor zeroes.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any, Callable, Iterator

import torch

from harness.config.targets import function_of, functions_of
from harness.workload.applicability import KnobNotApplicable
from harness.workload.batches import batch_mover, describe, float_leaves
from harness.workload.build import build_model
from harness.workload.own_knobs import own_step_reasons
from harness.workload.step.adapters import adapter_named
from harness.workload.step.interface import OwnStep
from harness.workload.step.loss import itself, loss_reader


def micro_step(own: OwnStep, move: Callable[[Any], Any]):
    """One micro-batch through the workload's own step, called as the loop calls the default step's
    ``forward_backward`` (``harness.run.child.step``), with the batch in the input's place: the batch moved, the step
    under autocast, the loss divided for accumulation, backward through the scaler; (the loss, no output)."""
    call, read, count = own.call, loss_reader(own.name), own.counts

    def forward_backward(model, _loss_fn, autocast, scaler, batch, _target, accum: int, _drop_out, nan: bool):
        if count is not None:
            count(batch)
        batch = move(batch)
        with autocast():
            loss = read(call(model, batch))
            if accum > 1:
                loss = loss / accum
        if nan:  # debug.fault=nan at this step
            loss = loss * float("nan")
        (scaler.scale(loss) if scaler else loss).backward()
        return loss, None

    return forward_backward


def mover_for(cfg, device: torch.device, channels_last: bool) -> Callable[[Any], Any]:
    """The batch mover of a workload's own step, with the knobs that act on moving."""
    return batch_mover(device, non_blocking=bool(cfg.data.non_blocking), channels_last=channels_last)


def channels_last_reason(model, batch) -> str:
    """Why channels_last cannot act on this model and batch ("" when it can): neither has a 4-D or 5-D floating
    tensor to lay out (a language model's token ids and 2-D weights)."""
    if any(p.dim() in (4, 5) for p in model.parameters()) or float_leaves(batch):
        return ""
    return (f"channels_last=true lays out 4-D and 5-D floating tensors; neither the model's parameters nor the batch "
            f"({describe(batch)}) have one, so it would change nothing")


def own_step_conflicts(cfg, own: OwnStep, validates: bool) -> str:
    """Why knobs of ``cfg`` cannot act on the built workload's own step ("" when every one can); ``validates``: it
    has a validation step (``harness.workload.step.validation``)."""
    return "; ".join(own_step_reasons(cfg, own.name, own_optimizer=own.optimizer is not None,
                                      zeroes_grads_itself=own.zeroes_grads_itself, validates=validates,
                                      lightning=own.lightning))


def own_loop(cfg, prep, batches: Iterator, fixed: bool) -> tuple[Iterator, Callable[..., Any]]:
    """The batches, as ``(batch, None)`` pairs in the loop's (input, target) places, and the micro-batch step of a
    workload's own step, set up before the loop: the first batch is looked at here (channels_last that cannot act on
    it is a skip; a leaf that cannot move, an error) and handed to the loop first. ``fixed`` (measure.mode=model):
    one batch moved once and kept on the device."""
    first = next(batches)
    if prep.own.check_batch is not None:
        prep.own.check_batch(first)
    channels_last = prep.memory_format != torch.contiguous_format
    if channels_last and (reason := channels_last_reason(prep.model, first)):
        raise KnobNotApplicable(reason)
    move = mover_for(cfg, prep.device, channels_last)
    if fixed:
        kept = (move(first), None)
        return iter(lambda: kept, None), micro_step(prep.own, itself)
    move(first)  # a leaf that cannot move fails here, before the warm-up, naming where it is
    return ((batch, None) for batch in itertools.chain([first], batches)), micro_step(prep.own, move)


def zero_grad_of(prep, set_to_none: bool) -> Callable[[], None]:
    """The loop's zeroing: the module's own (a LightningModule's optimizer_zero_grad), or the optimizer's."""
    if prep.own is not None and prep.own.zero_grad is not None:
        return prep.own.zero_grad(prep.optimizer)
    return functools.partial(prep.optimizer.zero_grad, set_to_none=set_to_none)


def data_of(cfg, spec, own: OwnStep | None) -> tuple[Any, Any]:
    """The workload's own data for the loader: (a LightningModule's dataset or None, the collate function or None).
    In ``measure.mode=loader`` no model is prepared: a LightningModule is built for its data alone."""
    if own is None and spec.lightning_module is not None and cfg.measure.mode == "loader":
        own = adapter_named("lightning").build(spec, build_model(cfg), functions_of(spec))
    return (own.dataset if own is not None else None), collate_of(spec, own)


def collate_of(spec, own: OwnStep | None):
    """The loader's collate function: the workload's (``workload.collate``, a partial), a LightningModule's loader's,
    or None (PyTorch's default)."""
    if spec.collate is not None:
        return function_of(spec.collate)
    return own.collate if own is not None else None


def loader_pairs(spec, batches: Iterator) -> Iterator:
    """``measure.mode=loader``: batches for a loop that unpacks ``(input, target)``; a batch of another shape (a
    dict, a detection batch's lists) is handed on as ``(batch, None)``. The built-ins' pairs pass as they are."""
    if not (spec.own_training or spec.dataset is not None or spec.synthetic == "tokens"):
        return batches
    first = next(batches)
    batches = itertools.chain([first], batches)
    if isinstance(first, (tuple, list)) and len(first) == 2:
        return batches
    return ((batch, None) for batch in batches)
