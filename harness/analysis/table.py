"""The speedup table of a sweep, from the store alone.

``python -m harness table [--results DIR] [--sweep ID|latest] [--format md|csv|html]``
"""

from __future__ import annotations

import argparse
import csv
import html
import io
import sys
from dataclasses import dataclass, field

from harness.analysis import stats
from harness.store import load_runs

MEMORY_NOTE = {"cuda": "peak VRAM", "cpu": "peak host RSS"}


@dataclass
class RungRow:
    rung: int
    change: str
    status: str  # ok, or the status of its (failed) runs
    how: str  # measured / cached / mixed
    repeats: int
    samples_per_s: float | None = None
    spread: float | None = None  # relative (max-min)/median over repeats
    uncertainty: float | None = None
    x_baseline: stats.Ratio | None = None
    x_previous: stats.Ratio | None = None
    built_on: int | None = None
    step_ms_p50: float | None = None
    step_ms_p90: float | None = None
    data_wait_frac: float | None = None
    peak_mem_bytes: float | None = None
    gpu_util_pct: float | None = None
    claim: str = ""
    claim_range: tuple[float, float] | None = None
    claim_source: str = ""
    verdict: str = ""
    note: str = ""
    samples_per_s_runs: list[float] = field(default_factory=list)


@dataclass
class SweepTable:
    sweep_id: str
    ladder: str
    workload: str
    device: str
    hardware: str
    size: str
    rows: list[RungRow]
    total_claim: str = ""
    total_verdict: str = ""
    total_measured: stats.Ratio | None = None
    notes: list[str] = field(default_factory=list)


def resolve_sweep_id(frame, sweep: str) -> str:
    """``latest`` (the sweep with the newest record) or an id that exists; ValueError otherwise."""
    swept = frame[frame["sweep_id"].fillna("") != ""]
    if swept.empty:
        raise ValueError("the store holds no sweep yet: run `python -m harness sweep +ladder=NAME` first")
    if sweep == "latest":
        return str(swept.sort_values("timestamp")["sweep_id"].iloc[-1])
    ids = sorted(swept["sweep_id"].unique())
    if sweep not in ids:
        from harness.registry import unknown_choice

        raise unknown_choice("sweep", sweep, ids[-20:])
    return sweep


def select_sweep(frame, sweep: str):
    """The records of one sweep (``latest`` or an id)."""
    return frame[frame["sweep_id"] == resolve_sweep_id(frame, sweep)]


def build_table(frame, sweep: str = "latest") -> SweepTable:
    """The speedup table of one sweep from its records."""
    records = select_sweep(frame, sweep)
    sweep_id = str(records["sweep_id"].iloc[0])
    from harness import ladder as ladder_mod  # plain YAML reading, no torch

    ladder_name = str(records["ladder"].iloc[0])
    try:
        ladder = ladder_mod.load(ladder_name)
    except ValueError:
        ladder = None
    rows = [_row(int(r), records[records["rung"] == r], ladder) for r in sorted(records["rung"].dropna().unique())]
    _link(rows)
    first = records.iloc[0]
    device = str(first["device"])
    hardware = (f"{first['gpu_name']} x{int(first['gpu_count'])}" if device == "cuda"
                else f"{first['cpu_model']} ({int(first['cpu_count'])} CPUs)")
    table = SweepTable(sweep_id=sweep_id, ladder=ladder_name, workload=str(first["workload"]), device=device,
                       hardware=hardware, size=str(first["size"]), rows=rows)
    _total(table, ladder)
    _notes(table, ladder, records)
    return table


def _row(rung: int, runs, ladder) -> RungRow:
    ok = runs[runs["status"] == "ok"]
    status = "ok" if len(ok) else str(runs["status"].iloc[-1])
    cached = runs["cached_from"].fillna("") != ""
    how = "cached" if cached.all() else ("measured" if not cached.any() else "partly cached")
    row = RungRow(rung=rung, change=str(runs["change"].iloc[0]) or "(baseline)", status=status, how=how, repeats=len(runs))
    if ladder is not None and rung < len(ladder.rungs) and ladder.rungs[rung].claim is not None:
        claim = ladder.rungs[rung].claim
        row.claim, row.claim_range, row.claim_source = claim.label(), (claim.low, claim.high), claim.source
    if len(ok):
        throughputs = [float(v) for v in ok["samples_per_s"]]
        row.samples_per_s_runs = throughputs
        row.samples_per_s = stats.median(throughputs)
        row.spread = stats.relative_spread(throughputs)
        row.uncertainty = stats.rung_uncertainty(throughputs, [list(s) for s in ok["step_ms"]])
        row.step_ms_p50 = stats.median(ok["step_ms_p50"])
        row.step_ms_p90 = stats.median(ok["step_ms_p90"])
        row.data_wait_frac = stats.median(ok["data_wait_frac"])
        mem = ok["peak_vram_bytes"] if (ok["device"] == "cuda").all() else ok["peak_host_rss_bytes"]
        row.peak_mem_bytes = stats.median(mem)
        row.gpu_util_pct = stats.median(ok["gpu_util_pct"])
    else:
        error = str(runs["error"].iloc[-1] or "").strip().splitlines()
        row.note = error[-1][:160] if error else ""
    return row


def _link(rows: list[RungRow]) -> None:
    """x baseline and x previous (the last earlier ok rung: what this rung was built on)."""
    base = rows[0] if rows and rows[0].rung == 0 and rows[0].samples_per_s else None
    previous = None
    for row in rows:
        if row.samples_per_s is None:
            continue
        if base is not None and row is not base:
            row.x_baseline = stats.ratio(row.samples_per_s, row.uncertainty, base.samples_per_s, base.uncertainty)
        if previous is not None:
            row.x_previous = stats.ratio(row.samples_per_s, row.uncertainty, previous.samples_per_s, previous.uncertainty)
            row.built_on = previous.rung
            if previous.rung != row.rung - 1:
                row.note = (row.note + "; " if row.note else "") + f"built on rung {previous.rung} (rungs between did not run ok)"
        if row.claim_range and row.x_previous is not None:
            row.verdict = stats.verdict(row.x_previous, *row.claim_range)
        previous = row


def _total(table: SweepTable, ladder) -> None:
    if ladder is None or ladder.total_claim is None:
        return
    table.total_claim = f"{ladder.total_claim.label()} ({ladder.total_claim.source})"
    last = next((r for r in reversed(table.rows) if r.x_baseline is not None), None)
    if last is not None:
        table.total_measured = last.x_baseline
        table.total_verdict = stats.verdict(last.x_baseline, ladder.total_claim.low, ladder.total_claim.high)


def _notes(table: SweepTable, ladder, records) -> None:
    if ladder is not None:
        table.notes.extend(ladder.notes)
        if ladder.stop_on_oom:
            oom = [r for r in table.rows if r.status == "oom"]
            if oom:
                table.notes.append(f"memory ran out at rung {oom[0].rung} ({oom[0].change}); the ladder stopped there")
        missing = [r.index for r in ladder.rungs if r.index not in {row.rung for row in table.rows}]
        if missing and not any(r.status == "oom" for r in table.rows):
            table.notes.append(f"rungs {missing} have no record in this sweep (interrupted? run the sweep again to resume)")
    busy = records[(records["status"] == "ok") & (records["other_cpu_pct"].fillna(0) > stats.BUSY_PCT)]
    if len(busy):
        worst = float(busy["other_cpu_pct"].max())
        table.notes.append(f"rungs {sorted(set(int(r) for r in busy['rung']))} ran while other processes used up to "
                           f"{worst:.0f}% of the CPUs: their numbers are not trustworthy; measure on an idle machine")
    if any(r.repeats < 2 for r in table.rows if r.status == "ok"):
        table.notes.append("single measurements: speedups within about 7% are noise (5% per run, two runs per ratio); add sweep.repeats=3 for tighter bands")


# ------------------------------------------------------------------------------------------
# Rendering

HEADER = ("rung", "change", "samples/s", "x baseline", "x previous", "step ms p50/p90", "data wait", "peak mem",
          "GPU util", "guide claims", "verdict", "status")


def _ratio_text(r: stats.Ratio | None) -> str:
    if r is None:
        return "-"
    return f"{r.value:.2f}x" + (" (within noise)" if r.within_noise else "")


def _num(v, spec=".1f", suffix="") -> str:
    return "-" if v is None else f"{v:{spec}}{suffix}"


def _mem(v) -> str:
    if v is None:
        return "-"
    return f"{v / 2**30:.2f} GiB"


def row_cells(row: RungRow) -> list[str]:
    thr = _num(row.samples_per_s, ".2f")
    if row.samples_per_s is not None and row.spread is not None:
        thr += f" ±{100 * row.spread / 2:.0f}%"
    status = row.status + ("" if row.how == "measured" else f" ({row.how})")
    if row.repeats > 1:
        status += f" x{row.repeats}"
    if row.note:
        status += f": {row.note}"
    return [str(row.rung), row.change, thr, _ratio_text(row.x_baseline), _ratio_text(row.x_previous),
            f"{_num(row.step_ms_p50)} / {_num(row.step_ms_p90)}",
            _num(None if row.data_wait_frac is None else 100 * row.data_wait_frac, ".0f", "%"), _mem(row.peak_mem_bytes),
            _num(row.gpu_util_pct, ".0f", "%"), row.claim or "-", row.verdict or "-", status]


def title(table: SweepTable) -> str:
    return (f"sweep {table.sweep_id}: ladder {table.ladder}, workload {table.workload} ({table.size}), "
            f"on {table.device} {table.hardware}")


def to_markdown(table: SweepTable) -> str:
    lines = [f"### {title(table)}", "", "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in row_cells(r)) + " |" for r in table.rows]
    lines.append("")
    if table.total_claim:
        measured = _ratio_text(table.total_measured)
        lines.append(f"Total: measured {measured} over the baseline; the guide claims {table.total_claim}: "
                     f"**{table.total_verdict or 'not measured'}**.")
    mem = MEMORY_NOTE.get(table.device, "peak memory")
    lines.append(f"Peak mem is {mem}. Verdicts compare x previous, with its noise band, to the guide's claim, on this device.")
    lines += [f"- {n}" for n in table.notes]
    return "\n".join(lines) + "\n"


def to_csv(table: SweepTable) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(("sweep_id",) + HEADER)
    for r in table.rows:
        writer.writerow([table.sweep_id] + row_cells(r))
    return buf.getvalue()


def to_html(table: SweepTable) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADER)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row_cells(r)) + "</tr>" for r in table.rows)
    extra = ""
    if table.total_claim:
        extra += (f"<p>Total: measured {html.escape(_ratio_text(table.total_measured))} over the baseline; the guide claims "
                  f"{html.escape(table.total_claim)}: <b>{html.escape(table.total_verdict or 'not measured')}</b>.</p>")
    if table.notes:
        extra += "<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in table.notes) + "</ul>"
    return (f"<table class='sweep'><caption>{html.escape(title(table))}</caption><thead><tr>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table>{extra and '<div>' + extra + '</div>'}")


FORMATS = {"md": to_markdown, "csv": to_csv, "html": to_html}


def render(table: SweepTable, fmt: str = "md") -> str:
    return FORMATS[fmt](table)


def main(command: str, argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m harness {command}", description="A sweep's speedup table, from the store.")
    parser.add_argument("--results", default="results", help="results folder (default: results)")
    parser.add_argument("--sweep", default="latest", help="sweep id, or 'latest' (default)")
    parser.add_argument("--format", default="md", choices=sorted(FORMATS), help="output format (default: md)")
    args = parser.parse_args(argv)
    try:
        table = build_table(load_runs(args.results, sweep=args.sweep), args.sweep)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(render(table, args.format))
    return 0

