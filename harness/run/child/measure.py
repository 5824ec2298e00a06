"""The measured training run (inside the isolated child): set up, warm up, open the window, step, close it.

Per step, the host clock is read at each step boundary and around every ``next(loader)``: the
time blocked waiting for the next batch is kept apart from the rest of the step. No per-step
device sync: CUDA work is asynchronous, so the host runs ahead until the launch queue fills and
in steady state each step's host time equals the device's pace. The only syncs are (a) one before
the measured window opens and one after it closes, so that the window holds exactly the measured
steps' device work, and (b) ``loss.item()`` every ``log_every_n_steps`` steps, which is the cost
of logging that the knob exists to measure; that logging step also writes the step, loss and learning rate as a
line of a metrics log (``harness.run.child.step.MetricsLog``), as a trainer's logger does. Other steps write nothing.

Nothing else runs in this process while it measures: no sampling thread (the parent samples memory and GPU
from outside, see ``harness.run.monitor``), no per-step write, no profiler. Per step the loop only reads the clock
and appends to lists; progress markers are written at phase changes only. The warm-up and the measured steps run
the same loop (``_steps``), as nanoGPT's bench.py runs its burn-in and its benchmark. What is read at the window's
edges (CPU clocks, GPM's SM activity) is read right after its two syncs, outside it.

Per-step work (the training step's calls, every knob that acts each step, the faults) is a list of hooks built
before the loop (``harness.run.child.hooks``): ``_steps`` is a fixed core with no test per knob.

:func:`measured_run` keeps the training objects after the window has closed, for what runs after the measurement
(``profile.enabled``: a profile of a few more steps, ``harness.run.child.profiling``); :func:`train_and_measure` is the
measurement alone.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import torch

from harness.fileio import write_text_atomic
from harness.run.child import compiled, device_memory, faults
from harness.run import monitor
from harness.run.child.faults import FaultPlan
from harness.run.child.outcome import NonFiniteLoss
from harness.run.child.profiling import profile_after_window
from harness.run.child.ranks import Rank, any_rank
from harness.run.child.hooks import step_hooks
from harness.run.child.step import MetricsLog, forward_backward
from harness.run.child.stopping import StoppingRule, WarmupRule, rule_for, starting_at, still_queued, warmup_rule_for
from harness.run.child.summary import Extras, Measurement
from harness.workload.data import build_dataset, build_loader, endless
from harness.workload import train_flops, trimmed_imports
from harness.workload.knobs import (Prepared, apply_cpu_affinity, end_periodic_work, periodic_work, prepare,
                                    validation_pass)
from harness.workload.step.loop import collate_of, data_of, loader_pairs, own_loop, zero_grad_of
from harness.workload.step.validation import own_validation_pass, val_data
from harness.config.workload import WorkloadSpec

if TYPE_CHECKING:
    from harness.config import RunConfig
    from harness.profiles import ProfileSummary

Progress = Callable[..., None]  # progress(phase, **info): the child's marker writer (rank 0 writes)


@dataclass
class Loop:
    """Everything the measured loop reads, made once before it starts (its per-step hooks are built from it)."""

    device: torch.device
    rank: Rank
    prep: Prepared | None  # None in loader mode: batches only, no model
    loader: Any
    batches: Iterator
    memory_format: torch.memory_format
    move: bool  # the batch goes to the device each step (model mode's one batch is there already)
    non_blocking: bool
    accum: int
    set_to_none: bool
    log_every: int
    warmup: int
    rule: StoppingRule
    faults: FaultPlan
    after_step: Callable[[int, torch.Tensor, Any], None] | None
    mark_step: Callable[[], None] | None
    m: Measurement
    # DDP with accumulation: ``model.no_sync``, entered for every micro-batch but the last (one all-reduce a step)
    no_sync: Callable[[], Any] | None = None
    events: list[tuple] = field(default_factory=list)
    warmup_rule: WarmupRule | None = None  # warmup_steps=auto: warm up until steady (``warmup`` grows as it goes)
    gpm: monitor.WindowGpm | None = None  # CUDA: GPM's SM activity, read at the window's two syncs
    metrics: MetricsLog | None = None  # the logging step's write (None in loader mode: no loss to log)
    workers: int = 0  # the loader's workers (0: none, or model mode's one batch)
    prefetch: int = 0  # batches each of them holds ready at most (prefetch_factor)
    warmup_wait_ms: list[float] = field(default_factory=list)  # the warm-up's data waits (its queue ran dry?)
    # a micro-batch's forward and backward: the default step's on the loader's (input, target) pair, or the
    # workload's own step's (harness.workload.step.loop.own_loop: its batch of any shape, moved inside)
    step_fn: Callable[..., tuple[Any, Any]] = forward_backward
    zero_grad: Callable[[], None] | None = None  # the optimizer's zero_grad(set_to_none), or the module's own

    def release(self) -> None:
        """Let go of the loader (its workers end here, not whenever the caller lets go of the loop), of the
        metrics log's file and of the knobs' visualisation writes."""
        self.batches = self.loader = None
        if self.metrics is not None:
            self.metrics.close()
        end_periodic_work(self.after_step)


@dataclass
class Window:
    """The measured window's edges: what was read when it opened, and when it closed."""

    threads: int
    clock_start: monitor.CpuClock
    warmup_peak_vram_bytes: float | None = None
    warmup_peak_vram_reserved_bytes: float | None = None
    start_s: float = 0.0  # perf_counter at the first measured step's start
    cpu_pct: float | None = None
    clock_end: monitor.CpuClock | None = None
    sm_active_pct: float | None = None
    allocator_at_open: dict[str, int] = field(default_factory=dict)  # the allocator's counts when it opened


@dataclass
class MeasuredRun:
    """A measurement taken, and the training objects it was taken with (alive until :func:`measured_run` ends)."""

    m: Measurement
    extras: Extras
    loop: Loop
    cfg: RunConfig

    def profile(self, out_dir: str | os.PathLike | None) -> ProfileSummary:
        """``profile.steps`` more training steps under the profiler, after the window (``harness.run.child.profiling``);
        the trace goes to ``out_dir`` (None: no trace, e.g. on ranks other than 0). Never raises."""
        return profile_after_window(self.loop, self.cfg, out_dir)


def train_and_measure(cfg: RunConfig, workload: WorkloadSpec, progress: Progress,
                      rank: Rank | None = None) -> tuple[Measurement, Extras]:
    """Run warm-up + measured steps; return the raw measurement and what the child read of itself. Under DDP each
    rank runs this on its own device and share of the data (``cfg.batch_size`` is then this rank's batch)."""
    with measured_run(cfg, workload, progress, rank) as run:
        return run.m, run.extras


@contextlib.contextmanager
def measured_run(cfg: RunConfig, workload: WorkloadSpec, progress: Progress,
                 rank: Rank | None = None) -> Iterator[MeasuredRun]:
    """:func:`train_and_measure`, with the model, optimizer and loader kept until the ``with`` block ends (the
    loader's workers end there): what runs in the block runs after the window has closed and its fields are read."""
    loop = _set_up(cfg, workload, rank or Rank(), progress)
    try:
        _warm_up(loop, progress)
        window = _open_window(loop, progress)
        loss, window.start_s = _steps(loop, measured=True)
        _close_window(loop, window, loss, progress)
        extras = _collect_extras(loop, window, cfg.compile)
        yield MeasuredRun(loop.m, extras, loop, cfg)
    finally:
        loop.release()


def _set_up(cfg: RunConfig, workload: WorkloadSpec, rank: Rank, progress: Progress) -> Loop:
    """The preamble (seed, CPUs, model and training objects), the loader, and what the loop reads."""
    mode = cfg.measure.mode
    device = rank.device(cfg.device)
    prep = preamble(cfg, workload, device, rank, getattr(progress, "note", None))
    progress("data")  # the model is built: the data and the loader next (where a run's time goes)
    own = prep.own if prep is not None else None
    own_data, collate = data_of(cfg, workload, own)
    loader = build_loader(cfg, build_dataset(cfg, workload, rank.world_size, own_data), workload, rank, collate)
    batches = endless(loader)
    fmt = prep.memory_format if prep else torch.contiguous_format
    step_fn = forward_backward
    if prep is None:  # the loader alone: batches of any shape as (batch, None)
        batches = loader_pairs(workload, batches)
    elif own is not None:  # the workload's own step, on batches of any shape: (batch, None) pairs, moved inside it
        batches, step_fn = own_loop(cfg, prep, batches, fixed=mode == "model")
    elif mode == "model":  # nnU-Net's dummy trainer: one batch kept on the device, the loader never asked again
        x0, y0 = next(batches)
        fixed = (x0.to(device, memory_format=fmt), y0.to(device))
        batches = iter(lambda: fixed, None)
    after_step = periodic_work(cfg, device, _validation(cfg, workload, prep)) if prep is not None else None
    accum = cfg.accumulate_grad_batches
    return Loop(
        device=device, rank=rank, prep=prep, loader=loader, batches=batches, memory_format=fmt,
        move=mode != "model" and own is None, non_blocking=bool(cfg.data.non_blocking), accum=accum,
        set_to_none=cfg.optimizer.zero_grad_set_to_none, log_every=cfg.log_every_n_steps,
        warmup=0 if cfg.measure.warmup_steps == "auto" else cfg.measure.warmup_steps,
        warmup_rule=warmup_rule_for(cfg.measure), faults=faults.plan(cfg.debug, rank.rank), after_step=after_step,
        rule=rule_for(cfg.measure, device.type, cfg.log_every_n_steps if prep is not None else 1),
        # CUDA-graph compile modes: tell the graph trees where an iteration starts, so that outputs of the previous
        # replay may be reused (no sync; without it, a replay can find last step's outputs still "live").
        mark_step=compiled.cudagraph_step_marker(cfg.compile, mode, device),
        m=Measurement(samples_per_step=cfg.batch_size * cfg.accumulate_grad_batches),
        no_sync=grad_sync_skipper(prep.model if prep else None, rank, accum),
        metrics=MetricsLog(prep.optimizer) if prep is not None and rank.rank == 0 else None,
        workers=(loader.num_workers or 0) if mode != "model" else 0,
        prefetch=(loader.prefetch_factor or 0) if mode != "model" and loader.num_workers else 0,
        step_fn=step_fn, zero_grad=zero_grad_of(prep, cfg.optimizer.zero_grad_set_to_none) if prep else None,
    )


def preamble(cfg: RunConfig, workload: WorkloadSpec, device: torch.device, rank: Rank,
             note: Callable[[str], None] | None = None) -> Prepared | None:
    """What a measured process does before its loader, in this order: the seed, the CPUs (first: the loader's workers
    inherit them, and torch's threads are cut to them), then the model and training objects with every knob applied
    (``prepare``: memory limit, backend flags, build); None for the loader alone (``measure.mode=loader``)."""
    torch.manual_seed(cfg.seed)
    apply_cpu_affinity(cfg.cpus, rank.local_rank)
    return prepare(cfg, workload, device, rank, note) if cfg.measure.mode != "loader" else None


def grad_sync_skipper(model, rank: Rank, accum: int) -> Callable[[], Any] | None:
    """DDP's ``no_sync`` when gradients accumulate over micro-batches on several ranks: entered for every micro-batch
    but the last, so that a step all-reduces its gradients once, as Lightning and PyTorch's DDP notes do; without it
    every micro-batch's backward all-reduces. None on one rank, without accumulation, or without a DDP model. (A
    compiled DDP model passes ``no_sync`` on to the module it wraps.)"""
    if not rank.distributed or accum <= 1 or model is None:
        return None
    return getattr(model, "no_sync", None)


def _warm_up(loop: Loop, progress: Progress) -> None:
    """Name the GPU for the parent, then the warm-up steps (compilation, autotuning, the loader's first batches)."""
    device, rank = loop.device, loop.rank
    # The parent samples NVML for this device from outside; it must not initialise CUDA to find it, so the child
    # names the device (UUID, PCI bus) once, in the warm-up marker.
    gpu = monitor.gpu_identity(device.index or 0) if device.type == "cuda" else None
    gpus = {"gpus": rank.gather(gpu)} if gpu and rank.distributed else {}  # every rank's, before the warm-up
    loop.gpm = monitor.WindowGpm.for_identity(gpu) if gpu else None  # NVML's start-up here, not in the window
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    progress("warmup", steps="auto" if loop.warmup_rule else loop.warmup, **({"gpu": gpu} if gpu else {}), **gpus)
    # CUDA: per-step device time from a pair of CUDA events per measured step, recorded on the stream and read
    # only after the window's closing sync (no sync inside the window). Made here, before the loop, so that the
    # loop allocates nothing; recording one costs a launch-queue entry, as a profiler's step marker does.
    loop.events = _step_events(device, loop.rule.steps if loop.prep is not None else 0)
    # The set-up's survivors (the imports, the FLOP count, the model's build) would call a full collection somewhere
    # later: with ~4,000 modules loaded one takes 0.2-1 s on a small CPU, a few % of a window it falls in, and
    # whether it does depends on each process's history. Paid here, before the warm-up's steps, which then warm the
    # caches and the memory that walking every object cost (a window opened right after it began cold).
    gc.collect()
    # one step at a time while any rank asks for one more (the ranks' steps stay paired under DDP)
    while any_rank(rank, loop.warmup_rule is not None and not loop.warmup_rule.done(loop.m.warmup_ms)):
        loop.warmup += 1  # warmup_steps=auto: until the step time is steady
        _steps(loop, measured=False)
    _steps(loop, measured=False)  # the warm-up of a fixed count (after auto's, none is left: an empty range)
    asked, m = len(loop.m.warmup_ms), loop.m
    while any_rank(rank, still_queued(loop.workers * loop.prefetch, loop.accum, m.warmup_ms, loop.warmup_wait_ms,
                                      loop.workers, asked)):
        loop.warmup += 1  # the batches queued during the slowest warm-up step: eaten before the window opens
        _steps(loop, measured=False)
    m.queue_warmup_steps = len(m.warmup_ms) - asked
    loop.rule = starting_at(loop.rule, loop.warmup)  # where the measured steps begin (with auto: known only now)


def _open_window(loop: Loop, progress: Progress) -> Window:
    """(a) The window opens on an idle device, with the warm-up's peaks set apart and the CPU clocks read."""
    device = loop.device
    _sync(device)
    peaks: dict[str, float] = {}
    if device.type == "cuda":
        # The warm-up peak holds cuDNN benchmark trials, autotuning and graph capture: kept apart, and
        # the measured window's peak starts from what the steady state still holds.
        peaks["warmup_peak_vram_bytes"] = float(torch.cuda.max_memory_allocated(device))
        peaks["warmup_peak_vram_reserved_bytes"] = float(torch.cuda.max_memory_reserved(device))
        torch.cuda.reset_peak_memory_stats(device)
    # The parent keeps GPU samples from this marker on, until "measured".
    progress("measure", steps=loop.rule.steps, warmup_ms=loop.m.warmup_ms, auto=loop.rule.auto)
    threads = threading.active_count()  # the tests hold this at 1 without loader threads
    # CPU accounting is read here and at the close (two readings, none per step): exact at the window's
    # edges, which the parent's polls would only see up to one poll late.
    monitor.cpu_percent_since_last_call()
    window = Window(threads=threads, clock_start=monitor.CpuClock.read(), allocator_at_open=allocator_counts(device),
                    **peaks)
    if loop.gpm is not None:  # last: the device idles from the sync to the first step
        loop.gpm.open()
    return window


def _steps(loop: Loop, measured: bool) -> tuple[Any, float]:
    """The warm-up's steps, or the measured ones: (the last loss, None without a model; the first step's start). A
    fixed core: per step, the hooks before it, each micro-batch drawn with the clock read around ``next(batches)``
    and handed on, the hooks after it (``hooks.step_hooks``, built here before the first step: the training step's
    calls and every knob's), the step's time and data wait appended, and the stopping rule's test."""
    m, rule, batches, accum = loop.m, loop.rule, loop.batches, loop.accum
    first, stop = (loop.warmup, loop.warmup + rule.steps) if measured else (len(m.warmup_ms), loop.warmup)
    times, waits = (m.step_ms, m.data_wait_ms) if measured else (m.warmup_ms, loop.warmup_wait_ms)
    max_s, next_check = (rule.max_s, rule.first_check) if measured else (math.inf, math.inf)
    work = step_hooks(loop, loop.events if measured else [], first)
    before, micro, after, satisfied = work.before, work.micro, work.after, rule.satisfied
    t_prev = start = time.perf_counter()
    for step in range(first, stop):
        for hook in before:
            hook(step)
        wait = 0.0
        for index in range(accum):
            t0 = time.perf_counter()
            batch = next(batches)
            wait += time.perf_counter() - t0
            micro(step, index, batch)
        for hook in after:
            hook(step)
        t = time.perf_counter()
        times.append((t - t_prev) * 1000.0)
        t_prev = t
        waits.append(wait * 1000.0)
        if t - start >= max_s:
            break
        if len(times) >= next_check:
            if satisfied(times):  # on CUDA: the blocks between drains (stopping.py)
                break
            next_check *= 2
            t_prev = time.perf_counter()  # the check's own time (well under a millisecond) is in no step
    return work.state.loss, start


def _close_window(loop: Loop, window: Window, loss, progress: Progress) -> None:
    """(a) The window closes when the device has finished the measured steps; the loss is read once more."""
    m = loop.m
    _sync(loop.device)
    m.measured_s = time.perf_counter() - window.start_s
    if loop.gpm is not None:  # first: the device is idle from the sync on
        window.sm_active_pct = loop.gpm.close()
    m.window_start_unix = time.time() - m.measured_s
    m.device_step_ms = [a.elapsed_time(b) for a, b in loop.events[: len(m.step_ms)]]
    window.cpu_pct = monitor.cpu_percent_since_last_call()
    window.clock_end = monitor.CpuClock.read()
    progress("measured")  # the window has closed: the parent stops keeping GPU samples
    if loop.prep is not None and loop.prep.own is not None and loop.prep.own.counts is not None:
        m.samples_counted, m.units_counted = loop.prep.own.counts.window(len(m.step_ms) * loop.accum)
    if loss is not None:
        m.loss_last = loss.item() * loop.accum
        if not math.isfinite(m.loss_last):
            raise NonFiniteLoss(loop.warmup + len(m.step_ms) - 1, m.loss_last, loop.log_every)


def _collect_extras(loop: Loop, window: Window, compile_mode: str) -> Extras:
    """What the child reads of itself once the window has closed: its peaks, CPU shares, compile time, flags."""
    device, prep, start, end = loop.device, loop.prep, window.clock_start, window.clock_end
    with_compile = compile_mode != "off"
    own_peak = monitor.own_peak_rss_bytes()
    cuda = device.type == "cuda"
    return Extras(
        peak_host_rss_bytes=own_peak,
        peak_main_rss_bytes=own_peak,
        cpu_util_pct=window.cpu_pct,
        other_cpu_pct=monitor.other_cpu_percent(start, end),
        window_minor_faults_per_step=(end.minor_faults - start.minor_faults) / max(len(loop.m.step_ms), 1),
        python_threads_in_window=window.threads,
        peak_vram_bytes=float(torch.cuda.max_memory_allocated(device)) if cuda else None,
        peak_vram_reserved_bytes=float(torch.cuda.max_memory_reserved(device)) if cuda else None,
        warmup_peak_vram_bytes=window.warmup_peak_vram_bytes,
        warmup_peak_vram_reserved_bytes=window.warmup_peak_vram_reserved_bytes,
        compile_s=compiled.compile_seconds() if with_compile and prep is not None else None,
        cpu_window=_cpu_window(start, end) if loop.rank.distributed else None,
        backend_flags=json.dumps(prep.backend_flags, sort_keys=True) if prep is not None else "",
        cudagraph_skips=compiled.cudagraph_skips(compile_mode, device) if prep is not None else None,
        gpu_sm_active_pct=window.sm_active_pct,
        gpu_sample_note=loop.gpm.note if loop.gpm is not None else "",
        **allocator_counts(device, window.allocator_at_open),
        **device_memory.fields(device),
        imports_trimmed=trimmed_imports.trimmed_names(),
    )


def allocator_counts(device: torch.device, at_open: dict[str, int] | None = None) -> dict[str, int]:
    """The CUDA caching allocator's retries and survived out-of-memory errors over the run so far (empty off CUDA);
    with ``at_open`` (the counts when the window opened), also the warm-up's (those) and the window's own apart."""
    if device.type != "cuda":
        return {}
    stats = torch.cuda.memory_stats(device)
    out = {"cuda_alloc_retries": int(stats.get("num_alloc_retries", 0)), "cuda_ooms": int(stats.get("num_ooms", 0))}
    for key, before in (at_open or {}).items():
        out[f"warmup_{key}"], out[f"window_{key}"] = before, out[key] - before
    return out


def _cpu_window(start: monitor.CpuClock, end: monitor.CpuClock) -> dict[str, float]:
    """A rank's CPU seconds over its window: rank 0 adds the ranks' together, so that peers are not counted as
    other processes (``ranks.combine``)."""
    return {"busy_s": end.machine_busy_s - start.machine_busy_s, "own_s": end.own_s - start.own_s,
            "wall_s": end.wall_s - start.wall_s, "cpus": os.cpu_count() or 1}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _validation(cfg: RunConfig, workload: WorkloadSpec, prep: Prepared | None) -> Callable[[], None] | None:
    """The validation pass ``val.*`` asks for (None without one), over :func:`validation_loader`: the default step's,
    or the workload's own validation step's (``prep.val``, over its own data where it has some)."""
    if not cfg.val.every_n_steps:
        return None

    if prep.val is None:  # batches collated as the training's are (workload.collate)
        return validation_pass(cfg, prep, validation_loader(cfg, workload, collate=collate_of(workload, prep.own)))
    own_data, collate = val_data(workload, prep.own, prep.val)
    return own_validation_pass(cfg, prep, validation_loader(cfg, workload, own_data, collate), prep.val)


def validation_loader(cfg: RunConfig, workload: WorkloadSpec, own_data=None, collate=None):
    """The validation pass's own loader: ``val.num_workers`` workers, no prefetch setting, persistent when the
    training loader's are (``data.persistent_workers``: the SEResNet speech guide makes "all DataLoader
    instantiations" persistent, so its workers live from one pass to the next), an epoch of ``val.steps`` batches,
    over the workload's validation data (``workload.val_dataset``: its eval transforms, e.g. no training
    augmentation); ``own_data`` and ``collate``: the workload's own (a LightningModule's val_dataloader()'s)."""
    import copy

    val_cfg = copy.deepcopy(cfg)
    val_cfg.data.num_workers, val_cfg.data.prefetch_factor = cfg.val.num_workers, None
    val_cfg.data.persistent_workers = bool(cfg.data.persistent_workers and cfg.val.num_workers > 0)
    val_cfg.data.epoch_steps = cfg.val.steps
    val_workload = workload.for_validation()
    return build_loader(val_cfg, build_dataset(val_cfg, val_workload, own_data=own_data), val_workload,
                        collate=collate)


def _step_events(device: torch.device, steps: int) -> list[tuple]:
    """A (start, end) pair of timing CUDA events for each measured step; none off CUDA."""
    if device.type != "cuda" or steps <= 0:
        return []
    return [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(steps)]


def model_flops_per_sample(cfg: RunConfig, workload: WorkloadSpec) -> float | None:
    """Training FLOPs of one sample for this model and patch size (None if it cannot be counted): model FLOPs,
    recomputation excluded (``harness.workload.train_flops``)."""
    return train_flops.model_flops(cfg, workload)


def hardware_flops_per_sample(cfg: RunConfig, workload: WorkloadSpec, model_flops: float | None) -> float | None:
    """The same with activation checkpointing's recomputation included (``model_flops`` where none)."""
    return train_flops.hardware_flops(cfg, workload, model_flops)


def write_json(path: Path, payload: dict) -> None:
    """A progress marker or the result, whole or not at all (the parent reads them while the child runs)."""
    write_text_atomic(path, json.dumps(payload, default=str))
