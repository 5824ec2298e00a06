"""A LightningModule measured as the Trainer would train it, without the Trainer: ``workload.lightning_module``
names the module; its ``training_step(batch, batch_idx)`` is the step, the first optimizer its
``configure_optimizers`` returns is the optimizer (a scheduler is not stepped, and the run says so), its
``optimizer_zero_grad`` zeroes the gradients when it overrides it, and its ``train_dataloader()``'s dataset and
collate function are the data when the workload names no dataset (the loader rebuilt with the ladder's loader knobs).

Lightning itself is never imported here: the module's class is the user's, found by its methods, so both
``lightning.pytorch`` and ``pytorch_lightning`` modules are measured. ``self.log`` without a Trainer returns at
once in Lightning (with a warning, silenced here): what it would cost under a Trainer's loggers is not measured.

Its ``validation_step(batch, batch_idx)``, where it defines one, is the validation pass's step
(``harness.workload.step.validation``), over its ``val_dataloader()``'s data when the workload names no dataset. Under
DDP (``devices`` >= 2) both steps are called through a :class:`StepModule` that DDP wraps, as Lightning's strategies
redirect them through the wrapper's forward, so that DDP's hooks see a forward and sync the gradients.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Callable

from torch import nn

from harness.workload.own_knobs import own_step_name
from harness.workload.step.interface import OwnStep, StepError, ValStep

SCHEDULER_NOTE = ("its learning-rate scheduler is not stepped (the harness measures the optimizer's step; a "
                  "scheduler's step is a few arithmetic operations, per step or per epoch)")

# what to write instead of a module that steps its own optimizers (what Lightning 2 asks of a module with several)
MANUAL_OPTIMIZATION = (
    "{name} sets automatic_optimization=False: its training_step steps its optimizers itself (self.optimizers(), "
    "self.manual_backward), which only Lightning's Trainer can run. The harness runs one backward and one optimizer "
    "step around a step that returns the losses; to measure the same networks instead of workload.lightning_module, "
    "write a workload.step(model, batch) that returns your training_step's losses as a dict (summed: one backward "
    "through all of them), with workload.model a function that returns your networks in a torch.nn.ModuleDict and "
    "workload.optimizer one optimizer over all of them: every network is updated once a step, not in turns (the "
    "guide \"Your own training\", A LightningModule)")


def check_module(module, name: str) -> None:
    """A module the adapter can train: a training_step and configure_optimizers, automatic optimization."""
    for method in ("training_step", "configure_optimizers"):
        if not callable(getattr(module, method, None)):
            raise StepError(f"{name} is a {type(module).__name__}, which has no {method}(): name a LightningModule")
    if getattr(module, "automatic_optimization", True) is False:
        raise StepError(MANUAL_OPTIMIZATION.format(name=name))


def training_step_call(module, through: nn.Module | None = None) -> Callable[[Any, Any], Any]:
    """``(model, batch) -> training_step(batch, batch_idx)``, batch_idx counting on as the Trainer's does; the model
    handed in (compiled or wrapped) is not used: training_step calls the module's forward, which compile compiled.
    ``through``: DDP around the module's :class:`StepModule`, called instead, so that DDP's hooks see the forward."""
    step = module.training_step if through is None else functools.partial(through, "training_step")
    index = iter(range(1 << 62))

    def call(model, batch):
        return step(batch, next(index))

    return call


def validation_step_call(module, through: nn.Module | None = None) -> Callable[[Any, Any, int], Any]:
    """``(model, batch, batch_idx) -> module.validation_step(batch, batch_idx)`` (batch_idx from 0 each pass, as the
    Trainer's); ``through`` as for :func:`training_step_call`."""
    step = module.validation_step if through is None else functools.partial(through, "validation_step")
    return lambda _model, batch, batch_idx: step(batch, batch_idx)


class StepModule(nn.Module):
    """What DDP wraps for a LightningModule: its forward calls one of the module's steps (as Lightning's
    ``_LightningModuleWrapperBase`` did; Lightning 2 patches the module's forward for the call instead), so that
    DDP's forward runs around the step. Its parameters are the module's."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module

    def forward(self, method: str, batch: Any, batch_idx: int) -> Any:
        return getattr(self.module, method)(batch, batch_idx)


def first_optimizer(configured: Any, name: str, notes: list[str]):
    """The first optimizer of what configure_optimizers returned (every form Lightning takes), with a note for a
    scheduler or more optimizers left out."""
    if configured is None:
        raise StepError(f"{name}: configure_optimizers() returned None; return an optimizer (the harness measures "
                        "the optimizer's step)")
    if isinstance(configured, Mapping):
        if configured.get("lr_scheduler") is not None:
            notes.append(SCHEDULER_NOTE)
        return first_optimizer(configured["optimizer"], name, notes)
    if isinstance(configured, Sequence) and not isinstance(configured, str):
        if not configured:
            raise StepError(f"{name}: configure_optimizers() returned an empty {type(configured).__name__}")
        first = configured[0]
        if len(configured) == 2 and isinstance(first, Sequence) and configured[1]:
            notes.append(SCHEDULER_NOTE)
        elif len(configured) > 1 and not isinstance(first, Sequence):
            notes.append(f"only its first of {len(configured)} optimizers is stepped")
        return first_optimizer(first, name, notes)
    if not callable(getattr(configured, "step", None)) or not hasattr(configured, "param_groups"):
        raise StepError(f"{name}: configure_optimizers() returned a {type(configured).__name__}, not an optimizer")
    return configured


def overrides(cls: type, method: str) -> bool:
    """Whether ``cls`` defines ``method`` below Lightning's own classes."""
    for klass in cls.__mro__:
        if method in vars(klass):
            return not klass.__module__.startswith(("lightning", "pytorch_lightning"))
    return False


def zeroes_grads_itself(cls: type) -> str:
    """Why optimizer.zero_grad_set_to_none=false cannot act ("" when the harness zeroes the gradients)."""
    if not overrides(cls, "optimizer_zero_grad"):
        return ""
    return (f"{cls.__name__} zeroes its gradients itself (optimizer_zero_grad), so "
            "optimizer.zero_grad_set_to_none=false would change nothing")


def set_up(module) -> None:
    """The module's ``setup("fit")``, where it defines one, before its loaders are asked (once, as the Trainer does)."""
    if overrides(type(module), "setup"):
        module.setup("fit")


def module_data(module, name: str, method: str = "train_dataloader") -> tuple[Any, Any]:
    """The dataset and collate function of the module's ``train_dataloader()`` (or ``val_dataloader()``: the first
    of several loaders)."""
    loader = getattr(module, method)()
    if isinstance(loader, Sequence) and loader and not isinstance(loader, str):
        loader = loader[0]
    dataset = getattr(loader, "dataset", None)
    if dataset is None:
        raise StepError(f"{name}: {method}() returned a {type(loader).__name__}, not a DataLoader with a dataset; "
                        "name one with workload.dataset")
    return dataset, getattr(loader, "collate_fn", None)


def zero_grad_call(module, optimizer):
    """The module's own ``optimizer_zero_grad``, as the loop's zeroing (``set_to_none`` is the module's choice)."""

    def zero_grad() -> None:
        module.optimizer_zero_grad(0, 0, optimizer)

    return zero_grad


class Lightning:
    """``workload.lightning_module``: its training_step, first optimizer, own zeroing and data, decided once before
    the loop; its validation_step where it defines one."""

    name = "lightning"

    def applies(self, spec, model) -> bool:
        return spec.lightning_module is not None

    def build(self, spec, model, fns, with_data: bool = True, loss_fn=None) -> OwnStep:
        name = module_name(spec)
        check_module(model, name)
        warnings.filterwarnings("ignore", message=r"You are trying to `self.log\(\)`")  # no Trainer: log returns
        own = OwnStep(name=f"{name}: training_step", call=training_step_call(model), adapter=self.name,
                      zeroes_grads_itself=zeroes_grads_itself(type(model)))
        own.optimizer = lambda: first_optimizer(model.configure_optimizers(), name, own.notes)
        if own.zeroes_grads_itself:
            own.zero_grad = functools.partial(zero_grad_call, model)
        loaders = [m for m in ("train_dataloader", "val_dataloader") if overrides(type(model), m)]
        if with_data and spec.dataset is None and loaders:
            set_up(model)
        if with_data and spec.dataset is None and "train_dataloader" in loaders:
            own.dataset, own.collate = module_data(model, name)
        return own

    def validation(self, spec, module, own: OwnStep | None) -> ValStep | None:
        if not overrides(type(module), "validation_step"):
            return None
        return ValStep(name=f"{module_name(spec)}: validation_step", call=validation_step_call(module),
                       may_return_none=True)


def module_name(spec) -> str:
    """How messages name the LightningModule: ``workload.lightning_module='pkg.Module'``."""
    return own_step_name(spec).removesuffix(": training_step")
