"""What a run measured, typed: the raw per-step samples, what the child reads of itself once the window has closed,
and the summary that becomes the record's metric fields.

A ``Summary`` crosses two process boundaries as JSON (rank -> rank 0 -> parent) and is read back strictly: a name
that is not one of its fields raises, and the record is constructed from it in one call, so that a misspelt
metric fails the run's tests instead of vanishing from the store.
"""

from __future__ import annotations

import difflib
import statistics
from dataclasses import asdict, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from harness.metrics import Metrics
from harness.workload.flops import peak_flops

if TYPE_CHECKING:
    from harness.config import RunConfig


@dataclass
class Measurement:
    """The raw samples of one run's loop: warm-up apart from the measured steps, per step."""

    samples_per_step: int
    warmup_ms: list[float] = field(default_factory=list)
    step_ms: list[float] = field(default_factory=list)
    data_wait_ms: list[float] = field(default_factory=list)
    device_step_ms: list[float] = field(default_factory=list)  # CUDA only: per step, from CUDA events
    measured_s: float = 0.0
    window_start_unix: float | None = None  # when the window opened, UNIX seconds (read at its close: no clock in it)
    loss_first: float | None = None
    loss_last: float | None = None
    queue_warmup_steps: int = 0  # warm-up steps taken to eat the loader's queue (within warmup_ms)
    # a workload's samples(batch) / units(batch) hooks, summed over the measured micro-batches (batches that vary)
    samples_counted: float | None = None
    units_counted: float | None = None


@dataclass(frozen=True)
class PerSample:
    """What one sample is worth: units of throughput (voxels, images), training FLOPs, and the device's peak."""

    units: float
    flops: float | None = None
    peak_flops: float | None = None
    hardware_flops: float | None = None  # recomputation included (activation checkpointing)


@dataclass
class Summary(Metrics):
    """What the child measured: every metric (``Metrics``, the one declaration; each is the record's column of its
    name), and three that are not stored."""

    # not stored: a check of the measured process (the tests read it), and what rank 0 needs to count the
    # ranks' CPU time together (``ranks.combine`` uses it up), and the workers' peaks the parent merges
    python_threads_in_window: int | None = None
    cpu_window: dict[str, float] | None = None
    worker_hwm_bytes: dict[str, float] | None = None  # merged into the worker and host peaks by the parent

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Summary:
        """A summary from its JSON form; a name that is not a field raises (with the nearest field's name)."""
        unknown = sorted(set(values) - SUMMARY_FIELDS)
        if unknown:
            hints = [f"{name!r}" + "".join(f" (did you mean {m!r}?)" for m in
                                           difflib.get_close_matches(name, SUMMARY_FIELDS, n=1)) for name in unknown]
            raise TypeError(f"not a field of the run's summary: {', '.join(hints)}")
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (what a child writes in ``result.json``)."""
        return asdict(self)

    def record_fields(self) -> dict[str, Any]:
        """The metrics, by name, as the record stores them (its columns of those names)."""
        return {name: getattr(self, name) for name in STORED}


# What the child reads of itself once the window has closed (none of it inside the window: its own peaks, CPU shares,
# compile time, flags, GPM's SM activity): a summary with those fields filled, which ``summarize`` completes.
Extras = Summary

SUMMARY_FIELDS = frozenset(f.name for f in fields(Summary))
STORED = tuple(f.name for f in fields(Metrics))
NOT_STORED = SUMMARY_FIELDS - frozenset(STORED)


def per_sample(cfg: RunConfig, flops: float | None, gpu_name: str, hardware_flops: float | None = None) -> PerSample:
    """What a sample of ``cfg``'s workload is worth on this device (the peak only on a GPU whose peak is known)."""
    peak = peak_flops(gpu_name, cfg.precision, cfg.tf32) if cfg.device == "cuda" else None
    return PerSample(units=cfg.workload.units_in(tuple(cfg.data.patch_size)), flops=flops, peak_flops=peak,
                     hardware_flops=hardware_flops)


def summarize(m: Measurement, extras: Extras, sample: PerSample, compiled: bool) -> Summary:
    """The record's metrics: what the child read of itself (``extras``) completed from a raw measurement.
    ``compiled``: the warm-up holds compilation, whose time is estimated from it unless compile's own timers said
    (``extras.compile_s``)."""
    steps, counted = len(m.step_ms), m.samples_counted
    samples_per_s = (counted if counted is not None else steps * m.samples_per_step) / m.measured_s \
        if m.measured_s > 0 else None
    units_per_s = m.units_counted / m.measured_s if m.units_counted is not None and m.measured_s > 0 \
        else samples_per_s * sample.units if samples_per_s else None
    p50 = statistics.median(m.step_ms)
    wait_total = sum(m.data_wait_ms)
    compile_s = extras.compile_s
    if compiled and compile_s is None:
        compile_s = max(0.0, (sum(m.warmup_ms) - len(m.warmup_ms) * p50) / 1000.0)
    known = sample.flops and sample.peak_flops and samples_per_s
    return replace(
        extras,
        samples_per_step=m.samples_per_step,
        warmup_steps=len(m.warmup_ms),
        queue_warmup_steps=m.queue_warmup_steps,
        measured_steps=steps,
        samples_per_s=samples_per_s,
        units_per_s=units_per_s,
        step_ms_p50=p50,
        step_ms_p90=_quantile(m.step_ms, 0.9),
        step_ms_mean=statistics.fmean(m.step_ms),
        data_wait_frac=wait_total / (m.measured_s * 1000.0) if m.measured_s > 0 else None,
        data_wait_ms_p50=statistics.median(m.data_wait_ms),
        # Device time per step (first batch in hand -> optimizer step done, on the stream), and the steps' share of
        # the measured window. A share well below 1 means the stream sat idle between steps (the host was late:
        # data, Python, syncs); gaps inside a step (a launch-bound step) count as the step's.
        device_step_ms_p50=statistics.median(m.device_step_ms) if m.device_step_ms else None,
        device_step_frac=(sum(m.device_step_ms) / (m.measured_s * 1000.0)
                          if m.device_step_ms and m.measured_s > 0 else None),
        device_step_ms=m.device_step_ms,
        compile_s=compile_s,
        first_step_s=m.warmup_ms[0] / 1000.0 if m.warmup_ms else None,
        measured_s=m.measured_s,
        window_start_unix=m.window_start_unix,
        flops_per_sample=sample.flops,
        peak_flops=sample.peak_flops,
        mfu=sample.flops * samples_per_s / sample.peak_flops if known else None,
        hardware_flops_per_sample=sample.hardware_flops,
        mfu_hardware=sample.hardware_flops * samples_per_s / sample.peak_flops
        if known and sample.hardware_flops else None,
        loss_first=m.loss_first,
        loss_last=m.loss_last,
        step_ms=m.step_ms,
        data_wait_ms=m.data_wait_ms,
        world_size=1,  # a multi-device run's rank 0 replaces this summary with every rank's (ranks.combine)
    )


def _quantile(values: list[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default method)."""
    import numpy as np

    return float(np.quantile(values, q))
