"""In one process: the harness's measuring loop (``train_and_measure``, the function its child runs) against the
plain loop, on one model (``in_process``), and on a tiny one, its own cost per step (``loop_cost``). Both sides
alternate in short blocks, the order flipping every round (``alternated``), so that the machine's slow minutes and
a process's own speed fall on both sides alike."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

import torch

from harness.run.child import channel, measure
from harness.run.child.ranks import Rank
from harness.workload.data import build_dataset, build_loader
from harness.workload.knobs import Prepared

from . import plain
from .common import ENTRY, REPO, config, env

# A model so small (one 1x1 convolution, SGD) that a step is ~0.2 ms on a CPU: what the harness's loop adds per
# step stands out against it.
TINY = [("workload", "custom"), ("workload.model._target_", "torch.nn.Conv1d"), ("workload.model.in_channels", 1),
        ("workload.model.out_channels", 2), ("workload.model.kernel_size", 1), ("workload.input_shape", [1, 8]),
        ("workload.target", "segmentation"), ("size", "smoke"), ("device", "cpu"), ("measure.mode", "model"),
        ("workload.optimizer._target_", "torch.optim.SGD"), ("measure.warmup_steps", 20), ("data.num_workers", 0)]


def alternated(rounds: int, sides: dict[str, Callable[[], float]]) -> list[dict[str, float]]:
    """Each side's seconds a step, every round: the sides run once each, in the order given in even rounds and
    reversed in odd ones (what the first or the last block of a round gains falls on both alike)."""
    names = list(sides)
    return [{name: sides[name]() for name in (names if r % 2 == 0 else names[::-1])} for r in range(rounds)]


def _quiet(*args, **kwargs) -> None:
    """The progress markers' writer, for a side without a parent: the child writes a file per phase."""


def measured_step_s(cfg, progress: Callable[..., None] = _quiet) -> float:
    """Seconds a step of the harness's measuring loop, as its child runs it, over the measured window."""
    m, _ = measure.train_and_measure(cfg, cfg.workload, progress)
    return m.measured_s / len(m.step_ms)


def loop_cost(rounds: int, steps: int) -> list[float]:
    """Microseconds the harness's measuring loop (``train_and_measure``, as the child runs it) adds to a step over
    the plain loop, per round: both on the tiny model, alternating in this one process."""
    cfg = config(TINY + [("measure.steps", steps)])
    sides = {"harness": lambda: measured_step_s(cfg), "plain": lambda: plain.time_plain(cfg) / steps}
    return [(r["harness"] - r["plain"]) * 1e6 for r in alternated(rounds, sides)]


def in_process(settings: list, rounds: int, harness_ms: list[float] | None = None,
               poller_on: bool = True) -> list[float]:
    """Harness / plain throughput per round, both sides in this one process, training the SAME model, optimizer,
    loader and batch shape (a rebuilt model lands elsewhere in memory, which here moves a step's time by up to 5%):

    * the harness's side is ``train_and_measure``, the function its child runs, writing the child's progress
      markers, while a poller process does what the harness's parent does (``poller.poll``); the poller is
      stopped outside the harness's side;
    * the plain side is the hand-written step, with the same warm-up, the poller stopped.

    A round is one of each, alternating every second or two, so the machine's speed, which wanders over seconds
    here, falls on both alike. ``harness_ms`` gets the harness's mean step time of every round."""
    cfg = config(settings)
    prep, loader, plain_side = _one_training(cfg)
    with _poller_and_channel(poller_on) as (poller, progress), _sharing(prep, loader):
        def harness_side() -> float:
            if poller_on:
                poller.send_signal(signal.SIGCONT)
            seconds = measured_step_s(cfg, progress)
            poller.send_signal(signal.SIGSTOP)
            if harness_ms is not None:
                harness_ms.append(1000.0 * seconds)
            return seconds

        return [r["plain"] / r["harness"] for r in alternated(rounds, {"harness": harness_side, "plain": plain_side})]


def _one_training(cfg) -> tuple[Prepared, object, Callable[[], float]]:
    """The model, optimizer and loader both sides train with, and the plain side: seconds a step of the
    hand-written loop on them, after the same warm-up."""
    device = torch.device(cfg.device)
    prep = measure.preamble(cfg, cfg.workload, device, Rank())  # the child's own set-up, as train_and_measure's
    loader = build_loader(cfg, build_dataset(cfg, cfg.workload), cfg.workload)
    x, y = next(iter(loader))
    x, y = x.to(device, memory_format=prep.memory_format), y.to(device)
    step = plain.hand_step(cfg, prep.model, prep.loss_fn, prep.optimizer, x, y)
    warmup, steps = cfg.measure.warmup_steps, cfg.measure.steps

    def plain_side() -> float:
        for i in range(warmup + steps):
            if i == warmup:
                if device.type == "cuda":  # the window opens on an idle device, as the harness's does
                    torch.cuda.synchronize(device)
                start = time.perf_counter()
            step(i)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return (time.perf_counter() - start) / steps

    return prep, loader, plain_side


@contextlib.contextmanager
def _sharing(prep, loader) -> Iterator[None]:
    """The harness's side trains the plain side's model, and takes its batches from the one loader built for both:
    a loader and a data set built again every round, on one side only, slowed the steps after them (resnet50: 0.957
    of the plain loop with them, 0.997 without, 30 rounds each), a cost of this benchmark's set-up, not of the
    measuring loop. The harness's builders are given back at the end."""
    real = measure.prepare, measure.build_dataset, measure.build_loader
    measure.prepare = lambda *args, **kwargs: prep
    measure.build_dataset = lambda *args, **kwargs: None
    measure.build_loader = lambda *args, **kwargs: loader
    try:
        yield
    finally:
        measure.prepare, measure.build_dataset, measure.build_loader = real


@contextlib.contextmanager
def _poller_and_channel(poller_on: bool) -> Iterator[tuple[subprocess.Popen, Callable[..., None]]]:
    """The poller process (``--poll``: the parent's own wait loop, pointed at this process), stopped, and the
    child's marker writer that tells it each phase over the progress channel; the poller is killed at the end."""
    ours, theirs = socket.socketpair()  # the progress channel: the child's end here, the parent's in the poller
    with tempfile.TemporaryDirectory(prefix="harness-overhead-job-") as job:
        def progress(phase: str, **info) -> None:  # the child's marker writer
            payload = {"phase": phase, "time": time.time(), **info}
            measure.write_json(Path(job) / "progress.json", payload)
            channel.tell(ours, payload, wait=phase == "measure" and poller_on)  # a stopped poller cannot answer

        poller = subprocess.Popen([sys.executable, str(ENTRY), "--poll", str(os.getpid()), job,
                                   str(theirs.fileno())], cwd=REPO, stdout=subprocess.PIPE, env=env(), text=True,
                                  pass_fds=(theirs.fileno(),))
        theirs.close()
        try:
            if poller.stdout.readline().strip() != "ready":
                sys.exit("the poller did not start")
            poller.send_signal(signal.SIGSTOP)
            yield poller, progress
        finally:
            poller.kill()
            poller.wait()
