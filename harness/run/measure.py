"""The measured training run (inside the isolated child): warm-up, then fixed measured steps.

Per step, the host clock is read at each step boundary and around every ``next(loader)``: the
time blocked waiting for the next batch is kept apart from the rest of the step. No per-step
device sync: CUDA work is asynchronous, so the host runs ahead until the launch queue fills and
in steady state each step's host time equals the device's pace. The only syncs are (a) one before
the measured window opens and one after it closes, so that the window holds exactly the measured
steps' device work, and (b) ``loss.item()`` every ``log_every_n_steps`` steps, which is the cost
of logging that the knob exists to measure.

Nothing else runs in this process while it measures: no sampling thread (the parent samples memory and GPU
from outside, see ``harness.run.monitor``), no per-step write. Per step the loop only reads the clock and
appends to lists; progress markers are written at phase changes only.
"""

from __future__ import annotations

import json
import math
import os
import signal
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from harness.fileio import write_text_atomic
from harness.run import monitor
from harness.run.ranks import Rank
from harness.workload.data import build_dataset, build_loader, endless
from harness.workload.flops import count_train_flops, peak_flops
from harness.workload.knobs import apply_cpu_affinity, periodic_work, prepare
from harness.workload.workloads import WorkloadSpec


class NonFiniteLoss(RuntimeError):
    def __init__(self, step: int, value: float, every: int):
        super().__init__(f"loss became {value}: seen at step {step} (the loss is read every "
                         f"log_every_n_steps={every} steps and at the end, so it may have happened earlier)")
        self.step = step


@dataclass
class Measurement:
    samples_per_step: int
    warmup_ms: list[float] = field(default_factory=list)
    step_ms: list[float] = field(default_factory=list)
    data_wait_ms: list[float] = field(default_factory=list)
    device_step_ms: list[float] = field(default_factory=list)  # CUDA only: per step, from CUDA events
    measured_s: float = 0.0
    window_start_unix: float | None = None  # when the window opened, UNIX seconds (read at its close: no clock in it)
    loss_first: float | None = None
    loss_last: float | None = None


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def inject_fault(cfg, step: int, device: torch.device) -> None:
    """The debug faults, each taking the same path its real counterpart takes."""
    fault = cfg.debug.fault
    if fault == "none" or step != cfg.debug.fault_step:
        return
    if fault == "oom":
        # A real allocation no machine can satisfy: CUDA raises torch.OutOfMemoryError, the CPU
        # allocator its RuntimeError, exactly as a real out-of-memory does.
        torch.empty(1 << 60, dtype=torch.uint8, device=device)
    elif fault == "hang":
        time.sleep(10**7)
    elif fault == "crash":
        os.kill(os.getpid(), signal.SIGKILL)


def _validation(cfg, workload: WorkloadSpec, prep):
    """The validation pass ``val.*`` asks for (None without one): its own loader, workers and no shuffling need."""
    if not cfg.val.every_n_steps:
        return None
    import copy

    from harness.workload.knobs import validation_pass

    val_cfg = copy.deepcopy(cfg)
    val_cfg.data.num_workers, val_cfg.data.prefetch_factor = cfg.val.num_workers, None
    val_cfg.data.persistent_workers = False
    val_cfg.data.epoch_steps = cfg.val.steps
    loader = build_loader(val_cfg, build_dataset(val_cfg, workload), workload)
    return validation_pass(cfg, prep, loader)


def train_and_measure(cfg, workload: WorkloadSpec, progress, rank: Rank | None = None) -> tuple[Measurement, dict]:
    """Run warm-up + measured steps; return the raw measurement and the derived extras. Under DDP each rank runs
    this on its own device and share of the data (``cfg.batch_size`` is then this rank's batch)."""
    torch.manual_seed(cfg.seed)
    rank = rank or Rank()
    apply_cpu_affinity(cfg.cpus, rank.rank)  # first: the loader's workers inherit it
    mode = cfg.measure.mode
    device = rank.device(cfg.device)
    prep = prepare(cfg, workload, device, rank) if mode != "loader" else None
    loader = build_loader(cfg, build_dataset(cfg, workload, rank.world_size), workload, rank)
    batches = endless(loader)
    nb = bool(cfg.data.non_blocking)
    fmt = prep.memory_format if prep else torch.contiguous_format
    if mode == "model":  # nnU-Net's dummy trainer: one batch kept on the device, the loader never asked again
        x0, y0 = next(batches)
        fixed = (x0.to(device, memory_format=fmt), y0.to(device))
        batches = iter(lambda: fixed, None)
    accum = cfg.accumulate_grad_batches
    m = Measurement(samples_per_step=cfg.batch_size * accum)
    auto = cfg.measure.steps == "auto"
    steps = cfg.measure.max_steps if auto else cfg.measure.steps
    total_steps = cfg.measure.warmup_steps + steps
    # steps=auto: the stopping rule is checked after 10, 20, 40, ... measured steps (a handful of checks in all),
    # and the time cap is one comparison per step of a clock already read.
    next_check = AUTO_FIRST_CHECK if auto else math.inf
    max_s = cfg.measure.max_s if auto else math.inf
    # Read once, so that the loop's only per-step work beyond training is the clock and two list appends.
    warmup = cfg.measure.warmup_steps
    log_every = cfg.log_every_n_steps
    nan_step = cfg.debug.fault_step if cfg.debug.fault == "nan" else -1
    fault_step = cfg.debug.fault_step if cfg.debug.fault in ("oom", "hang", "crash") else -1
    if rank.rank != cfg.debug.fault_rank:
        nan_step = fault_step = -1
    slowdown_s = cfg.debug.slowdown_ms / 1000.0
    set_to_none = cfg.optimizer.zero_grad_set_to_none
    move = mode != "model"  # model mode's one batch is on the device already, in the model's memory format
    if prep is not None:
        model, loss_fn, autocast = prep.model, prep.loss_fn, prep.autocast
    after_step = periodic_work(cfg, device, _validation(cfg, workload, prep)) if prep is not None else None
    drop_out = after_step is None  # no knob reads the output after the step

    # The parent samples NVML for this device from outside; it must not initialise CUDA to find it, so the child
    # names the device (UUID, PCI bus) once, in the warm-up marker.
    gpu = monitor.gpu_identity(device.index or 0) if device.type == "cuda" else None
    gpus = {"gpus": rank.gather(gpu)} if gpu and rank.distributed else {}  # every rank's, before the warm-up
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    # CUDA-graph compile modes: tell the graph trees where an iteration starts, so that outputs of the previous
    # replay may be reused (no sync; without it, a replay can find last step's outputs still "live").
    mark_step = _cudagraph_step_marker(cfg, device)
    vram: dict[str, float | None] = {}
    progress("warmup", steps=cfg.measure.warmup_steps, **({"gpu": gpu} if gpu else {}), **gpus)
    threads_in_window = None
    # CUDA: per-step device time from a pair of CUDA events per measured step, recorded on the stream and read
    # only after the window's closing sync (no sync inside the window). Made here, before the loop, so that the
    # loop allocates nothing; recording one costs a launch-queue entry, as a profiler's step marker does.
    events = _step_events(device, steps if mode != "loader" else 0)
    ev_start = ev_end = None

    t_prev = time.perf_counter()
    window_start = t_prev
    loss = None
    for step in range(total_steps):
        if step == warmup:
            _sync(device)  # (a) the window opens on an idle device
            if device.type == "cuda":
                # The warm-up peak holds cuDNN benchmark trials, autotuning and graph capture: kept apart, and
                # the measured window's peak starts from what the steady state still holds.
                vram["warmup_peak_vram_bytes"] = float(torch.cuda.max_memory_allocated(device))
                vram["warmup_peak_vram_reserved_bytes"] = float(torch.cuda.max_memory_reserved(device))
                torch.cuda.reset_peak_memory_stats(device)
            # The parent keeps GPU samples from this marker on, until "measured".
            progress("measure", steps=steps, warmup_ms=m.warmup_ms, auto=auto)
            threads_in_window = threading.active_count()  # the tests hold this at 1 without loader threads
            # CPU accounting is read here and at the close (two readings, none per step): exact at the window's
            # edges, which the parent's polls would only see up to one poll late.
            monitor.cpu_percent_since_last_call()
            clock_start = monitor.CpuClock.read()
            t_prev = window_start = time.perf_counter()
        wait = 0.0
        if mark_step:
            mark_step()
        if events and step >= warmup:
            ev_start, ev_end = events[step - warmup]
        if prep:
            prep.optimizer.zero_grad(set_to_none=set_to_none)
        for micro in range(accum):
            t0 = time.perf_counter()
            x, y = next(batches)
            wait += time.perf_counter() - t0
            if prep is None:
                continue
            if ev_start is not None and micro == 0:  # the device's step starts once the first batch is in hand
                ev_start.record()
            if move:
                x = x.to(device, non_blocking=nb, memory_format=fmt)
                y = y.to(device, non_blocking=nb)
            out = None
            try:
                with autocast():
                    out = model(x)
                    loss = loss_fn(out, y)
                    if accum > 1:
                        loss = loss / accum
            except Exception as exc:  # the model or loss refuses this batch: say what the batch was
                raise shapes_error(exc, x, y, out) from exc
            if drop_out:  # as `loss_fn(model(x), y)` leaves it: backward may free the output as it goes
                out = None
            if step == nan_step:
                loss = loss * float("nan")
            (prep.scaler.scale(loss) if prep.scaler else loss).backward()
        if prep and prep.scaler:
            prep.scaler.step(prep.optimizer)
            prep.scaler.update()
        elif prep:
            prep.optimizer.step()
        if ev_end is not None:
            ev_end.record()
        if after_step is not None:
            after_step(step, x, out)
        if step == fault_step:
            inject_fault(cfg, step, device)
        if slowdown_s:
            time.sleep(slowdown_s)
        if loss is not None and (step == 0 or (step + 1) % log_every == 0):
            value = loss.item() * accum  # (b) the logging sync
            if step == 0:
                m.loss_first = value
            if not math.isfinite(value):
                raise NonFiniteLoss(step, value, log_every)
        t = time.perf_counter()
        (m.warmup_ms if step < warmup else m.step_ms).append((t - t_prev) * 1000.0)
        t_prev = t
        if step < warmup:
            continue
        m.data_wait_ms.append(wait * 1000.0)
        if t - window_start >= max_s:
            break
        if len(m.step_ms) >= next_check:
            if mean_is_known(m.step_ms, AUTO_REL_HALF_WIDTH):
                break
            next_check *= 2
            t_prev = time.perf_counter()  # the check's own time (well under a millisecond) is in no step
    _sync(device)  # (a) the window closes when the device has finished the measured steps
    last = step
    m.measured_s = time.perf_counter() - window_start
    m.window_start_unix = time.time() - m.measured_s
    m.device_step_ms = [a.elapsed_time(b) for a, b in events[: len(m.step_ms)]]
    cpu_pct = monitor.cpu_percent_since_last_call()
    clock_end = monitor.CpuClock.read()
    other_pct = monitor.other_cpu_percent(clock_start, clock_end)
    progress("measured")  # the window has closed: the parent stops keeping GPU samples
    if loss is not None:
        m.loss_last = loss.item() * accum
        if not math.isfinite(m.loss_last):
            raise NonFiniteLoss(last, m.loss_last, cfg.log_every_n_steps)
    extras = _extras(cfg, prep, cpu_pct, device)
    extras["other_cpu_pct"] = other_pct
    compiled_s = _compile_seconds() if cfg.compile != "off" and prep is not None else None
    if compiled_s is not None:  # else summarize's estimate from the warm-up steps stands
        extras["compile_s"] = compiled_s
    if rank.distributed:  # the ranks' CPU time together, so that peers are not counted as other processes
        extras["cpu_window"] = {"busy_s": clock_end.machine_busy_s - clock_start.machine_busy_s,
                                "own_s": clock_end.own_s - clock_start.own_s, "wall_s": clock_end.wall_s - clock_start.wall_s,
                                "cpus": os.cpu_count() or 1}
    extras["python_threads_in_window"] = threads_in_window
    extras.update(vram)
    if prep is not None:
        extras["backend_flags"] = json.dumps(prep.backend_flags, sort_keys=True)
    del batches, loader
    return m, extras


class BatchRefused(RuntimeError):
    """The model's forward or the loss failed on a batch: an `error` record whose message shows the shapes."""


def shapes_error(exc: Exception, x: torch.Tensor, y: torch.Tensor, out=None) -> Exception:
    """``exc`` itself when it is out of memory or compile's own (classified as such), else a BatchRefused that
    names the batch's shapes (and the model's output, when the forward ran and the loss failed)."""
    if isinstance(exc, torch.OutOfMemoryError) or is_compile_failure(exc):
        return exc
    what = "the model" if out is None else f"the loss (the model's output: {_shape(out)})"
    return BatchRefused(f"{what} failed on a batch of input {_shape(x)} and target {_shape(y)} (batch first): "
                        f"{type(exc).__name__}: {exc}")


COMPILE_MODULES = ("torch._dynamo", "torch._inductor")


def is_compile_failure(exc: BaseException) -> bool:
    """An exception raised by torch.compile's tracer or compiler (anywhere in the cause/context chain)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if type(exc).__module__.startswith(COMPILE_MODULES):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _shape(t) -> str:
    if not isinstance(t, torch.Tensor):  # a model may return a tuple (deep supervision) or a dict
        return type(t).__name__
    return f"[{', '.join(map(str, t.shape))}] {str(t.dtype).removeprefix('torch.')}"


def _extras(cfg, prep, cpu_pct: float, device: torch.device) -> dict:
    own_peak = monitor.own_peak_rss_bytes()
    out = {
        # The child's own exact peak (the kernel's high-water mark, read once). The parent, which samples this
        # process and its loader workers from outside, adds the workers' peaks and the GPU metrics
        # (``monitor.metrics``); run in-process (tests), these are what the process knows of itself.
        "peak_host_rss_bytes": own_peak,
        "peak_main_rss_bytes": own_peak,
        "peak_worker_rss_bytes": None,
        "worker_rss_bytes": [],
        "cpu_util_pct": cpu_pct,
        "gpu_util_pct": None,
        "gpu_mem_used_bytes": None,
        "gpu_power_w": None,
        "gpu_sample_note": "",
        # Peaks of the measured window (reset when it opens). Allocated: live tensors. Reserved: what the caching
        # allocator holds from the device, which is what must fit in the GPU's memory.
        "peak_vram_bytes": float(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else None,
        "peak_vram_reserved_bytes": float(torch.cuda.max_memory_reserved(device)) if device.type == "cuda" else None,
        "checkpointed_units": prep.checkpointed_units if prep else 0,
    }
    return out


AUTO_FIRST_CHECK = 10  # measured steps before steps=auto first asks whether the mean is known
AUTO_REL_HALF_WIDTH = 0.01  # steps=auto stops once the mean step time's 95% interval is within +-1%


def mean_is_known(step_ms: list[float], rel: float) -> bool:
    """Whether the 95% t-interval of the mean step time is within +-rel of the mean (pyperf's calibration idea).

    Steps are not independent (a slow stretch of the machine spans several), so this is a stopping rule, not a
    claim about the run: the noise that matters between runs is handled by repeats (docs/statistics.md).
    """
    n = len(step_ms)
    if n < AUTO_FIRST_CHECK:  # too few to tell (and t975 is exact enough from 9 degrees of freedom on)
        return False
    mean = statistics.fmean(step_ms)
    half = t975(n - 1) * statistics.stdev(step_ms, mean) / math.sqrt(n)
    return mean > 0 and half <= rel * mean


def t975(df: int) -> float:
    """Student's t 97.5% quantile (Cornish-Fisher expansion around the normal's: within 0.2% from df=9 on), so
    that the child needs no scipy."""
    z = 1.959963984540054
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def _compile_seconds() -> float | None:
    """Seconds torch.compile spent compiling in this process (forward and backward graphs, recompiles included),
    from Dynamo's own timers: compilation only, not cuDNN autotuning, loader start or the first steps' run time.
    None where this torch does not keep them (then the record keeps the warm-up estimate)."""
    try:
        from torch._dynamo.utils import calculate_time_spent

        spent = calculate_time_spent()
    except Exception:
        return None
    total = spent.get("total_wall_time")
    if total is None:
        total = spent.get("entire_frame_compile", 0.0) + spent.get("entire_backward_compile", 0.0)
    return float(total) if total else None


def _step_events(device: torch.device, steps: int) -> list[tuple]:
    """A (start, end) pair of timing CUDA events for each measured step; none off CUDA."""
    if device.type != "cuda" or steps <= 0:
        return []
    return [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(steps)]


def _cudagraph_step_marker(cfg, device: torch.device):
    """``torch.compiler.cudagraph_mark_step_begin`` when this run captures CUDA graphs, else None."""
    from harness.config import CUDAGRAPH_COMPILE_MODES

    if device.type != "cuda" or cfg.compile not in CUDAGRAPH_COMPILE_MODES or cfg.measure.mode == "loader":
        return None
    return getattr(torch.compiler, "cudagraph_mark_step_begin", None)


def model_flops_per_sample(cfg, workload: WorkloadSpec) -> float | None:
    """Training FLOPs of one sample for this model and patch size (None if it cannot be counted)."""
    if cfg.measure.mode == "loader":
        return None
    shape = (1, workload.in_channels, *cfg.data.patch_size)
    try:
        from harness.workload.build import build_model

        return count_train_flops(lambda: build_model(cfg), shape)
    except Exception:  # a model that cannot run on meta tensors: MFU stays empty, never guessed
        return None


def summarize(cfg, workload: WorkloadSpec, m: Measurement, extras: dict, flops: float | None, gpu_name: str) -> dict:
    """The record's metric fields from a raw measurement."""
    steps = len(m.step_ms)
    samples_per_s = steps * m.samples_per_step / m.measured_s if m.measured_s > 0 else None
    p50 = statistics.median(m.step_ms)
    wait_total = sum(m.data_wait_ms)
    peak = peak_flops(gpu_name, cfg.precision, cfg.tf32) if cfg.device == "cuda" else None
    compile_s = None
    if cfg.compile != "off":
        compile_s = max(0.0, (sum(m.warmup_ms) - len(m.warmup_ms) * p50) / 1000.0)
    return {
        "samples_per_step": m.samples_per_step,
        "warmup_steps": len(m.warmup_ms),
        "measured_steps": steps,
        "samples_per_s": samples_per_s,
        "units_per_s": samples_per_s * workload.units_in(tuple(cfg.data.patch_size)) if samples_per_s else None,
        "step_ms_p50": p50,
        "step_ms_p90": _quantile(m.step_ms, 0.9),
        "step_ms_mean": statistics.fmean(m.step_ms),
        "data_wait_frac": wait_total / (m.measured_s * 1000.0) if m.measured_s > 0 else None,
        "data_wait_ms_p50": statistics.median(m.data_wait_ms),
        # Device time per step (first batch in hand -> optimizer step done, on the stream), and the steps' share of
        # the measured window. A share well below 1 means the stream sat idle between steps (the host was late:
        # data, Python, syncs); gaps inside a step (a launch-bound step) count as the step's.
        "device_step_ms_p50": statistics.median(m.device_step_ms) if m.device_step_ms else None,
        "device_step_frac": (sum(m.device_step_ms) / (m.measured_s * 1000.0)
                             if m.device_step_ms and m.measured_s > 0 else None),
        "device_step_ms": m.device_step_ms,
        "compile_s": compile_s,
        "first_step_s": m.warmup_ms[0] / 1000.0 if m.warmup_ms else None,
        "measured_s": m.measured_s,
        "window_start_unix": m.window_start_unix,
        "flops_per_sample": flops,
        "peak_flops": peak,
        "mfu": flops * samples_per_s / peak if (flops and peak and samples_per_s) else None,
        "loss_first": m.loss_first,
        "loss_last": m.loss_last,
        "step_ms": m.step_ms,
        "data_wait_ms": m.data_wait_ms,
        "world_size": 1,  # a multi-device run's rank 0 replaces this summary with every rank's (ranks.combine)
        **{k: v for k, v in extras.items() if k != "checkpointed_units"},
    }


def _quantile(values: list[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default method)."""
    import numpy as np

    return float(np.quantile(values, q))


def write_json(path: Path, payload: dict) -> None:
    """A progress marker or the result, whole or not at all (the parent reads them while the child runs)."""
    write_text_atomic(path, json.dumps(payload, default=str))
