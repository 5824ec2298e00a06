"""Per-step work, built before the loop: the calls a step makes besides drawing its batches, as two short lists
and one call per micro-batch, so that the measured loop (``measure._steps``) is a fixed core and a knob that acts
every step is one hook here, not a branch there.

A step is: the hooks before it, for each micro-batch its batch drawn (timed by the loop) and handed to ``micro``,
then the hooks after it. :func:`step_hooks` is the one place that decides which hooks a run has and in which order,
and why. A knob that is off adds no hook, so a run without it tests nothing for it per step; every hook is work a
training loop does (or the debug fault it stands for), none is the harness's own.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any, Callable

from harness.run.child import faults
from harness.run.child.step import optimizer_step, read_loss

Hook = Callable[[int], None]  # hook(step)


@dataclass
class StepState:
    """What a step leaves for the hooks after it: its last micro-batch's input (on the device), output (None unless a
    hook reads it: backward may free it as it goes) and loss."""

    x: Any = None
    out: Any = None
    loss: Any = None


@dataclass(frozen=True)
class StepHooks:
    """One run of the loop's per-step work (the warm-up's, or the measured steps')."""

    before: tuple[Hook, ...]
    micro: Callable[[int, int, Any], None]  # micro(step, index, batch): the micro-batch's training work
    after: tuple[Hook, ...]
    state: StepState


def step_hooks(loop, events: list[tuple], first: int) -> StepHooks:
    """The per-step work of ``loop`` (``measure.Loop``: what the loop reads, made once), in the order a training
    loop does it. ``events``: the measured steps' CUDA event pairs (``events[step - first]``; none in the warm-up and
    off CUDA)."""
    state, prep, plan = StepState(), loop.prep, loop.faults
    before: list[Hook] = []
    after: list[Hook] = []
    if loop.mark_step is not None:  # CUDA-graph compile modes: the iteration starts before any of its work
        before.append(_mark_step(loop.mark_step))
    if prep is not None:  # the optimizer's zero_grad(set_to_none), or the workload's own module's
        before.append(_zero_grad(loop.zero_grad))
        after.append(_optimizer_step(prep))
    if events:  # the device's step ends with the optimizer's step (it starts in ``micro``: the first batch in hand)
        after.append(_event_end(events, first))
    if loop.after_step is not None:  # the knobs' work every N steps: cleanup, visualisation, validation
        after.append(_periodic(loop.after_step, state))
    if plan.fault_step != faults.NEVER:  # after the optimizer's step, as its real counterpart fails
        after.append(_fault(plan, loop.device))
    if plan.slowdown_s:
        after.append(_sleep(plan.slowdown_s))
    if prep is not None:  # last: the logging step reads the loss back (on a GPU, the sync) and writes its line
        after.append(_log_loss(loop, state))
    micro = _train_micro(loop, state, events, first) if prep is not None else _draw_only
    return StepHooks(tuple(before), micro, tuple(after), state)


def _train_micro(loop, state: StepState, events: list[tuple], first: int) -> Callable[[int, int, Any], None]:
    """A micro-batch's training work: to the device (where the batch is not there already, and the workload's own
    step does not move it itself), forward and backward through ``loop.step_fn`` (the default step's, or the
    workload's own), under DDP's ``no_sync`` for every micro-batch but the last when gradients accumulate."""
    prep, device, fmt, nb, move = loop.prep, loop.device, loop.memory_format, loop.non_blocking, loop.move
    model, loss_fn, autocast, scaler, accum = prep.model, prep.loss_fn, prep.autocast, prep.scaler, loop.accum
    step_fn = loop.step_fn
    no_sync, last_micro, synced = loop.no_sync, loop.accum - 1, contextlib.nullcontext()
    drop_out, nan_step = loop.after_step is None, loop.faults.nan_step

    def micro(step: int, index: int, batch: Any) -> None:
        x, y = batch
        if events and index == 0:  # the device's step starts once the first batch is in hand
            events[step - first][0].record()
        if move:
            x, y = x.to(device, non_blocking=nb, memory_format=fmt), y.to(device, non_blocking=nb)
        with no_sync() if no_sync is not None and index < last_micro else synced:
            loss, state.out = step_fn(model, loss_fn, autocast, scaler, x, y, accum, drop_out, step == nan_step)
        state.loss = _value_of(loss)
        state.x = x

    return micro


def _value_of(loss: Any) -> Any:
    """The loss as the logging step and the window's close read it: detached from its graph, so that the graph the
    backward has run through goes when its step ends, not kept through the next step's forward and backward, which
    neither a step function nor a loop written inline does (Lightning's loop keeps a detached copy of the loss)."""
    detach = getattr(loss, "detach", None)
    return detach() if callable(detach) else loss


def _draw_only(step: int, index: int, batch: Any) -> None:
    """measure.mode=loader: the batch drawn is the whole step."""


def _mark_step(mark: Callable[[], None]) -> Hook:
    return lambda step: mark()


def _zero_grad(zero: Callable[[], None]) -> Hook:
    return lambda step: zero()


def _optimizer_step(prep) -> Hook:
    return lambda step: optimizer_step(prep)


def _event_end(events: list[tuple], first: int) -> Hook:
    return lambda step: events[step - first][1].record()


def _periodic(after_step: Callable[[int, Any, Any], None], state: StepState) -> Hook:
    return lambda step: after_step(step, state.x, state.out)


def _fault(plan: faults.FaultPlan, device) -> Hook:
    fault_step, kind = plan.fault_step, plan.kind

    def fire(step: int) -> None:
        if step == fault_step:
            faults.inject(kind, device)

    return fire


def _sleep(seconds: float) -> Hook:
    return lambda step: time.sleep(seconds)


def _log_loss(loop, state: StepState) -> Hook:
    """The logging step at step 0 and every ``log_every_n_steps``: the loss read back, its line written."""
    m, accum, log_every, metrics = loop.m, loop.accum, loop.log_every, loop.metrics

    def log(step: int) -> None:
        if step == 0 or (step + 1) % log_every == 0:
            read_loss(m, state.loss, accum, step, log_every, metrics)

    return log
