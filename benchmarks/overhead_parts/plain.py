"""The plain loop: a training step as one would write it by hand, on what the harness would build for a config,
with the harness's warm-up and loss reads and nothing else (no thread, no progress file, no parent). It runs in
the benchmark's own process, and as a child of its own (``--plain``: a fixed window; ``--follow``: the reference
that steps until stopped)."""

from __future__ import annotations

import gc
import signal
import time

import torch

from harness.workload.build import build_all
from harness.workload.data import build_dataset, build_loader
from harness.workload.knobs import build_optimizer, guard_cpu_bf16_conv3d

from .common import config, end_with_parent

FOLLOW_MAX_S = 1800.0  # a follower nobody stops ends by itself


def plain_step(cfg):
    """A training step as one would write it by hand, on what the harness would build for ``cfg``: (step, device)."""
    workload = cfg.workload
    device = torch.device(cfg.device)
    torch.manual_seed(cfg.seed)
    model, loss_fn, _ = build_all(cfg)
    model = model.to(device)
    guard_cpu_bf16_conv3d(model, cfg)  # part of the model the harness trains on a CPU in bf16 (docs/cpu-bf16-conv3d.md)
    model.train()
    loss_fn = loss_fn.to(device)
    optimizer = build_optimizer(cfg, workload, model.parameters())
    x, y = next(iter(build_loader(cfg, build_dataset(cfg, workload), workload)))
    return hand_step(cfg, model, loss_fn, optimizer, x.to(device), y.to(device)), device


def hand_step(cfg, model, loss_fn, optimizer, x, y):
    """The step itself, as written by hand: zero the gradients, forward under autocast, backward, optimizer step,
    and the loss read at step 0 and every ``log_every_n_steps`` (the harness's logging sync)."""
    dtype = {"32": None, "bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}[cfg.precision]
    device_type, log_every = x.device.type, cfg.log_every_n_steps

    def step(i: int) -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type, dtype=dtype, enabled=dtype is not None):
            loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        if i == 0 or (i + 1) % log_every == 0:
            loss.item()

    return step


def time_plain(cfg, window: list | None = None) -> float:
    """Seconds of the plain loop's measured steps (after the same warm-up the harness does); ``window`` gets the
    window's UNIX start."""
    step, device = plain_step(cfg)
    warmup, steps = cfg.measure.warmup_steps, cfg.measure.steps
    gc.collect()  # as the harness's child does before its warm-up: the set-up's debt to the collector paid here
    for i in range(warmup):
        step(i)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for i in range(warmup, warmup + steps):
        step(i)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    if window is not None:
        window.append(time.time() - seconds)
    return seconds


def plain_loop(settings: list[str]) -> dict:
    """``--plain``: the plain loop's fixed window, samples/s, the window (UNIX start, seconds) and seconds a step."""
    cfg = config(settings)
    window: list = []
    seconds = time_plain(cfg, window)
    return {"samples_per_s": cfg.measure.steps * cfg.batch_size / seconds, "window": [window[0], seconds],
            "step_s": seconds / cfg.measure.steps}


def follow(settings: list[str]) -> dict:
    """``--follow``: warm up, say "ready", step until SIGUSR1 (or the parent's death), keep the steps' ends."""
    cfg = config(settings)
    step, _ = plain_step(cfg)  # a CPU run: the loss reads are its syncs, as in the harness
    warmup = cfg.measure.warmup_steps
    for i in range(warmup):
        step(i)
    stop: list = []
    signal.signal(signal.SIGUSR1, lambda *_: stop.append(True))
    end_with_parent(signal.SIGUSR1)
    print("ready", flush=True)
    ends = []
    i = warmup
    first = t = time.perf_counter()
    while not stop and t - first < FOLLOW_MAX_S:
        step(i)
        i += 1
        t = time.perf_counter()
        ends.append(t)
    offset = time.time() - time.perf_counter()
    return {"first": first + offset, "ends": [e + offset for e in ends]}

