"""The curve ``python -m harness fit`` prints: samples/s with its 95% band and peak memory at each size that fits,
the largest that fits, and the fastest, from the store alone (the fit's sweep, read as its table)."""

from __future__ import annotations

from dataclasses import dataclass

from harness.analysis.views import table as table_mod

GIB = 2**30
AXIS = "batch_size"


@dataclass(frozen=True)
class Point:
    """One size of the curve: its rung's throughput, band and memory peaks as the sweep's table reads them."""

    size: int
    status: str
    samples_per_s: float | None
    band: float | None  # relative 95% half-width of samples/s
    peak_mem_bytes: float | None  # GPU: the allocator's reserved peak; CPU: the host's RSS peak
    peak_allocated_bytes: float | None  # GPU only: live tensors
    runs: int
    alloc_retries: int | None = None  # GPU only: the caching allocator's retries (memory pressure)


def curve(table: table_mod.SweepTable, sizes: list[int]) -> list[Point]:
    """The fit sweep's rungs as points: rung k is ``sizes[k]``."""
    return [Point(sizes[r.rung], r.status, r.samples_per_s, r.uncertainty, r.peak_mem_bytes,
                  r.peak_mem_allocated_bytes, r.statuses.get("ok", 0), r.alloc_retries)
            for r in table.rows if r.rung < len(sizes)]


def fastest(points: list[Point]) -> Point | None:
    """The size of the highest samples/s (None when none measured)."""
    measured = [p for p in points if p.samples_per_s is not None]
    return max(measured, key=lambda p: p.samples_per_s, default=None)


def _gib(value: float | None) -> str:
    return "-" if value is None else f"{value / GIB:.2f}"


def curve_table(points: list[Point], device: str) -> list[str]:
    """The curve as markdown, memory labelled by what it is."""
    cuda = device == "cuda"
    memory = (["peak reserved GiB (allocator)", "peak allocated GiB (tensors)", "alloc retries"] if cuda
              else ["peak host RSS GiB"])
    header = [AXIS, "samples/s [95% band]", "runs", *memory]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for p in points:
        speed = "-" if p.samples_per_s is None else f"{p.samples_per_s:.2f}"
        if p.samples_per_s is not None and p.band is not None:
            speed += f" [{p.samples_per_s / (1 + p.band):.2f}-{p.samples_per_s * (1 + p.band):.2f}]"
        retries = "-" if p.alloc_retries is None else str(p.alloc_retries)
        mem = [_gib(p.peak_mem_bytes), _gib(p.peak_allocated_bytes), retries] if cuda else [_gib(p.peak_mem_bytes)]
        lines.append("| " + " | ".join([str(p.size), speed if p.status == "ok" else p.status, str(p.runs), *mem])
                     + " |")
    return lines


def report_lines(results_dir: str, sweep_id: str, sizes: list[int], stopped: str) -> list[str]:
    """The curve of a fit's sweep, then the largest size that fits and the fastest."""
    table = table_mod.load_table(results_dir, sweep_id)
    points = curve(table, sizes)
    limit = f", memory capped at {table.memory_limit_gb:g} GiB" if table.memory_limit_gb is not None else ""
    lines = [f"#### fit: {table.workload} ({table.size}) on {table.device} {table.hardware}{limit}", ""]
    lines += curve_table(points, table.device) + [""]
    lines.append(f"Largest that fits: {AXIS}={sizes[-1]} ({stopped}).")
    best = fastest(points)
    if best is not None:
        within = [p.size for p in points if p is not best and p.samples_per_s is not None and best.band is not None
                  and p.samples_per_s * (1 + (p.band or 0)) >= best.samples_per_s / (1 + best.band)]
        tie = (f"; within its band: {AXIS}={', '.join(map(str, within))}" if within else "")
        lines.append(f"Fastest: {AXIS}={best.size}, {best.samples_per_s:.2f} samples/s{tie}.")
    if table.device != "cuda":
        lines.append("On a CPU nothing caps memory: the search runs to fit.max, and the memory is the host's peak RSS "
                     "(the measuring process and its loader workers).")
    return lines + [f"- {note}" for note in table.notes]  # the search, a busy machine, what the bands rest on
