"""The step adapters, registered by name, and the one function that chooses a workload's: the first that applies, in
the registry's order (a LightningModule, ``workload.step``, a Hugging Face model's own loss, the default step), is
asked for the step once, on the model as built and before any wrapper. The workload's ``samples``/``units`` hooks
count the batches whichever adapter made the step.

A new kind of model is one more adapter (:class:`~harness.workload.step.interface.StepAdapter`) registered before
the default, which applies to every workload.
"""

from __future__ import annotations

from harness.config.targets import function_of
from harness.registry import unknown_choice
from harness.workload.step.default import DefaultStep
from harness.workload.step.huggingface import HuggingFace
from harness.workload.step.interface import Counts, OwnStep, StepAdapter
from harness.workload.step.lightning import Lightning
from harness.workload.step.user_step import UserStep

ADAPTERS: dict[str, StepAdapter] = {}  # by name, in the order they are asked


def register(adapter: StepAdapter, before: str | None = None) -> None:
    """Add ``adapter`` to the registry, last or ``before`` the one of that name (ValueError for a name already
    registered, or an unknown ``before``)."""
    if adapter.name in ADAPTERS:
        raise ValueError(f"a step adapter named {adapter.name!r} is already registered")
    if before is not None:
        adapter_named(before)
    order = list(ADAPTERS.items())
    at = [name for name, _ in order].index(before) if before is not None else len(order)
    order.insert(at, (adapter.name, adapter))
    ADAPTERS.clear()
    ADAPTERS.update(order)


def adapter_named(name: str) -> StepAdapter:
    """The adapter registered as ``name``; a one-line ValueError with the closest names for any other."""
    if name not in ADAPTERS:
        raise unknown_choice("step adapter", name, ADAPTERS)
    return ADAPTERS[name]


def chosen(spec, model) -> StepAdapter:
    """The adapter that trains ``spec``'s workload on ``model``: the first in the registry that applies."""
    return next(adapter for adapter in ADAPTERS.values() if adapter.applies(spec, model))


def own_step(spec, model, with_data: bool = True, loss_fn=None) -> OwnStep | None:
    """The step ``spec`` names for ``model`` (built, before any wrapper), made by its adapter; None for the default
    step (or, with a ``samples``/``units`` hook, the default step on the batch as the hooks see it). ``with_data``:
    a LightningModule's own data is built too (not in the parent's check on the meta device)."""
    own = chosen(spec, model).build(spec, model, with_data=with_data, loss_fn=loss_fn)
    if own is not None and (spec.samples is not None or spec.units is not None):
        own.counts = Counts(samples=function_of(spec.samples) if spec.samples is not None else None,
                            units=function_of(spec.units) if spec.units is not None else None)
    return own


for _adapter in (Lightning(), UserStep(), HuggingFace(), DefaultStep()):
    register(_adapter)
