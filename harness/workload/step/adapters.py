"""The step adapters, registered by name, and the one function that chooses a workload's: the first that applies, in
the registry's order (a LightningModule, ``workload.step``, a Hugging Face model's own loss, the default step), is
asked for the step once, on the model as built and before any wrapper. The workload's ``samples``/``units`` hooks
count the batches whichever adapter made the step.

A new kind of model is one more adapter (:class:`~harness.workload.step.interface.StepAdapter`) registered before
the default, which applies to every workload.
"""

from __future__ import annotations

from harness.names import target_of
from harness.registry import unknown_choice
from harness.workload.step.default import DefaultStep
from harness.workload.step.huggingface import HuggingFace
from harness.workload.step.interface import Counts, OwnStep, StepAdapter, ValStep, without_index
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


def steps_of(spec, model, fns, validates: bool, with_data: bool = True,
             loss_fn=None) -> tuple[OwnStep | None, ValStep | None]:
    """The step ``spec`` names for ``model`` (built, before any wrapper) and, when the run ``validates``
    (``val.every_n_steps``), its validation step, both made by the one adapter :func:`chosen` from the workload's
    functions ``fns`` (``harness.config.targets.Functions``, looked up once). The step: None for the default step
    (or, with a ``samples``/``units`` hook, the default step on the batch as the hooks see it). The validation step:
    ``workload.val_step`` where it names one, else the adapter's; None for the default step's own pass and for a
    step of the user's with none. ``with_data``: a LightningModule's own data is built too (not in the parent's
    check on the meta device; its validation data is the child's to add, ``validation.with_own_val_data``)."""
    adapter = chosen(spec, model)
    own = adapter.build(spec, model, fns, with_data=with_data, loss_fn=loss_fn)
    if own is not None and (fns.samples is not None or fns.units is not None):
        own.counts = Counts(samples=fns.samples, units=fns.units)
    if not validates:
        return own, None
    if fns.val_step is not None:
        return own, ValStep(name=f"workload.val_step={target_of(spec.val_step)!r}", call=without_index(fns.val_step))
    return own, adapter.validation(spec, model, own) if own is not None else None


for _adapter in (Lightning(), UserStep(), HuggingFace(), DefaultStep()):
    register(_adapter)
