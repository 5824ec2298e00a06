"""How a run ended: ``ok``, ``oom``, ``nan``, ``timeout``, ``error`` or ``skipped``, and the message that goes with it.

One place decides every status. The measuring child turns an exception into an outcome (``of_exception``); the
parent turns a child that never wrote a result into one (``timed_out``, ``died``). Out of memory is recognised in
all its spellings, a failure of torch.compile's tracer or compiler is a skip (the knob cannot take this model:
never the eager baseline under its label), and a model or loss that refuses a batch says what the batch was.
"""

from __future__ import annotations

import os
import re
import signal
import traceback
from dataclasses import dataclass

from harness.config.targets import is_user_source
from harness.workload.applicability import KnobNotApplicable, compile_failure_reason, no_attention_kernel_reason

OK, OOM, NAN, TIMEOUT, ERROR, SKIPPED = "ok", "oom", "nan", "timeout", "error", "skipped"
STATUSES = (OK, OOM, NAN, TIMEOUT, ERROR, SKIPPED)
DIAGNOSED = (SKIPPED, OOM, NAN)  # what a run found out about itself: beats a peer rank's broken-connection error

# Messages that mean the device (or host) allocator could not satisfy a request.
OOM_MARKERS = ("CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED", "cudaErrorMemoryAllocation",
               "can't allocate memory")
COMPILE_MODULES = ("torch._dynamo", "torch._inductor")
TRACEBACK_CHARS = 4000  # the end of an error's traceback kept in the record
YOUR_CODE = "raised in your code at "  # the last line of an error raised in the user's own code: file, line, function
# a frame in a traceback's text: a loader worker's exception comes back with its traceback in its message
FRAME_LINE = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
# the first line of an error says how a process ended that wrote no result: a signal, an exit code, the timeout
ENDED = re.compile(r"^(the measuring process |no result after |rank \d+ was killed )")


@dataclass(frozen=True)
class Outcome:
    """A run's status and what the record says about it ("" for a run that measured)."""

    status: str
    error: str = ""


class NonFiniteLoss(RuntimeError):
    """The loss read at a logging step (or at the end) was NaN or infinite: a ``nan`` record."""

    def __init__(self, step: int, value: float, every: int):
        super().__init__(f"loss became {value}: seen at step {step} (the loss is read every "
                         f"log_every_n_steps={every} steps and at the end, so it may have happened earlier)")
        self.step = step


class BatchRefused(RuntimeError):
    """The model's forward or the loss failed on a batch: an `error` record whose message shows the shapes."""


def exception_chain(exc: BaseException | None):
    """The exception, then its causes and contexts (each once)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def is_compile_failure(exc: BaseException) -> bool:
    """An exception raised by torch.compile's tracer or compiler (anywhere in the cause/context chain)."""
    return any(type(e).__module__.startswith(COMPILE_MODULES) for e in exception_chain(exc))


def is_out_of_memory(exc: BaseException) -> bool:
    """Out of memory, however it surfaced: torch.OutOfMemoryError, or a message anywhere in the chain."""
    import torch

    if isinstance(exc, torch.OutOfMemoryError):
        return True
    # Out of memory does not always surface as torch.OutOfMemoryError: cuBLAS and cuDNN report a failed
    # workspace allocation with their own status codes, and compile wraps the original error in its own
    # exception type, so the text of the whole exception chain is read.
    text = " ".join(str(e) for e in exception_chain(exc))
    return "out of memory" in text.lower() or any(marker in text for marker in OOM_MARKERS)


def classify(exc: BaseException) -> str:
    """Status for an exception from the training run."""
    if isinstance(exc, KnobNotApplicable):
        return SKIPPED
    if isinstance(exc, NonFiniteLoss):
        return NAN
    if is_out_of_memory(exc):
        return OOM
    if is_compile_failure(exc):  # the knob cannot take this model: never the eager baseline under its label
        return SKIPPED
    if any(no_attention_kernel_reason(e) for e in exception_chain(exc)):  # lm.sdpa_backend: no kernel for it
        return SKIPPED
    return ERROR


def skip_reason(exc: BaseException, compile_mode: str) -> str:
    """The reason a skipped run gives: the knob's own, or which compile mode failed on the model and how."""
    if is_compile_failure(exc) and not isinstance(exc, KnobNotApplicable):
        return compile_failure_reason(compile_mode, exc)
    attention = [r for r in map(no_attention_kernel_reason, exception_chain(exc)) if r]
    return attention[0] if attention else str(exc)


def of_exception(exc: BaseException, compile_mode: str) -> Outcome:
    """The outcome of a run that raised ``exc``: a skip gives its reason, any other failure its traceback's end."""
    status = classify(exc)
    if status == SKIPPED:
        return Outcome(status, skip_reason(exc, compile_mode))
    text, where = "".join(traceback.format_exception(exc)), user_frame(exc)
    return Outcome(status, (f"{text.rstrip()}\n{YOUR_CODE}{where}" if where else text)[-TRACEBACK_CHARS:])


def user_frame(exc: BaseException) -> str:
    """Where in the user's own code ``exc`` was raised, as "models/step.py:12 in step" (the file relative to the
    current folder when inside it): the deepest frame of a user's file (``targets.is_user_source``) in the first
    exception of the chain that has one ("" when none does)."""
    for link in exception_chain(exc):
        frames = [(f.filename, f.lineno, f.name) for f in traceback.extract_tb(link.__traceback__)]
        frames += [(file, int(line), name) for file, line, name in FRAME_LINE.findall(str(link))]  # a worker's
        frames = [f for f in frames if is_user_source(f[0])]
        if frames:
            file, line, name = frames[-1]
            inside = not os.path.relpath(file).startswith("..")
            return f"{os.path.relpath(file) if inside else file}:{line} in {name}"
    return ""


def summary_line(error: str) -> str:
    """The one line a run's summary shows of its ``error``: how a process that wrote no result ended (a signal,
    an exit code, the timeout: the first line, never the last line of its stderr), else the exception (its
    traceback's last line) and where in the user's code it was raised."""
    lines = [line for line in (error or "").strip().splitlines() if line.strip()]
    if not lines:
        return "-"
    if ENDED.match(lines[0]):
        return lines[0]
    if len(lines) > 1 and lines[-1].startswith("(rank "):  # a rank's error, then how every rank ended
        lines.pop()
    where = f" ({lines.pop()})" if len(lines) > 1 and lines[-1].startswith(YOUR_CODE) else ""
    return lines[-1] + where


def timed_out(timeout_s: float, log_tail: str) -> Outcome:
    """The child wrote no result before ``timeout_s`` and was killed."""
    return Outcome(TIMEOUT, f"no result after timeout_s={timeout_s:g} s; killed.\n{log_tail}")


def died(returncode: int | None, log_tail: str) -> Outcome:
    """The child ended without writing a result (a crash: a signal, or an exit code)."""
    how = (f"killed by signal {signal.Signals(-returncode).name}" if returncode and returncode < 0
           else f"exited with code {returncode}")
    return Outcome(ERROR, f"the measuring process {how} without writing a result.\n{log_tail}")


def shapes_error(exc: Exception, x, y, out=None) -> Exception:
    """``exc`` itself when it is out of memory or compile's own (classified as such), else a BatchRefused that
    names the batch's shapes (and the model's output, when the forward ran and the loss failed)."""
    import torch

    if isinstance(exc, torch.OutOfMemoryError) or is_compile_failure(exc):
        return exc
    what = "the model" if out is None else f"the loss (the model's output: {_shape(out)})"
    return BatchRefused(f"{what} failed on a batch of input {_shape(x)} and target {_shape(y)} (batch first): "
                        f"{type(exc).__name__}: {exc}")


def _shape(t) -> str:
    import torch

    if not isinstance(t, torch.Tensor):  # a model may return a tuple (deep supervision) or a dict
        return type(t).__name__
    return f"[{', '.join(map(str, t.shape))}] {str(t.dtype).removeprefix('torch.')}"
