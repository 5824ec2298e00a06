"""``workload.step``: the user's function ``step(model, batch) -> loss``, called on each micro-batch in the default
step's place. It has no validation step of its own (``workload.val_step`` names one)."""

from __future__ import annotations

from harness.workload.own_knobs import own_step_name
from harness.workload.step.interface import OwnStep, ValStep


class UserStep:
    name = "step"

    def applies(self, spec, model) -> bool:
        return spec.step is not None

    def build(self, spec, model, fns, with_data: bool = True, loss_fn=None) -> OwnStep:
        return OwnStep(name=own_step_name(spec), call=fns.step, adapter=self.name)

    def validation(self, spec, module, own: OwnStep | None) -> ValStep | None:
        return None
