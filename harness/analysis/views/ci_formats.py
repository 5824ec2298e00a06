"""A sweep's table or a check's result in the formats CI dashboards take, with the band as the bounds.

``--format bmf``: Bencher's metric format, ``{benchmark: {measure: {value, lower_value, upper_value}}}``.
``--format gab``: github-action-benchmark's custom JSON, ``[{name, unit, value, range, extra}]``, for its
``customBiggerIsBetter`` tool (every figure here is throughput or a throughput ratio: higher is better).
``--format pytorch-oss``: the PyTorch OSS benchmark database's records (as torchao and vLLM write them),
``[{benchmark, model, metric: {name, benchmark_values, target_value, extra_info}}]``.

None of these knows the harness's band unless it is handed over: the 95% band of a rung's throughput (the noise
model's), of a speedup, or of a check's head/base ratio (one-sided at the level the gate tested, as ``check``
prints it) goes in as the lower and upper bounds, and the verdict beside it. A figure with no band (one run, no
calibration) has no bounds, never made-up ones.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from harness.analysis.gate.check import CheckResult
from harness.analysis.gate.paired import PairedResult
from harness.analysis.views.rows import RungRow, SweepTable

FORMATS = ("bmf", "gab", "pytorch-oss")
GAB_TOOL = "customBiggerIsBetter"  # github-action-benchmark's tool for every figure written here


@dataclass
class Figure:
    """One number a dashboard plots: a benchmark's measure, its band and what else a reader needs."""

    benchmark: str
    measure: str  # Bencher's measure slug
    unit: str
    value: float
    low: float | None = None
    high: float | None = None
    values: list[float] = field(default_factory=list)  # the runs behind it (PyTorch's benchmark_values)
    extra: dict[str, str | float | int | None] = field(default_factory=dict)


def _band(low: float | None, high: float | None) -> tuple[float | None, float | None]:
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return None, None
    return float(low), float(high)


def table_figures(table: SweepTable) -> list[Figure]:
    """A sweep's rungs: throughput with its band, and the speedup over the baseline rung with its band."""
    out = []
    for row in table.rows:
        if row.samples_per_s is None:
            continue
        name = f"{table.workload} {table.ladder} rung {row.rung} {row.change}"
        extra = {"sweep": table.sweep_id, "rung": row.rung, "change": row.change, "device": table.device,
                 "hardware": table.hardware, "verdict": row.verdict or "-", "claim": row.claim or "-",
                 "runs": len(row.samples_per_s_runs), "band": "95%"}
        out.append(_throughput(name, row, extra))
        if row.x_baseline is not None:
            low, high = _band(row.x_baseline.low, row.x_baseline.high)
            out.append(Figure(name, "speedup", "x (over rung 0)", row.x_baseline.value, low, high,
                              [row.x_baseline.value], dict(extra)))
    return out


def _throughput(name: str, row: RungRow, extra: dict) -> Figure:
    low, high = row.samples_per_s_band or (None, None)
    return Figure(name, "throughput", "samples/s", row.samples_per_s, low, high, list(row.samples_per_s_runs),
                  dict(extra))


def check_figures(result: CheckResult | PairedResult) -> list[Figure]:
    """A check's configs: head/base throughput with the band the gate tested at, and head's samples/s."""
    out = []
    paired = isinstance(result, PairedResult)
    for row in result.rows:
        if row.ratio is None:
            continue
        low, high = _band(*((row.lower, row.upper) if paired else (row.ci_low, row.ci_high)))
        base = row.ref_samples_per_s if paired else row.baseline_samples_per_s
        head = row.work_samples_per_s if paired else row.current_samples_per_s
        extra = {"verdict": row.status, "threshold": row.threshold, "base_samples_per_s": base,
                 "head_samples_per_s": head, "band": f"{row.level:.1%} one-sided" if paired and row.level else
                 "as tested (Holm)", "notes": "; ".join(row.notes)}
        out.append(Figure(row.name, "head-over-base", "x (head/base throughput)", row.ratio, low, high, [row.ratio],
                          extra))
        if head is not None:
            out.append(Figure(row.name, "throughput", "samples/s", head, None, None, [head], dict(extra)))
    return out


def to_bmf(figures: list[Figure]) -> str:
    """Bencher's metric format: each benchmark's measures, the band as lower_value and upper_value."""
    doc: dict[str, dict[str, dict[str, float]]] = {}
    for f in figures:
        measure = {"value": f.value}
        if f.low is not None:
            measure |= {"lower_value": f.low, "upper_value": f.high}
        doc.setdefault(f.benchmark, {})[f.measure] = measure
    return json.dumps(doc, indent=2)


def to_gab(figures: list[Figure]) -> str:
    """github-action-benchmark's custom format for ``tool: customBiggerIsBetter``."""
    items = []
    for f in figures:
        band = f"95% band [{f.low:.6g}, {f.high:.6g}] {f.unit}" if f.low is not None else "no band"
        item = {"name": f"{f.benchmark} ({f.measure})", "unit": f.unit, "value": f.value,
                "extra": f"{GAB_TOOL}: higher is better; {band}; " + "; ".join(
                    f"{k} {v}" for k, v in f.extra.items() if v not in (None, ""))}
        if f.low is not None:
            item["range"] = f"± {max(f.value - f.low, f.high - f.value):.6g}"
        items.append(item)
    return json.dumps(items, indent=2)


def to_pytorch_oss(figures: list[Figure], model: str = "", mode: str = "training") -> str:
    """The PyTorch OSS benchmark database's records: one a figure, the band in the metric's extra_info."""
    records = []
    for f in figures:
        records.append({
            "benchmark": {"name": "harness", "mode": mode, "extra_info": {"benchmark": f.benchmark} | f.extra},
            "model": {"name": model or f.benchmark, "type": "training-harness", "origins": ["harness"]},
            "metric": {"name": f"{f.measure} ({f.unit})", "benchmark_values": f.values or [f.value],
                       "target_value": None,
                       "extra_info": {"value": f.value, "lower_value": f.low, "upper_value": f.high,
                                      "higher_is_better": True}},
        })
    return json.dumps(records, indent=2)


def render(figures: list[Figure], fmt: str, model: str = "") -> str:
    """The figures in ``fmt``, one of :data:`FORMATS`."""
    if fmt == "bmf":
        return to_bmf(figures)
    if fmt == "gab":
        return to_gab(figures)
    if fmt == "pytorch-oss":
        return to_pytorch_oss(figures, model)
    raise ValueError(f"unknown format {fmt!r}; valid choices: {', '.join(FORMATS)}")
