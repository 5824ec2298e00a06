"""The parts of one training step that the measured loop's per-step work calls (``harness.run.child.hooks``), as a
training loop's ``train_step`` would be: a micro-batch's forward and backward, the optimizer's step, and the logging
step (every ``log_every_n_steps``): the loss read back and the scalars a trainer logs written through a logger."""

from __future__ import annotations

import logging
import math
import shutil
import tempfile
from multiprocessing.util import get_temp_dir
from pathlib import Path

from harness.run.child.outcome import NonFiniteLoss, shapes_error
from harness.run.child.summary import Measurement


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


def read_loss(m: Measurement, loss, accum: int, step: int, log_every: int, log: MetricsLog | None = None) -> None:
    """The logging step, every ``log_every_n_steps``: the loss read (the logging sync on a GPU) and, with ``log``,
    written with the step and learning rate; the first step's is kept, a non-finite one ends the run
    (``NonFiniteLoss``)."""
    value = loss.item() * accum
    if step == 0:
        m.loss_first = value
    if log is not None:
        log(step, value)
    if not math.isfinite(value):
        raise NonFiniteLoss(step, value, log_every)


class MetricsLog:
    """The scalars a trainer logs at a logging step (step, loss, learning rate), one line each through Python's
    ``logging`` to ``metrics.log`` in a temporary folder (gone when the loop lets go of it), flushed after each
    line as a ``FileHandler`` flushes: the write a trainer's console or metrics logger makes, nothing on other
    steps. The folder is in the process's scratch folder (multiprocessing's, removed when the process ends; a
    harness run's is in its job folder, so that it goes with the run however the run ends)."""

    def __init__(self, optimizer):
        self.optimizer = optimizer
        self.folder = Path(tempfile.mkdtemp(prefix="metrics-", dir=get_temp_dir()))
        self.path = self.folder / "metrics.log"
        self.handler = logging.FileHandler(self.path)
        self.handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        self.logger = logging.Logger("harness.metrics", logging.INFO)  # its own: no global logger's handlers
        self.logger.addHandler(self.handler)

    def __call__(self, step: int, loss: float) -> None:
        lr = float(self.optimizer.param_groups[0]["lr"])
        self.logger.info("step=%d loss=%.6g lr=%.6g", step, loss, lr)

    def close(self) -> None:
        """Let go of the file and remove its folder (a forked run ends with ``os._exit``: no exit handler runs)."""
        self.logger.removeHandler(self.handler)
        self.handler.close()
        shutil.rmtree(self.folder, ignore_errors=True)
