"""What every step adapter is (:class:`StepAdapter`) and what it makes: the workload's own step (:class:`OwnStep`),
decided once before the loop, and its validation step (:class:`ValStep`). Torch-free: an adapter imports torch only
where it calls or reads a step.

An adapter says whether it applies to a workload's settings and its model as built (``applies``), makes the step
(``build``: None for the default step's fixed ``loss_fn(model(x), y)``) and the step the validation pass calls
(``validation``: None where it has none). The adapters are registered by name and one is chosen for a workload
(``harness.workload.step.adapters``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, runtime_checkable


class StepError(ValueError):
    """A workload's own step that cannot be measured as given: it returned no usable loss, or its module lacks what
    a training step needs (an `error` record in the child; refused before anything runs when the parent finds it)."""


Step = Callable[[Any, Any], Any]  # (model, batch) -> what the step returns
ValCall = Callable[[Any, Any, int], Any]  # (model, batch, batch_idx) -> what the validation step returns


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
    adapter: str = ""  # the name of the adapter that made it (its validation step is that adapter's)
    notes: list[str] = field(default_factory=list)
    counts: Counts | None = None  # the workload's samples(batch) / units(batch) hooks, per micro-batch
    check_batch: Callable[[Any], None] | None = None  # what the first batch must be (StepError when it is not)

    @property
    def lightning(self) -> bool:
        """Whether it is a LightningModule's training_step (its optimizer, zeroing, data and DDP wrapper)."""
        return self.adapter == "lightning"


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


@dataclass
class ValStep:
    """The validation step of a workload's own training, decided once before the loop."""

    name: str  # how messages name it: "workload.val_step='mypkg.train.val_step'"
    call: ValCall
    may_return_none: bool = False  # a LightningModule's validation_step: its metrics logged, nothing returned
    dataset: Any = None  # the module's own validation data (its val_dataloader()'s dataset), or None
    collate: Any = None  # and that loader's collate_fn


@runtime_checkable
class StepAdapter(Protocol):
    """One way of calling a workload's training step, registered under ``name``."""

    name: str  # the registry's key: "lightning", "step", "huggingface", "default"

    def applies(self, spec, model) -> bool:
        """Whether this adapter trains ``spec``'s workload on ``model`` (built, before any wrapper)."""

    def build(self, spec, model, fns, with_data: bool = True, loss_fn=None) -> OwnStep | None:
        """The step, decided once before the loop (None: the default step's fixed path). ``fns``: the workload's
        own functions, looked up once (``harness.config.targets.Functions``). ``with_data``: a module's own data is
        built too (not in the parent's check on the meta device)."""

    def validation(self, spec, module, own: OwnStep | None) -> ValStep | None:
        """The step the validation pass calls when the workload names no ``val_step`` (None: it has none)."""


def without_index(step: Step) -> ValCall:
    """A training step called as the validation pass calls its step (the batch index left out)."""
    return lambda model, batch, _batch_idx: step(model, batch)
