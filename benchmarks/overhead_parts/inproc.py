"""In one process: the harness's measuring loop (``train_and_measure``, the function its child runs) against the
plain loop, on one model (``in_process``), and on a tiny one, its own cost per step (``loop_cost``). Both sides
alternate in short blocks, the order flipping every round (``alternated``), so that the machine's slow minutes and
a process's own speed fall on both sides alike."""

from __future__ import annotations

import contextlib
import gc
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import psutil
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


@dataclass
class Counts:
    """What the in-process blocks count besides their times, none of it depending on the machine's load: each
    side's minor page faults a measured step, every block, the unkept round's first (the heap's state: the same on
    both sides when the method is fair), and the poller's CPU seconds inside the harness's windows with those
    windows' seconds (the parent's real cost, in the ratio: it competes with the model's threads for the CPUs)."""

    faults: dict[str, list[float]] = field(default_factory=dict)
    poller_cpu_s: float = 0.0
    harness_window_s: float = 0.0


WARM_ROUNDS = 1  # A B B A rounds run first and not kept (``abba``)
WARM_BLOCKS = 2 * WARM_ROUNDS  # a side's blocks in them


def abba(rounds: int, sides: dict[str, Callable[[], float]], warm: int = WARM_ROUNDS) -> list[dict[str, float]]:
    """Each side's seconds a step, every round, from two blocks a side in the order A B B A in even rounds and
    B A A B in odd ones: a steady drift of the machine over a round falls on both sides alike (each side's two
    blocks average to the round's middle), where one block a side leans every round's ratio on its first side; the
    first block's place still alternates between the sides from round to round. ``warm`` rounds run first and are
    not kept: the process's first blocks grow its heap (unet3d on one thread: ~1,000 minor page faults a measured
    step in the first two harness blocks, none after), on whichever side runs first."""
    names, out = list(sides), []
    for r in range(-warm, rounds):
        a, b = names if r % 2 == 0 else names[::-1]
        seconds: dict[str, float] = {a: 0.0, b: 0.0}
        for name in (a, b, b, a):
            seconds[name] += sides[name]() / 2
        if r >= 0:
            out.append(seconds)
    return out


def minor_faults() -> int:
    """This process's minor page faults so far (all its threads): a count that does not depend on the load."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


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
               poller_on: bool = True, counts: Counts | None = None) -> list[float]:
    """Harness / plain throughput per round, both sides in this one process, training the SAME model, optimizer,
    batch and loader (a rebuilt model lands elsewhere in memory, which here moves a step's time by up to 5%):

    * the harness's side is ``train_and_measure``, the function its child runs, writing the child's progress
      markers, while a poller process does what the harness's parent does (``poller.poll``); the poller is
      stopped outside the harness's side;
    * the plain side is the hand-written step, with the same warm-up after the same garbage collection, the
      poller stopped.

    A round is two blocks of each, A B B A (``abba``), every block a second or two, so the machine's speed, which
    wanders over seconds here, falls on both alike; one unkept round warms the process first. ``harness_ms`` gets
    the harness's mean step time of every kept round; ``counts`` what the blocks count."""
    cfg = config(settings)
    counts = counts or Counts()
    prep, batch, plain_side = _one_training(cfg, counts.faults)
    with _poller_and_channel(poller_on) as (poller, progress), _sharing(prep, _OneBatch(batch)):
        edges: list[tuple[int, float]] = []  # (faults, the poller's CPU seconds) at the window's two edges
        poller_cpu = psutil.Process(poller.pid)

        def marker(phase: str, **info) -> None:  # the child's markers, and the counts read at the window's edges
            if phase in ("measure", "measured"):
                edges.append((minor_faults(), sum(poller_cpu.cpu_times()[:2])))
            progress(phase, **info)

        def harness_side() -> float:
            if poller_on:
                poller.send_signal(signal.SIGCONT)
            edges.clear()
            seconds = measured_step_s(cfg, marker)
            poller.send_signal(signal.SIGSTOP)
            (faults_open, cpu_open), (faults_closed, cpu_closed) = edges
            counts.faults.setdefault("harness", []).append((faults_closed - faults_open) / cfg.measure.steps)
            counts.poller_cpu_s += cpu_closed - cpu_open
            counts.harness_window_s += seconds * cfg.measure.steps
            return seconds

        rounds_s = abba(rounds, {"harness": harness_side, "plain": plain_side})
    if harness_ms is not None:
        harness_ms.extend(1000.0 * r["harness"] for r in rounds_s)
    return [r["plain"] / r["harness"] for r in rounds_s]


def _one_training(cfg, faults: dict[str, list[float]]) -> tuple[Prepared, tuple, Callable[[], float]]:
    """The model, optimizer and batch both sides train with, and the plain side: seconds a step of the hand-written
    loop on them, after the same garbage collection and warm-up as the child's (``faults["plain"]`` gets its
    minor page faults a measured step, every block)."""
    device = torch.device(cfg.device)
    prep = measure.preamble(cfg, cfg.workload, device, Rank())  # the child's own set-up, as train_and_measure's
    loader = build_loader(cfg, build_dataset(cfg, cfg.workload), cfg.workload)
    x, y = next(iter(loader))
    x, y = x.to(device, memory_format=prep.memory_format), y.to(device)
    step = plain.hand_step(cfg, prep.model, prep.loss_fn, prep.optimizer, x, y)
    warmup, steps = cfg.measure.warmup_steps, cfg.measure.steps

    def plain_side() -> float:
        gc.collect()  # as the child does before its warm-up (measure._warm_up): the same caches cooled, the same heap
        for i in range(warmup + steps):
            if i == warmup:
                if device.type == "cuda":  # the window opens on an idle device, as the harness's does
                    torch.cuda.synchronize(device)
                start, opened = time.perf_counter(), minor_faults()
            step(i)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds = (time.perf_counter() - start) / steps
        faults.setdefault("plain", []).append((minor_faults() - opened) / steps)
        return seconds

    return prep, (x, y), plain_side


class _OneBatch:
    """A loader of the one batch the plain side trains: what the harness's side iterates (``data.endless``)."""

    sampler = None

    def __init__(self, batch: tuple):
        self.batch = batch

    def __iter__(self) -> Iterator[tuple]:
        yield self.batch


@contextlib.contextmanager
def _sharing(prep, loader) -> Iterator[None]:
    """The harness's side trains the plain side's model, and takes its batches from ``loader``, the plain side's
    one batch: a loader and a data set built again every round, on one side only, slowed the steps after them
    (resnet50: 0.957 of the plain loop with them, 0.997 without, 30 rounds each), a cost of this benchmark's set-up,
    not of the measuring loop; and a loader shared but iterated afresh gave the harness's side a new random batch
    every round (new memory, other values) while the plain side trained its one. The harness's builders are given
    back at the end."""
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
