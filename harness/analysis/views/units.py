"""A sweep's throughput in its workload's own unit (a language model's tokens/s) and its utilisation named two ways,
beside the speedup table: model FLOPs MFU (MLPerf's rule, recomputation excluded) and hardware FLOPs MFU
(recomputation included), each against the device table's peak for the run's dtype, "n/a" with the reason where the
table has none (a CPU, a GPU not in it); compile's cost per rung, warm (this machine's cache) or cold
(``compile_cache=fresh``), and the steps a kept compile takes to pay it back. From the store alone (no torch).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from harness.analysis.stats import speedup
from harness.analysis.stats.busy import busy_reasons
from harness.store import load_runs, select_sweep

SHOWN_UNITS = ("tokens",)  # sweeps of these units get the table (the speedup table counts samples)


@dataclass(frozen=True)
class UnitRow:
    rung: int
    change: str
    status: str
    units_per_s: float | None = None
    step_ms: float | None = None
    mfu: float | None = None
    mfu_hardware: float | None = None
    compile_s: float | None = None
    cache: str = ""  # warm / cold: which cache the compile rung's runs compiled into ("" without compile)
    peak_mem_bytes: float | None = None
    note: str = ""


@dataclass(frozen=True)
class UnitTable:
    unit: str
    device: str
    rows: list[UnitRow]
    mfu_note: str = ""  # why MFU is n/a, or which peak it is over
    break_even: list[str] = field(default_factory=list)
    busy_note: str = ""


def load_unit_table(results_dir: str, sweep: str = "latest") -> UnitTable | None:
    """The table of one sweep of the store (None when its unit is not one of ``SHOWN_UNITS``)."""
    return build_unit_table(select_sweep(load_runs(results_dir, sweep=sweep), sweep))


def build_unit_table(records) -> UnitTable | None:
    """The units view of one sweep's records, rows and notes made once (None when its unit is not shown here)."""
    first = records.iloc[0]
    if str(first["unit"]) not in SHOWN_UNITS:
        return None
    rows = [_row(int(r), records[records["rung"] == r]) for r in sorted(records["rung"].dropna().unique())]
    ok = records[records["status"] == "ok"]
    busy = [why for why in busy_reasons(ok) if why]
    # the speedup table leaves them out; here every ok run is shown, so they are named
    busy_note = (f"{len(busy)} of the {len(ok)} ok runs were measured on a busy machine ({busy[0]}): their figures "
                 "here are not trustworthy") if busy else ""
    return UnitTable(unit=str(first["unit"]), device=str(first["device"]), rows=rows, mfu_note=_mfu_note(records),
                     break_even=break_even_lines(rows), busy_note=busy_note)


def _row(rung: int, runs) -> UnitRow:
    ok = runs[(runs["status"] == "ok") & runs["units_per_s"].notna()]
    change = str(runs["change"].iloc[0]) or "(baseline)"
    if not len(ok):
        error = str(runs["error"].iloc[-1] or "").strip().splitlines()
        return UnitRow(rung=rung, change=change, status=str(runs["status"].iloc[-1]),
                       note=error[-1][:160] if error else "")
    median = lambda column: speedup.median(ok[column]) if ok[column].notna().any() else None  # noqa: E731
    cuda = (ok["device"] == "cuda").all()
    settings = [json.loads(text or "{}") for text in ok["config_json"]]
    cache = ("cold" if any(s.get("compile_cache") == "fresh" for s in settings) else "warm") \
        if any(s.get("compile", "off") != "off" for s in settings) else ""
    return UnitRow(rung=rung, change=change, status="ok", units_per_s=median("units_per_s"),
                   step_ms=median("step_ms_p50"), mfu=median("mfu"), mfu_hardware=median("mfu_hardware"),
                   compile_s=median("compile_s"), cache=cache,
                   peak_mem_bytes=median("peak_vram_reserved_bytes" if cuda else "peak_host_rss_bytes"))


def _mfu_note(records) -> str:
    first = records.iloc[0]
    if str(first["device"]) != "cuda":
        return "MFU n/a: a CPU has no peak in the device table (never an A100's 312 TFLOP/s by default)"
    peaks = records["peak_flops"].dropna()
    if not len(peaks):
        return f"MFU n/a: {first['gpu_name']} has no peak in the device table (harness/workload/flops.py)"
    return (f"MFU over {first['gpu_name']}'s datasheet peak for each run's dtype "
            f"({', '.join(sorted({f'{p / 1e12:.0f}' for p in peaks}))} TFLOP/s)")


def break_even_lines(rows: list[UnitRow]) -> list[str]:
    """Where a compile rung (one that changes ``compile`` or ``compile_cache``) ran ok, against the last rung without
    compile: the steps after which its compile time is paid back (compile seconds / the step time saved), for its
    warm and its cold cache; the rungs after them change other knobs, and compare with no eager run."""
    eager = next((r for r in rows if r.status == "ok" and not r.cache and r.step_ms), None)
    lines = []
    for row in rows:
        if not row.cache or row.status != "ok" or row.compile_s is None or not row.step_ms:
            eager = row if row.status == "ok" and not row.cache and row.step_ms else eager
            continue
        if eager is None or not row.change.startswith("compile"):
            continue
        saved_ms = eager.step_ms - row.step_ms
        what = f"rung {row.rung} ({row.change}, {row.cache} cache): compile {row.compile_s:.1f} s"
        if saved_ms <= 0:
            lines.append(f"{what}, no step time saved over rung {eager.rung} ({eager.step_ms:.1f} -> "
                         f"{row.step_ms:.1f} ms): compile never pays back here")
        else:
            lines.append(f"{what}, {saved_ms:.2g} ms a step saved over rung {eager.rung}: breaks even after "
                         f"{1000 * row.compile_s / saved_ms:.0f} steps")
    return lines


def render_markdown(table: UnitTable) -> str:
    """The table as markdown, with its notes below."""
    def pct(v):
        return "n/a" if v is None else f"{100 * v:.1f}%"

    def num(v, f):
        return "-" if v is None else format(v, f)

    lines = [f"| rung | change | status | {table.unit}/s | step ms | MFU (model FLOPs) | MFU (hardware FLOPs) | "
             "compile s | peak memory MiB | note |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in table.rows:
        compile_s = f"{r.compile_s:.1f} ({r.cache})" if r.compile_s is not None and r.cache else "-"
        mem = num(r.peak_mem_bytes / 2**20 if r.peak_mem_bytes else None, ".0f")
        lines.append(f"| {r.rung} | {r.change} | {r.status} | {num(r.units_per_s, '.4g')} | {num(r.step_ms, '.1f')} "
                     f"| {pct(r.mfu)} | {pct(r.mfu_hardware)} | {compile_s} | {mem} | {r.note} |")
    lines += ["", f"- {table.mfu_note}"] + [f"- {line}" for line in table.break_even]
    lines += [f"- {table.busy_note}"] if table.busy_note else []
    return "\n".join(lines) + "\n"
