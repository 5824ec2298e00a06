"""A sweep's plots, from the store alone (matplotlib, Agg backend; no torch, no Hydra).

The command is ``python -m harness plot`` (``harness.commands.plot``).

Every number drawn comes from :func:`harness.analysis.views.table.build_table`, so the plots and the
table can never disagree. Each plot is built as a :class:`Plot` (a name and a figure) so that the
report can embed the same figures that ``plot`` writes.
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: plots are written to files, never shown

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from harness.analysis.stats import calibration  # noqa: E402
from harness.analysis.views import table as table_mod
from harness.analysis.views.rows import MEMORY_NOTE, SweepTable
from harness.analysis.views.labels import tick_labels, title, version_text
from harness.store import load_runs  # noqa: E402

FORMATS = ("png", "svg")
GIB = 2**30
UP, DOWN, FAILED, CLAIM = "#2e7d32", "#c62828", "#9e9e9e", "#1565c0"
COMPUTE, WAIT = "#5c6bc0", "#ffa726"


@dataclass
class Plot:
    """One finished figure and the file stem it is saved under (e.g. ``phase2-cpu-waterfall``)."""

    name: str
    figure: Figure
    caption: str = ""


@dataclass
class SweepData:
    """What every plot of one sweep needs: the table and a few facts for the titles."""

    table: SweepTable
    records: object  # the sweep's records (pandas DataFrame)
    date: str
    harness_version: str
    capacity_bytes: float | None  # device memory capacity; None on CPU (host RAM is not stored)


# ------------------------------------------------------------------------------------------
# Shared pieces


def sweep_data(frame, sweep: str = "latest") -> SweepData:
    """The table of one sweep plus the facts the plot titles need."""
    table = table_mod.build_table(frame, sweep)
    records = frame[frame["sweep_id"] == table.sweep_id]
    first = records.sort_values("timestamp").iloc[0]
    capacity = None
    if table.device == "cuda":
        totals = records["gpu_mem_total_bytes"].dropna()
        capacity = float(totals.max()) if len(totals) else None
    return SweepData(table=table, records=records, date=str(first["timestamp"])[:10],
                     harness_version=version_text(first), capacity_bytes=capacity)


def new_figure(n_rungs: int, height: float = 5.5) -> tuple[Figure, object]:
    """A figure wide enough for ``n_rungs`` labelled bars."""
    fig, ax = plt.subplots(figsize=(max(8.0, 1.0 * n_rungs + 3.0), height), layout="constrained")
    return fig, ax


def rung_axis(ax, rows) -> None:
    ax.set_xticks(range(len(rows)), tick_labels(rows), fontsize=8)
    ax.set_xlabel("rung and the one change it adds")
    ax.set_xlim(-0.7, len(rows) - 0.3)


def mark_failed(ax, rows, y: float) -> None:
    """Write the status (oom, error, ...) where a failed rung has no bar."""
    for i, r in enumerate(rows):
        if r.status != "ok":
            ax.text(i, y, r.status.upper(), ha="center", va="bottom", color=DOWN, fontweight="bold", fontsize=9)


def top_of(values, default: float = 1.0) -> float:
    values = [v for v in values if v is not None]
    return max(values) if values else default


# ------------------------------------------------------------------------------------------
# The plots


def waterfall(data: SweepData) -> Plot | None:
    """Cumulative speedup: each bar spans from the previous rung's x baseline to this rung's.

    The guide's claim is relative to the rung before, so the claimed range is drawn beside the bar
    as previous cumulative x [low, high].
    """
    rows = data.table.rows
    if not any(r.x_baseline for r in rows):
        return None
    fig, ax = new_figure(len(rows), 6)
    cumulative = 1.0
    for i, r in enumerate(rows):
        if r.status != "ok" or r.samples_per_s is None:
            continue
        now = 1.0 if r.x_baseline is None else r.x_baseline.value
        if r.x_baseline is None:  # the baseline itself: a thin bar at 1x
            ax.bar(i, 0.02, bottom=0.99, width=0.55, color=FAILED)
        else:
            colour = UP if now >= cumulative else DOWN
            ax.bar(i, now - cumulative, bottom=cumulative, width=0.55, color=colour, alpha=0.85)
            if _has_band(r.x_baseline):
                ax.errorbar(i, now, yerr=[[now - r.x_baseline.low], [r.x_baseline.high - now]], color="black",
                            capsize=3, lw=1)
            ax.plot([i - 1 + 0.275, i - 0.275], [cumulative, cumulative], color="black", lw=0.7, ls=":")
        if r.claim_range:
            low, high = r.claim_range
            ax.bar(i + 0.36, cumulative * (high - low) or cumulative * 0.02, bottom=cumulative * low, width=0.14,
                   color=CLAIM, alpha=0.35, hatch="//", edgecolor=CLAIM)
        text = f"{now:.2f}x" if now >= 0.1 else f"{now:.3f}x"
        if now >= cumulative or r.x_baseline is None:  # label above the bar and its error bar
            top = max(now, r.x_baseline.high if _has_band(r.x_baseline) else now)
            ax.text(i, top * 1.01, text, ha="center", va="bottom", fontsize=8)
        else:  # a slower rung: label below where it ended
            bottom = min(now, r.x_baseline.low if _has_band(r.x_baseline) else now)
            ax.text(i, bottom * 0.98, text, ha="center", va="top", fontsize=8)
        cumulative = now
    ax.axhline(1.0, color="black", lw=0.8)
    mark_failed(ax, rows, 1.02)
    rung_axis(ax, rows)
    _total_claim(ax, data, len(rows))
    ax.set_ylabel("cumulative speedup over the baseline (x, samples/s ratio)")
    ax.set_title(title(data, "Cumulative speedup, rung by rung"), fontsize=10)
    ax.legend(handles=_waterfall_legend(), fontsize=8, loc="upper left")
    _speedup_scale(ax, [r.x_baseline.low if _has_band(r.x_baseline) else r.x_baseline.value
                        for r in rows if r.x_baseline] + [1.0])
    return Plot("waterfall", fig,
                "Cumulative speedup rung by rung; hatched: the guide's claimed range for that change.")


def _has_band(r) -> bool:
    """A band worth drawing: one was computed (not one run a rung without a calibration) and it says something."""
    return r is not None and math.isfinite(r.low) and math.isfinite(r.high) and not r.too_wide


def _speedup_scale(ax, lows: list[float]) -> None:
    """Linear from 0 while speedups stay modest; log when a rung is many times slower or faster.

    On a CPU, bf16 can be 50x slower: on a linear axis every later bar would be a sliver at 0.
    """
    low, high = min(lows), ax.get_ylim()[1]
    if high / low < 6:
        ax.set_ylim(0, high)
        return
    from matplotlib.ticker import FuncFormatter

    ax.set_yscale("log")
    ax.set_ylim(low / 1.5, high * 1.5)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    # label the 2s and 5s between decades too, so values can be read off without counting ticks
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}x" if f"{v:.0e}"[0] in "25" else ""))
    ax.set_ylabel(ax.get_ylabel() + ", log scale")


def _total_claim(ax, data: SweepData, n: int) -> None:
    """The ladder's total claim as a band at the right edge (if the ladder makes one)."""
    total = data.table.total_claim_range  # stored with the records (or the ladder file for old ones)
    if total is not None:
        low, high = total
        label = f"{low:g}x" if low == high else f"{low:g}-{high:g}x"
        ax.bar(n - 0.3, high - low, bottom=low, width=0.2, color=CLAIM, alpha=0.25)
        ax.text(n - 0.3, low, f"total\nclaim\n{label}", ha="center", va="top", fontsize=7, color=CLAIM)
        ax.set_xlim(right=n - 0.05)


def _waterfall_legend():
    from matplotlib.patches import Patch

    return [Patch(color=UP, label="faster than the rung before"),
            Patch(color=DOWN, label="slower than the rung before"),
            Patch(facecolor=CLAIM, alpha=0.35, hatch="//", edgecolor=CLAIM, label="guide's claimed range"),
            plt.Line2D([], [], color="black", marker="_", lw=1, label="noise band of the measurement")]


def throughput(data: SweepData) -> Plot:
    """Samples/s per rung; error bars: the noise model's 95% band of each rung's throughput."""
    rows = data.table.rows
    fig, ax = new_figure(len(rows))
    values = [r.samples_per_s or 0.0 for r in rows]
    bands = [(r.uncertainty or 0.0) * r.samples_per_s if r.samples_per_s is not None else 0.0 for r in rows]
    colours = [COMPUTE if r.status == "ok" else FAILED for r in rows]
    ax.bar(range(len(rows)), values, yerr=bands, capsize=4, color=colours, width=0.6)
    for i, v in enumerate(values):
        if v:
            ax.text(i + 0.32, v, f"{v:.1f}", ha="left", va="bottom", fontsize=7)
    mark_failed(ax, rows, 0.0)
    rung_axis(ax, rows)
    bars = "error bars: 95% band, " + (data.table.noise.describe().removeprefix("noise: ").split(" (")[0]
                                       if data.table.noise.calibrated else "the runs' own spread")
    ax.set_ylabel("throughput (samples/s)")
    ax.set_title(title(data, f"Throughput per rung ({bars})"), fontsize=10)
    ax.set_ylim(0, top_of(values) * 1.2)
    return Plot("throughput", fig, f"Median samples/s per rung; {bars}.")


def data_wait(data: SweepData) -> Plot:
    """Median step time split into data wait and compute: a data-bound job shows tall orange bars."""
    rows = data.table.rows
    fig, ax = new_figure(len(rows))
    steps = [r.step_ms_p50 or 0.0 for r in rows]
    wait = [s * (r.data_wait_frac or 0.0) for s, r in zip(steps, rows)]
    compute = [s - w for s, w in zip(steps, wait)]
    x = range(len(rows))
    ax.bar(x, compute, width=0.6, color=COMPUTE, label="compute (the rest of the step)")
    ax.bar(x, wait, bottom=compute, width=0.6, color=WAIT, label="waiting for data")
    for i, (s, r) in enumerate(zip(steps, rows)):
        if s and r.data_wait_frac is not None:
            ax.text(i, s, f"{100 * r.data_wait_frac:.0f}% wait", ha="center", va="bottom", fontsize=7)
    mark_failed(ax, rows, 0.0)
    rung_axis(ax, rows)
    ax.set_ylabel("median step time (ms)")
    ax.set_ylim(0, top_of(steps) * 1.2)
    ax.legend(fontsize=8, loc="upper right")
    ax.set_title(title(data, "Step time: waiting for data vs compute"), fontsize=10)
    return Plot("data-wait", fig, "Median step time split into data wait and compute.")


def memory(data: SweepData) -> Plot:
    """Peak memory per rung, with the device's capacity as a line where it is known."""
    rows = data.table.rows
    fig, ax = new_figure(len(rows))
    what = MEMORY_NOTE.get(data.table.device, "peak memory")
    values = [(r.peak_mem_bytes or 0.0) / GIB for r in rows]
    ax.bar(range(len(rows)), values, width=0.6, color=COMPUTE, label=what)
    top = max(top_of(values), _gpu_memory_layers(ax, data.table))
    device = [(r.device_mem_bytes or 0.0) / GIB for r in rows]
    for i, v in enumerate(values):
        if v:  # above the bar and NVML's marker, whichever is higher
            ax.text(i, max(v, device[i]) + 0.02 * top, f"{v:.2f}", ha="center", va="bottom", fontsize=7)
    if data.capacity_bytes and data.table.memory_limit_gb is not None:  # the cap is the card that matters
        ax.plot([], [], " ", label=f"device capacity {data.capacity_bytes / GIB:.1f} GiB, off the scale")
        note = ""
    elif data.capacity_bytes:
        ax.axhline(data.capacity_bytes / GIB, color=DOWN, ls="--", label=f"device capacity "
                   f"({data.capacity_bytes / GIB:.1f} GiB)")
        top = max(top, data.capacity_bytes / GIB)
        note = ""
    else:
        # host RAM size is not stored in the record, so there is no honest line to draw
        ax.plot([], [], " ", label="capacity line omitted: total host RAM is not recorded")
        note = " (no capacity line: host RAM not recorded)"
    mark_failed(ax, rows, 0.0)
    rung_axis(ax, rows)
    ax.set_ylabel(f"{what} (GiB)")
    ax.set_ylim(0, top * (1.45 if data.table.device == "cuda" else 1.2))  # room for the legend above the lines
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title(title(data, f"Peak memory per rung{note}"), fontsize=10)
    return Plot("memory", fig, f"{what[0].upper() + what[1:]} per rung{note}.")


def _gpu_memory_layers(ax, table) -> float:
    """On a GPU, beside the reserved peak's bars: the allocated peak (live tensors) as narrower bars, NVML's
    device-wide figure (every process, the CUDA context too) as markers, and the memory.limit_gb cap as a line;
    the highest value drawn (GiB)."""
    if table.device != "cuda":
        return 0.0
    rows, drawn = table.rows, [0.0]
    allocated = [(r.peak_mem_allocated_bytes or 0.0) / GIB for r in rows]
    if any(allocated):
        ax.bar(range(len(rows)), allocated, width=0.3, color=UP, label="peak allocated (live tensors)")
    device = [(i, r.device_mem_bytes / GIB) for i, r in enumerate(rows) if r.device_mem_bytes]
    if device:
        ax.plot([i for i, _ in device], [v for _, v in device], "D", color=DOWN, ms=5,
                label="device-wide in use (NVML: every process, CUDA context)")
        drawn += [v for _, v in device]
    if table.memory_limit_gb is not None:
        ax.axhline(table.memory_limit_gb, color=DOWN, ls=":", label=f"memory.limit_gb cap ({table.memory_limit_gb:g} "
                   "GiB)")
        drawn.append(table.memory_limit_gb)
    return max(drawn)


def gpu_util(data: SweepData) -> Plot | None:
    """GPU utilisation per rung; None when no rung measured it (CPU sweeps)."""
    rows = data.table.rows
    if all(r.gpu_util_pct is None for r in rows):
        return None
    fig, ax = new_figure(len(rows))
    values = [r.gpu_util_pct or 0.0 for r in rows]
    ax.bar(range(len(rows)), values, width=0.6, color=COMPUTE)
    for i, r in enumerate(rows):
        ax.text(i, values[i], "n/a" if r.gpu_util_pct is None else f"{r.gpu_util_pct:.0f}%", ha="center",
                va="bottom", fontsize=7)
    mark_failed(ax, rows, 0.0)
    rung_axis(ax, rows)
    ax.set_ylabel("GPU utilisation (% of the sampled time)")
    ax.set_ylim(0, 110)
    ax.set_title(title(data, "GPU utilisation per rung"), fontsize=10)
    return Plot("gpu-util", fig, "GPU utilisation per rung, sampled during the measured steps.")


def batch_size_of(records, rung: int) -> int | None:
    """The batch size a rung ran with, from its stored settings."""
    runs = records[records["rung"] == rung]
    for text in runs["config_json"]:
        value = json.loads(text or "{}").get("batch_size")
        if value is not None:
            return int(value)
    return None


def is_batch_ladder(data: SweepData) -> bool:
    """The `batch` ladder, or any ladder whose every rung changes only the batch size."""
    changes = [r.change for r in data.table.rows[1:]]
    return data.table.ladder == "batch" or (bool(changes) and all(c.startswith("batch_size=") for c in changes))


def batch_scaling(data: SweepData) -> Plot | None:
    """Throughput and peak memory against batch size, with an X where memory ran out."""
    if not is_batch_ladder(data):
        return None
    points = [(batch_size_of(data.records, r.rung), r) for r in data.table.rows]
    points = [(b, r) for b, r in points if b is not None]
    if not points:
        return None
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7.5), sharex=True, layout="constrained")
    ok = [(b, r) for b, r in points if r.samples_per_s is not None]
    failed = [(b, r) for b, r in points if r.status != "ok"]
    top.plot([b for b, _ in ok], [r.samples_per_s for _, r in ok], "o-", color=COMPUTE, label="throughput")
    bottom.plot([b for b, _ in ok], [(r.peak_mem_bytes or 0) / GIB for _, r in ok], "o-", color=COMPUTE,
                label=MEMORY_NOTE.get(data.table.device, "peak memory"))
    for ax in (top, bottom):
        for b, r in failed:
            ax.axvline(b, color=DOWN, ls="--", lw=1)
            ax.plot([b], [0], "x", color=DOWN, ms=12, mew=3, clip_on=False,
                    label=f"{r.status} at batch {b}" if r.status == "oom" else f"{r.status} at batch {b}")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8, loc="upper left")
    if data.capacity_bytes:
        bottom.axhline(data.capacity_bytes / GIB, color=DOWN, ls=":", label="device capacity")
    top.set_ylabel("throughput (samples/s)")
    bottom.set_ylabel("peak memory (GiB)")
    bottom.set_xlabel("batch size (samples per step, log scale)")
    bottom.set_xscale("log", base=2)
    sizes = sorted({b for b, _ in points})
    bottom.set_xticks(sizes, [str(s) for s in sizes])
    oom = [b for b, r in failed if r.status == "oom"]
    where = f"; memory ran out at batch {oom[0]}" if oom else "; memory never ran out"
    top.set_title(title(data, f"Throughput and memory against batch size{where}"), fontsize=10)
    return Plot("batch", fig, f"Throughput and peak memory against batch size{where}.")


PLOTS = (waterfall, throughput, data_wait, memory, gpu_util, batch_scaling)


def build_plots(data: SweepData) -> list[Plot]:
    """Every plot that applies to this sweep, named ``<ladder>-<device>-<kind>``."""
    plots = [p for p in (make(data) for make in PLOTS) if p is not None]
    for p in plots:
        p.name = f"{data.table.ladder}-{data.table.device}-{p.name}"
    return plots


def save(plots: list[Plot], out: str | Path, fmt: str = "png") -> list[Path]:
    """Write each plot as ``out/<name>.<fmt>`` and close its figure."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for p in plots:
        path = folder / f"{p.name}.{fmt}"
        p.figure.savefig(path, format=fmt, dpi=110)
        plt.close(p.figure)
        paths.append(path)
    return paths


def to_bytes(plot: Plot, fmt: str = "png") -> bytes:
    """One plot as image bytes (for embedding), closing its figure."""
    buf = io.BytesIO()
    plot.figure.savefig(buf, format=fmt, dpi=100)
    plt.close(plot.figure)
    return buf.getvalue()


def write_plots(results_dir: str, sweep: str, out: str | Path, fmt: str = "png") -> list[Path]:
    """Draw every plot of ``sweep`` (from the store in ``results_dir``) into ``out``; the files written."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown plot format {fmt!r}; valid choices: {', '.join(FORMATS)}")
    data = sweep_data(calibration.calibration_frame(results_dir, load_runs(results_dir, sweep=sweep)), sweep)
    return save(build_plots(data), out, fmt)
