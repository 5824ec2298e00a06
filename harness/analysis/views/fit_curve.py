"""The curve ``python -m harness fit`` prints: samples/s with its 95% band and peak memory at each size that fits,
the largest that fits, and the fastest, from the store alone (the fit's sweep, read as its table)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.analysis.views import table as table_mod
from harness.analysis.views.rows import SweepTable

GIB = 2**30
AXIS = "batch_size"


@dataclass(frozen=True)
class Point:
    """One size of the curve: its rung's throughput, band and memory peaks as the sweep's table reads them."""

    size: Any  # the batch, or a patch's sides
    status: str
    samples_per_s: float | None
    band: float | None  # relative 95% half-width of samples/s
    peak_mem_bytes: float | None  # GPU: the allocator's reserved peak; CPU: the host's RSS peak
    peak_allocated_bytes: float | None  # GPU only: live tensors
    runs: int
    alloc_retries: int | None = None  # GPU only: the caching allocator's retries (memory pressure)
    units_per_sample: int | None = None  # the patch axis: a sample's voxels (samples/s of two patches differ)


def curve(table: SweepTable, sizes: list, units: list[int] | None = None) -> list[Point]:
    """The fit sweep's rungs as points: rung k is ``sizes[k]`` (with ``units[k]`` units in one of its samples)."""
    return [Point(sizes[r.rung], r.status, r.samples_per_s, r.uncertainty, r.peak_mem_bytes,
                  r.peak_mem_allocated_bytes, r.statuses.get("ok", 0), r.alloc_retries,
                  units[r.rung] if units else None)
            for r in table.rows if r.rung < len(sizes)]


def shown(size: Any) -> str:
    """A size as the command line writes it: 24, or [64,64,64]."""
    return "[" + ",".join(map(str, size)) + "]" if isinstance(size, (list, tuple)) else str(size)


def _units_text(p: Point) -> str:
    return "-" if p.samples_per_s is None or p.units_per_sample is None else \
        f"{p.samples_per_s * p.units_per_sample:.3g}"


def fastest(points: list[Point]) -> Point | None:
    """The size of the highest samples/s, or units/s where a sample's units vary (None when none measured)."""
    measured = [p for p in points if p.samples_per_s is not None]
    return max(measured, key=lambda p: p.samples_per_s * (p.units_per_sample or 1), default=None)


def within_band(points: list[Point], best: Point, unit: str = "") -> list[Point]:
    """The sizes whose band reaches the fastest's: the fastest is not told apart from them."""
    scale = (lambda p: p.units_per_sample or 1) if unit else (lambda p: 1)
    return [p for p in points if p is not best and p.samples_per_s is not None and best.band is not None
            and p.samples_per_s * scale(p) * (1 + (p.band or 0)) >= best.samples_per_s * scale(best) / (1 + best.band)]


def tie_text(points: list[Point], best: Point, axis: str, unit: str = "") -> str:
    """What the fastest is not told apart from: the sizes within its band, or all of them where it has none."""
    others = [shown(p.size) for p in points if p is not best and p.samples_per_s is not None]
    if best.band is None and others:
        return f"; no band (one run a size and no calibration): not told apart from {axis}={', '.join(others)}"
    within = [shown(p.size) for p in within_band(points, best, unit)]
    return f"; within its band: {axis}={', '.join(within)}" if within else ""


def _gib(value: float | None) -> str:
    return "-" if value is None else f"{value / GIB:.2f}"


def curve_table(points: list[Point], device: str, axis: str = AXIS, unit: str = "") -> list[str]:
    """The curve as markdown, memory labelled by what it is; with ``unit`` (the patch axis) a column of units/s."""
    cuda = device == "cuda"
    memory = (["peak reserved GiB (allocator)", "peak allocated GiB (tensors)", "alloc retries"] if cuda
              else ["peak host RSS GiB"])
    header = [axis, "samples/s [95% band]", *([f"{unit}/s"] if unit else []), "runs", *memory]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for p in points:
        speed = "-" if p.samples_per_s is None else f"{p.samples_per_s:.2f}"
        if p.samples_per_s is not None and p.band is not None:
            speed += f" [{p.samples_per_s / (1 + p.band):.2f}-{p.samples_per_s * (1 + p.band):.2f}]"
        retries = "-" if p.alloc_retries is None else str(p.alloc_retries)
        mem = [_gib(p.peak_mem_bytes), _gib(p.peak_allocated_bytes), retries] if cuda else [_gib(p.peak_mem_bytes)]
        units = [_units_text(p)] if unit else []
        lines.append("| " + " | ".join([shown(p.size), speed if p.status == "ok" else p.status, *units, str(p.runs),
                                        *mem]) + " |")
    return lines


def report_lines(results_dir: str, sweep_id: str, sizes: list, stopped: str, axis: str = AXIS,
                 units: tuple[str, list[int]] | None = None) -> list[str]:
    """The curve of a fit's sweep, then the largest size that fits and the fastest. ``units``: the patch axis's
    unit and a sample's units at each size; the fastest is then the most units/s (samples/s do not compare)."""
    table = table_mod.load_table(results_dir, sweep_id)
    unit, per_sample = units or ("", None)
    points = curve(table, sizes, per_sample)
    limit = f", memory capped at {table.memory_limit_gb:g} GiB" if table.memory_limit_gb is not None else ""
    lines = [f"#### fit: {table.workload} ({table.size}) on {table.device} {table.hardware}{limit}", ""]
    lines += curve_table(points, table.device, axis, unit) + [""]
    lines.append(f"Largest that fits: {axis}={shown(sizes[-1])} ({stopped}).")
    best = fastest(points)
    if best is not None:
        rate = f"{best.samples_per_s:.2f} samples/s" + (f", {_units_text(best)} {unit}/s" if unit else "")
        lines.append(f"Fastest: {axis}={shown(best.size)}, {rate}{tie_text(points, best, axis, unit)}.")
    if table.device != "cuda":
        lines.append("On a CPU nothing caps memory: the search runs to fit.max, and the memory is the host's peak RSS "
                     "(the measuring process and its loader workers).")
    return lines + [f"- {note}" for note in table.notes]  # the search, a busy machine, what the bands rest on
