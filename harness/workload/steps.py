"""A workload's own training step: ``workload.step`` (a function ``step(model, batch) -> loss``), a Hugging Face
model (``model(**batch)`` and its ``loss``) or a LightningModule (its ``training_step``,
``harness.workload.lightning``), decided once before the loop. Without any of them the default step is
``loss_fn(model(x), y)`` on the loader's ``(input, target)`` pair (``harness.run.child.step.forward_backward``), as
every stored record measured it.

The harness keeps what the ladder's knobs act on around the user's step: autocast around it, the gradient scaler,
accumulation (the loss divided) and DDP's ``no_sync``, backward, the optimizer's step and ``zero_grad``, compile of
the model before the loop, channels_last of the model and of the batch's 4-D/5-D floating tensors, the logging
step's loss read and the measured window. The user's step computes the loss; it neither steps nor zeroes.

What a step returns is read as a loss once, on its first call, and the reader kept: a scalar tensor; a mapping with a
``"loss"`` entry (a Hugging Face ``ModelOutput``, a Lightning step's dict); or a mapping of scalar losses, summed
(torchvision's detection models). Anything else is a :class:`StepError` naming the step and what it returned.
"""

from __future__ import annotations

import functools
import itertools
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from harness.workload import lightning
from harness.workload.applicability import KnobNotApplicable
from harness.workload.batches import batch_mover, describe, float_leaves
from harness.workload.step_knobs import StepError, own_step_name, own_step_reasons
from harness.config.targets import instantiate
from harness.workload.build import build_model

Step = Callable[[Any, Any], Any]  # (model, batch) -> what the step returns
LOSS_FORMS = "a scalar tensor, a mapping with a 'loss' entry, or a mapping of scalar losses (summed)"


@dataclass
class OwnStep:
    """A workload's own step, decided once before the loop."""

    name: str  # how messages name it: "workload.step='mypkg.train.step'"
    call: Step
    optimizer: Any = None  # the module's own optimizer (a LightningModule's configure_optimizers), or None
    dataset: Any = None  # the module's own training data (its train_dataloader()'s dataset), or None
    collate: Any = None  # and that loader's collate_fn
    zeroes_grads_itself: str = ""  # why optimizer.zero_grad_set_to_none cannot act ("" when it can)
    # the module's own zeroing, called instead of the harness's: (optimizer) -> zero_grad()
    zero_grad: Callable[[Any], Callable[[], None]] | None = None
    lightning: bool = False
    notes: list[str] = field(default_factory=list)
    counts: Counts | None = None  # the workload's samples(batch) / units(batch) hooks, per micro-batch
    check_batch: Callable[[Any], None] | None = None  # what the first batch must be (StepError when it is not)


@dataclass
class Counts:
    """The workload's ``samples(batch)`` and ``units(batch)`` hooks (batches that vary: a detection batch's images,
    a language model's unpadded tokens), called on every micro-batch; the window's share summed at its close."""

    samples: Callable[[Any], float] | None
    units: Callable[[Any], float] | None
    seen_samples: list[float] = field(default_factory=list)
    seen_units: list[float] = field(default_factory=list)

    def __call__(self, batch: Any) -> None:
        if self.samples is not None:
            self.seen_samples.append(self.samples(batch))
        if self.units is not None:
            self.seen_units.append(self.units(batch))

    def window(self, micro_batches: int) -> tuple[float | None, float | None]:
        """Samples and units of the last ``micro_batches`` (the measured window's; None for a hook not given)."""
        def last(seen: list[float], hook) -> float | None:
            return float(sum(seen[-micro_batches:])) if hook is not None and micro_batches else None

        return last(self.seen_samples, self.samples), last(self.seen_units, self.units)


def own_step(spec, model, with_data: bool = True, loss_fn=None) -> OwnStep | None:
    """The step ``spec`` names for ``model`` (built, before any wrapper): ``workload.step``, a LightningModule's
    ``training_step``, a Hugging Face model's own loss; None for the default step (or, with a ``samples``/``units``
    hook, the default step on the batch as the hooks see it). ``with_data``: a LightningModule's own data is built
    too (not in the parent's check on the meta device)."""
    own = _own_step(spec, model, with_data)
    if spec.samples is None and spec.units is None:
        return own
    if own is None:
        own = OwnStep(name="the default step (loss_fn(model(x), y))", call=functools.partial(_default_step, loss_fn))
    own.counts = Counts(samples=function_of(spec.samples) if spec.samples is not None else None,
                        units=function_of(spec.units) if spec.units is not None else None)
    return own


def _default_step(loss_fn, model, batch):
    x, y = batch
    return loss_fn(model(x), y)


def _own_step(spec, model, with_data: bool) -> OwnStep | None:
    if spec.lightning_module is not None:
        return lightning_step(spec, model, with_data)
    if spec.step is not None:
        return OwnStep(name=own_step_name(spec), call=function_of(spec.step))
    if is_hugging_face(model):
        return OwnStep(name=f"the Hugging Face model {type(model).__name__} (model(**batch).loss)", call=hf_step,
                       check_batch=hf_batch_check)
    return None


def function_of(node: dict) -> Callable[..., Any]:
    """The function a ``step``/``collate`` node names, as a partial of its arguments (``_partial_`` may be left out;
    ``_partial_: false`` calls the target, a factory, for the function)."""
    return instantiate({**node, "_partial_": node.get("_partial_", True)})


def is_hugging_face(model) -> bool:
    """A ``transformers`` model (found by its classes, so that the harness never imports transformers)."""
    return any(c.__name__ == "PreTrainedModel" and c.__module__.startswith("transformers")
               for c in type(model).__mro__)


def hf_step(model, batch):
    """A Hugging Face model's training step: its forward on the batch's named tensors; its output has the loss
    when the batch has labels (the first batch is checked to be a mapping: :func:`hf_batch_check`)."""
    return model(**batch)


def hf_batch_check(batch) -> None:
    if not isinstance(batch, Mapping):
        raise StepError(f"a Hugging Face model takes a batch of named tensors (model(**batch)): the loader gave a "
                        f"{type(batch).__name__} ({describe(batch)}); give a dataset of dicts (input_ids, labels, ...)")


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
        return _itself
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


def _itself(result):
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
    has a validation step (``harness.workload.val_steps``)."""
    return "; ".join(own_step_reasons(cfg, own.name, own_optimizer=own.optimizer is not None,
                                      zeroes_grads_itself=own.zeroes_grads_itself, validates=validates,
                                      lightning=own.lightning))


def lightning_step(spec, module, with_data: bool = True) -> OwnStep:
    """A LightningModule's training step, optimizer, zeroing and data (``harness.workload.lightning``), decided once
    in the child, before the loop."""
    name = own_step_name(spec).removesuffix(": training_step")
    lightning.check_module(module, name)
    warnings.filterwarnings("ignore", message=r"You are trying to `self.log\(\)`")  # no Trainer: log returns
    own = OwnStep(name=f"{name}: training_step", call=lightning.training_step_call(module), lightning=True,
                  zeroes_grads_itself=lightning.zeroes_grads_itself(type(module)))
    own.optimizer = lambda: lightning.first_optimizer(module.configure_optimizers(), name, own.notes)
    if own.zeroes_grads_itself:
        own.zero_grad = functools.partial(lightning.zero_grad_call, module)
    loaders = [m for m in ("train_dataloader", "val_dataloader") if lightning.overrides(type(module), m)]
    if with_data and spec.dataset is None and loaders:
        lightning.set_up(module)
    if with_data and spec.dataset is None and "train_dataloader" in loaders:
        own.dataset, own.collate = lightning.module_data(module, name)
    return own


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
        return iter(lambda: kept, None), micro_step(prep.own, _itself)
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
        own = lightning_step(spec, build_model(cfg))
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
