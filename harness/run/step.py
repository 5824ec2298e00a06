"""The parts of one training step that the measured loop (``harness.run.measure._steps``) calls, as a training
loop's ``train_step`` would be: a micro-batch's forward and backward, the optimizer's step, reading the loss."""

from __future__ import annotations

import math

from harness.run.outcome import NonFiniteLoss, shapes_error
from harness.run.summary import Measurement


def forward_backward(model, loss_fn, autocast, scaler, x, y, accum: int, drop_out: bool, nan: bool):
    """One micro-batch's forward and backward: (its loss, the output; None for the output when no knob reads it
    after the step, as ``loss_fn(model(x), y)`` leaves it: backward may free it as it goes)."""
    out = None
    try:
        with autocast():
            out = model(x)
            loss = loss_fn(out, y)
            if accum > 1:
                loss = loss / accum
    except Exception as exc:  # the model or loss refuses this batch: say what the batch was
        raise shapes_error(exc, x, y, out) from exc
    if drop_out:
        out = None
    if nan:  # debug.fault=nan at this step
        loss = loss * float("nan")
    (scaler.scale(loss) if scaler else loss).backward()
    return loss, out


def optimizer_step(prep) -> None:
    """The optimizer's step, through the gradient scaler where there is one (fp16)."""
    if prep.scaler:
        prep.scaler.step(prep.optimizer)
        prep.scaler.update()
    else:
        prep.optimizer.step()


def read_loss(m: Measurement, loss, accum: int, step: int, log_every: int) -> None:
    """Read the loss (the logging sync, every ``log_every_n_steps``): the first step's is kept, a non-finite one
    ends the run (``NonFiniteLoss``)."""
    value = loss.item() * accum
    if step == 0:
        m.loss_first = value
    if not math.isfinite(value):
        raise NonFiniteLoss(step, value, log_every)
