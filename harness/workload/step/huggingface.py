"""A Hugging Face model trained through its own loss: ``model(**batch)`` on the batch's named tensors, whose output
has the loss when the batch has labels. Found by its classes, so that the harness never imports transformers."""

from __future__ import annotations

from collections.abc import Mapping

from harness.workload.batches import describe
from harness.workload.step.interface import OwnStep, StepError, ValStep, without_index


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


class HuggingFace:
    """A ``transformers`` model with no ``workload.step``: its own loss; it validates as it trains."""

    name = "huggingface"

    def applies(self, spec, model) -> bool:
        return is_hugging_face(model)

    def build(self, spec, model, fns, with_data: bool = True, loss_fn=None) -> OwnStep:
        return OwnStep(name=f"the Hugging Face model {type(model).__name__} (model(**batch).loss)", call=hf_step,
                       check_batch=hf_batch_check, adapter=self.name)

    def validation(self, spec, module, own: OwnStep | None) -> ValStep | None:
        return ValStep(name=own.name, call=without_index(own.call))
