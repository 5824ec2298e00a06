"""The default step, ``loss_fn(model(x), y)`` on the loader's ``(input, target)`` pair, as every stored record
measured it: the loop's own fixed path (``harness.run.child.step.forward_backward``), no adapter step at all. Only a
workload with a ``samples``/``units`` hook gets it as a step, called on the batch as the hooks see it; that one
validates as it trains."""

from __future__ import annotations

import functools

from harness.workload.step.interface import OwnStep, ValStep, without_index

NAME = "the default step (loss_fn(model(x), y))"


class DefaultStep:
    name = "default"

    def applies(self, spec, model) -> bool:
        return True

    def build(self, spec, model, fns, with_data: bool = True, loss_fn=None) -> OwnStep | None:
        if fns.samples is None and fns.units is None:
            return None
        return OwnStep(name=NAME, call=functools.partial(_default_step, loss_fn), adapter=self.name)

    def validation(self, spec, module, own: OwnStep | None) -> ValStep | None:
        return None if own is None else ValStep(name=own.name, call=without_index(own.call))


def _default_step(loss_fn, model, batch):
    x, y = batch
    return loss_fn(model(x), y)
