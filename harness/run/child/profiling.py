"""Why a rung is slow: a profile of a few more training steps, taken after the measured window has closed.

The measured loop (``harness.run.child.measure``) never runs under the profiler and gains no operation for it: the
profiled steps use their own step function, :func:`marked_step`, built from the same model, loss, optimizer and
batch iterator, which wraps each phase of the step (data wait, host-to-device copy, forward, backward, optimizer)
in a ``record_function`` marker. :func:`profile_steps` runs it under ``torch.profiler`` (one unrecorded step for
the profiler's own start-up, then ``steps`` recorded ones), and returns a :class:`harness.profiles.ProfileSummary`:
the top operators by self device and self CPU time, the step's breakdown by phase, on CUDA the share of the span
with no kernel running, torch.compile's graph breaks and recompiles, and a gzipped Chrome/Perfetto trace capped in
size. A profile that fails says why in its summary; it never fails the run, whose measurement is already taken.

Where it runs (``profile.enabled=true``): the child (``harness.run.child``) measures inside
``harness.run.child.measure.measured_run``, writes its result, then calls :func:`profile_after_window` with the measured
loop, and writes its result again with the profile's summary (``profile_json``); the parent moves the trace into
the results folder (``harness.profiles.store_trace``) and the record keeps its path (``profile_trace``).
"""

from __future__ import annotations

import bisect
import contextlib
import gzip
import json
import os
import shutil
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, record_function, schedule

from harness.profiles import (CompileStats, OperatorTime, ProfileSummary, TraceInfo, failed_summary, trace_name)

# The markers of a profiled step's phases: named so that they cannot be mistaken for torch's own ranges.
MARKERS: Mapping[str, str] = {"data_wait": "harness.data_wait", "copy": "harness.copy", "forward": "harness.forward",
                              "backward": "harness.backward", "optimizer": "harness.optimizer"}
DEFAULT_STEPS = 5
DEFAULT_TRACE_LIMIT_BYTES = 16 * 2**20
TOP_OPERATORS = 25  # per table: enough that a diff rarely meets an operator that fell out of one side's table
PROFILER_WARMUP_STEPS = 1  # the profiler's own start-up (CUPTI, first events) falls in a step it does not record


@dataclass
class StepParts:
    """What the measured loop trains with, for :func:`marked_step` to run the same step with markers."""

    model: Any
    loss_fn: Any
    optimizer: Any
    batches: Iterator
    device: torch.device
    autocast: Callable[[], Any] = contextlib.nullcontext
    scaler: Any = None
    accumulate: int = 1
    memory_format: torch.memory_format = torch.contiguous_format
    non_blocking: bool = False
    move: bool = True  # False in model mode: the one batch is on the device already
    set_to_none: bool = True
    drop_output: bool = True  # no knob reads the output after the step: backward may free it as it goes
    mark_step: Callable[[], None] | None = None  # CUDA graphs: where an iteration starts
    after_step: Callable[[int, Any, Any], None] | None = None  # the knobs' periodic work, as measured
    log_every: int = 0  # the logging sync (loss.item()) every N steps, as measured; 0: never
    no_sync: Callable[[], Any] | None = None  # DDP with accumulation: all but the last micro-batch skip the all-reduce


def marked_step(parts: StepParts, markers: Mapping[str, str] = MARKERS) -> Callable[[int], None]:
    """The measured loop's training step with a ``record_function`` marker around each phase."""
    p = parts
    synced = contextlib.nullcontext()

    def step(index: int) -> None:
        if p.mark_step is not None:
            p.mark_step()
        with record_function(markers["optimizer"]):
            p.optimizer.zero_grad(set_to_none=p.set_to_none)
        loss = x = out = None
        for micro in range(p.accumulate):
            with record_function(markers["data_wait"]):
                x, y = next(p.batches)
            if p.move:
                with record_function(markers["copy"]):
                    x = x.to(p.device, non_blocking=p.non_blocking, memory_format=p.memory_format)
                    y = y.to(p.device, non_blocking=p.non_blocking)
            skip_sync = p.no_sync is not None and micro < p.accumulate - 1
            with p.no_sync() if skip_sync else synced:
                with record_function(markers["forward"]), p.autocast():
                    out = p.model(x)
                    loss = p.loss_fn(out, y)
                    if p.accumulate > 1:
                        loss = loss / p.accumulate
                if p.drop_output:
                    out = None
                with record_function(markers["backward"]):
                    (p.scaler.scale(loss) if p.scaler else loss).backward()
        with record_function(markers["optimizer"]):
            if p.scaler:
                p.scaler.step(p.optimizer)
                p.scaler.update()
            else:
                p.optimizer.step()
        if p.after_step is not None:
            p.after_step(index, x, out)
        if p.log_every and (index + 1) % p.log_every == 0:
            loss.item()

    return step


def profile_after_window(loop, cfg, out_dir: str | os.PathLike | None) -> ProfileSummary:
    """``cfg.profile.steps`` steps of the measured loop (``harness.run.child.measure.Loop``: its model, optimizer,
    batches and knobs), numbered on from the measured ones, under the profiler. Never raises."""
    steps, device = cfg.profile.steps, loop.device
    if loop.prep is None:
        return failed_summary(device.type, steps, "not profiled: measure.mode=loader runs no training step")
    prep = loop.prep
    if prep.own is not None:
        return failed_summary(device.type, steps, f"not profiled: {prep.own.name} is not yet profiled phase by phase")
    parts = StepParts(model=prep.model, loss_fn=prep.loss_fn, optimizer=prep.optimizer, batches=loop.batches,
                      device=device, autocast=prep.autocast, scaler=prep.scaler, accumulate=loop.accum,
                      memory_format=loop.memory_format, non_blocking=loop.non_blocking, move=loop.move,
                      set_to_none=loop.set_to_none, drop_output=loop.after_step is None, mark_step=loop.mark_step,
                      after_step=loop.after_step, log_every=loop.log_every, no_sync=loop.no_sync)
    return profile_steps(marked_step(parts), steps, device, out_dir, run_id="profile",
                         trace_limit_bytes=int(cfg.profile.trace_limit_mb * 2**20),
                         first_step=loop.warmup + len(loop.m.step_ms), compiled=cfg.compile != "off")


def profile_steps(step: Callable[[int], None], steps: int, device: torch.device, out_dir: str | os.PathLike | None,
                  run_id: str = "profile", trace_limit_bytes: int = DEFAULT_TRACE_LIMIT_BYTES,
                  markers: Mapping[str, str] = MARKERS, first_step: int = 0, compiled: bool = False) -> ProfileSummary:
    """Run ``step(first_step + i)`` under the profiler: one unrecorded step, then ``steps`` recorded ones.

    Call it after the measured window has closed. The trace goes to ``out_dir/<run_id>.trace.json.gz`` (no trace
    when ``out_dir`` is None: e.g. the ranks other than 0), capped at ``trace_limit_bytes``. ``compiled``: read
    torch.compile's counters. Any failure becomes the summary's ``error``.
    """
    if steps < 1:
        raise ValueError(f"profile steps must be at least 1, not {steps}")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    before = _dynamo_counters() if compiled else None
    total = PROFILER_WARMUP_STEPS + steps
    try:
        with torch.profiler.profile(activities=activities, record_shapes=False, with_stack=False,
                                    profile_memory=False,
                                    schedule=schedule(wait=0, warmup=PROFILER_WARMUP_STEPS, active=steps, repeat=1),
                                    ) as prof:
            for i in range(total):
                step(first_step + i)
                if i in (PROFILER_WARMUP_STEPS - 1, total - 1):
                    # The recorded span opens on an idle device and holds exactly its steps' device work, as
                    # the measured window does (the second sync lies inside the last recorded step).
                    _sync(device)
                prof.step()
        summary = summarize_events(prof.events(), prof.key_averages(), device.type, steps, markers)
    except Exception as exc:  # the measurement is already taken: a failed profile is a note, not a failed run
        return failed_summary(device.type, steps, f"profiling failed: {type(exc).__name__}: {exc}"[:2000])
    if compiled:
        summary.compile = compile_stats(before or {}, _dynamo_counters())
    if out_dir is not None:
        summary.trace = write_trace(prof, Path(out_dir), trace_name(run_id), trace_limit_bytes)
    return summary


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def summarize_events(events, averages, device_type: str, steps: int, markers: Mapping[str, str]) -> ProfileSummary:
    """The summary of a profiler's recorded events (``prof.events()``, ``prof.key_averages()``)."""
    # On CUDA the profiler repeats step ranges and markers on the device's timeline (user annotations): the host's
    # ranges are the CPU ones.
    host_events = [e for e in events if e.device_type == torch.autograd.DeviceType.CPU]
    step_ranges = sorted((e.time_range.start, e.time_range.end) for e in host_events if _is_step(e.name))
    if not step_ranges:
        raise RuntimeError("the profiler recorded no step (no ProfilerStep range)")
    start, host_end = step_ranges[0][0], step_ranges[-1][1]
    kernels = _device_intervals(events) if device_type == "cuda" else []
    end = max([host_end] + [b for _, b in kernels])
    span_us = end - start
    per_step = 1000.0 * steps  # microseconds over the span -> milliseconds per step
    phase_of = {name: phase for phase, name in markers.items()}
    ranges = sorted((e.time_range.start, e.time_range.end, phase_of[e.name]) for e in host_events
                    if e.name in phase_of)
    host = {phase: 0.0 for phase in ("data_wait", "copy", "forward", "backward", "optimizer")}
    for a, b, phase in ranges:
        host[phase] += (b - a) / per_step
    host["other"] = max(0.0, span_us / per_step - sum(host.values()))
    summary = ProfileSummary(device=device_type, steps=steps, span_ms=span_us / 1000.0, host_ms=host)
    skip = set(markers.values())
    cpu_ops = [a for a in averages if _is_operator(a, skip)]
    summary.top_cpu = _top(cpu_ops, "self_cpu_time_total", span_us)
    if device_type == "cuda":
        summary.top_device = _top(cpu_ops, "self_device_time_total", span_us)
        summary.device_ms = _device_breakdown(events, kernels, ranges, start, span_us, per_step)
        linked_us = sum(a.self_device_time_total for a in cpu_ops)
        _add_unlinked_kernels(summary, sum(b - a for a, b in kernels) - linked_us, span_us)
    return summary


def _is_step(name: str) -> bool:
    return name.startswith("ProfilerStep")


def _is_operator(average, skip: set[str]) -> bool:
    """A host-side entry of key_averages that is an operator (not a step range, a marker or a device event)."""
    on_host = getattr(average, "device_type", None) in (None, torch.autograd.DeviceType.CPU)
    return on_host and not _is_step(average.key) and average.key not in skip


def _top(averages, attribute: str, span_us: float) -> list[OperatorTime]:
    chosen = sorted((a for a in averages if getattr(a, attribute, 0) > 0), key=lambda a: -getattr(a, attribute))
    return [OperatorTime(name=a.key, calls=int(a.count), total_ms=getattr(a, attribute) / 1000.0,
                         share=getattr(a, attribute) / span_us if span_us > 0 else 0.0)
            for a in chosen[:TOP_OPERATORS]]


def _device_intervals(events) -> list[tuple[float, float]]:
    """(start, end) of every kernel, copy and set on the device, in the host's time base (microseconds)."""
    device = torch.autograd.DeviceType.CPU
    return sorted((e.time_range.start, e.time_range.end) for e in events
                  if e.device_type != device and not getattr(e, "is_user_annotation", False))


def busy_time(intervals: list[tuple[float, float]], start: float, end: float) -> float:
    """The length of the union of ``intervals`` clipped to [start, end]: time with at least one of them running."""
    busy = 0.0
    reach = start
    for a, b in sorted(intervals):
        a, b = max(a, reach), min(b, end)
        if b > a:
            busy += b - a
            reach = b
    return busy


def _device_breakdown(events, kernels, ranges, start: float, span_us: float, per_step: float) -> dict[str, float]:
    """Device time per step by the phase whose marker was open when its kernels were launched, and idle time.

    Kernels are found through the operator that launched them (its ``kernels``), placed by the operator's start:
    the autograd engine runs backward on threads of its own, but always while the main thread is inside the
    backward marker. Kernels of several streams may overlap: phases are scaled to the busy time."""
    starts = [a for a, _, _ in ranges]
    launched = {phase: 0.0 for phase in ("forward", "backward", "optimizer", "other")}
    for e in events:
        durations = [k.duration for k in (getattr(e, "kernels", None) or [])]
        if not durations or e.device_type != torch.autograd.DeviceType.CPU:
            continue
        i = bisect.bisect_right(starts, e.time_range.start) - 1
        inside = i >= 0 and ranges[i][0] <= e.time_range.start <= ranges[i][1]
        phase = ranges[i][2] if inside and ranges[i][2] in launched else "other"
        launched[phase] += sum(durations)
    busy = busy_time(kernels, start, start + span_us) if kernels else 0.0
    kernel_sum = sum(b - a for a, b in kernels)
    launched["other"] += max(0.0, kernel_sum - sum(launched.values()))  # kernels no operator claimed
    scale = busy / kernel_sum if kernel_sum > busy > 0 else 1.0
    out = {phase: value * scale / per_step for phase, value in launched.items()}
    out["idle"] = max(0.0, span_us - busy) / per_step
    return out


def _add_unlinked_kernels(summary: ProfileSummary, unlinked_us: float, span_us: float) -> None:
    """Device time no operator claimed (e.g. kernels launched outside any operator) gets a row of its own, so
    that the device table does not hide it."""
    kernel_ms = sum((summary.device_ms or {}).get(p, 0.0) for p in ("forward", "backward", "optimizer", "other"))
    if unlinked_us > 0 and unlinked_us / 1000.0 > 0.05 * kernel_ms * summary.steps:
        summary.top_device.append(OperatorTime(name="(kernels of no operator)", calls=0, total_ms=unlinked_us / 1000.0,
                                               share=unlinked_us / span_us if span_us > 0 else 0.0))
        summary.top_device.sort(key=lambda op: -op.total_ms)


def _dynamo_counters() -> dict[str, Any]:
    """torch.compile's counters now (empty if Dynamo was never imported: nothing was compiled)."""
    if "torch._dynamo" not in sys.modules:
        return {}
    from torch._dynamo.utils import counters

    return {"graph_break": dict(counters.get("graph_break", {})), "stats": dict(counters.get("stats", {})),
            "frames": dict(counters.get("frames", {}))}


def compile_stats(before: Mapping[str, Any], after: Mapping[str, Any], reasons: int = 5) -> CompileStats:
    """Graph breaks, graphs and frames compiled in the process, and the frames compiled between the two readings."""
    breaks = after.get("graph_break", {})
    frames = after.get("frames", {}).get("total", 0)
    common = sorted(breaks.items(), key=lambda kv: -kv[1])[:reasons]
    return CompileStats(graph_breaks=int(sum(breaks.values())),
                        unique_graphs=int(after.get("stats", {}).get("unique_graphs", 0)),
                        frames_compiled=int(frames),
                        recompiles_while_profiling=int(frames - before.get("frames", {}).get("total", 0)),
                        break_reasons=[f"{count}x {reason.strip().splitlines()[0][:200]}" for reason, count in common])


def write_trace(prof, out_dir: Path, name: str, limit_bytes: int) -> TraceInfo:
    """The profiler's Chrome/Perfetto trace, gzipped, as ``out_dir/name``: whole if it fits in ``limit_bytes``,
    else its earliest events (a trace that still loads, saying it was cut), else none. Never raises."""
    out_dir.mkdir(parents=True, exist_ok=True)
    raw = out_dir / f".{name}.raw.json"
    target = out_dir / name
    try:
        prof.export_chrome_trace(str(raw))
        size = _gzip_file(raw, target)
        if size <= limit_bytes:
            return TraceInfo(path=name, bytes=size, status="written")
        return _truncate_trace(raw, target, size, limit_bytes)
    except (OSError, ValueError, RuntimeError) as exc:
        target.unlink(missing_ok=True)
        return TraceInfo(status="failed", note=f"the trace could not be written: {type(exc).__name__}: {exc}"[:500])
    finally:
        raw.unlink(missing_ok=True)


def _gzip_file(source: Path, target: Path) -> int:
    partial = target.with_name(f".{target.name}.partial")
    with open(source, "rb") as src, gzip.open(partial, "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    os.replace(partial, target)
    return target.stat().st_size


def _truncate_trace(raw: Path, target: Path, full_size: int, limit_bytes: int) -> TraceInfo:
    """Keep the metadata and the earliest events that fit: the first steps whole, which is what one opens a
    trace to see. The kept share is guessed from the compression ratio and halved until it fits."""
    trace = json.loads(raw.read_text())
    events = trace.get("traceEvents") or []
    meta = [e for e in events if e.get("ph") == "M"]
    timed = sorted((e for e in events if e.get("ph") != "M"), key=lambda e: float(e.get("ts", 0)))
    keep = int(len(timed) * 0.9 * limit_bytes / full_size)
    while keep > 0:
        note = (f"truncated: the earliest {keep} of {len(timed)} events "
                f"(the whole trace was {_size(full_size)} gzipped; the cap is {_size(limit_bytes)})")
        cut = {**trace, "traceEvents": meta + timed[:keep],
               "otherData": {**(trace.get("otherData") or {}), "harness": note}}
        partial = target.with_name(f".{target.name}.partial")
        with gzip.open(partial, "wt", compresslevel=6) as out:
            json.dump(cut, out)
        os.replace(partial, target)
        size = target.stat().st_size
        if size <= limit_bytes:
            return TraceInfo(path=target.name, bytes=size, status="truncated", note=note)
        keep //= 2
    target.unlink(missing_ok=True)
    return TraceInfo(status="dropped", note=f"dropped: the trace was {_size(full_size)} gzipped, over the cap of "
                                            f"{_size(limit_bytes)} even cut down")


def _size(n: float) -> str:
    if n < 1024:
        return f"{n:.0f} bytes"
    return f"{n / 1024:.1f} KiB" if n < 2**20 else f"{n / 2**20:.1f} MiB"
