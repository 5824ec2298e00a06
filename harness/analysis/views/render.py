"""The speedup table as text: markdown, CSV and HTML, for one sweep or a campaign of sweeps.

Every renderer reads the cells from :func:`row_cells` and the sentences under the table from
:func:`footer_lines`, so the formats (and the terminal's rich table, in ``harness.commands``) say the same.
"""

from __future__ import annotations

import csv
import html
import io
import re
from typing import Callable

from harness.analysis.views import epochs
from harness.analysis.stats.speedup import ratio_text
from harness.analysis.views.rows import MEMORY_NOTE, CampaignSummary, GroupRow, RungRow, SweepTable

COMPUTE_HEADER = "compute x previous"  # what the change did to the compute part alone (views.components)
HEADER = ("rung", "change", "samples/s", "x baseline", "x previous [95% band]", COMPUTE_HEADER, "step ms p50/p90",
          "data wait", "peak mem", "GPU util", "guide claims", "verdict", "status")
CAMPAIGN_HEADER = ("sweep", "workload", "ladder", "device", "total measured", "guide claims", "verdict",
                   "rungs not ok")


def _num(v, spec=".1f", suffix="") -> str:
    return "-" if v is None else f"{v:{spec}}{suffix}"


def _mem(v) -> str:
    if v is None:
        return "-"
    return f"{v / 2**30:.2f} GiB"


def mem_text(row: RungRow) -> str:
    """The peak memory cell: on CUDA the reserved peak, and the allocated one beside it where they differ."""
    text = _mem(row.peak_mem_bytes)
    allocated = row.peak_mem_allocated_bytes
    if allocated is not None and row.peak_mem_bytes is not None and _mem(allocated) != text:
        text += f" ({allocated / 2**30:.2f} allocated)"
    if row.alloc_retries:
        text += f", {row.alloc_retries} alloc retries"
    return text


def wait_text(row: RungRow) -> str:
    """The data wait cell: the share of the window, and what the rung's profile says bounds a step."""
    text = _num(None if row.data_wait_frac is None else 100 * row.data_wait_frac, ".0f", "%")
    return f"{text} ({row.bound})" if row.bound and row.bound != "unknown" else text


def has_scaling(table: SweepTable) -> bool:
    """Whether any rung changes ``devices`` or ``nodes`` (the table then has an E(N) column)."""
    return any(r.scaling_efficiency is not None for r in table.rows)


def headers(table: SweepTable) -> tuple[str, ...]:
    """The columns; E(N) only in a sweep with rungs that change ``devices`` or ``nodes``."""
    if not has_scaling(table):
        return HEADER
    at = HEADER.index(COMPUTE_HEADER) + 1
    return HEADER[:at] + ("E(N)",) + HEADER[at:]


def row_cells(row: RungRow, scaling: bool = False) -> list[str]:
    """One rung's cells, in the order of :func:`headers`."""
    thr = _num(row.samples_per_s, ".2f")
    if row.samples_per_s is not None and row.uncertainty is not None:
        thr += f" ±{100 * row.uncertainty:.0f}%"  # the noise model's 95% band of the rung's throughput
    status = status_text(row)
    if row.note:
        status += f": {row.note}"
    efficiency = [efficiency_text(row)]
    return [str(row.rung), row.change, thr, ratio_text(row.x_baseline), ratio_text(row.x_previous, band=True),
            compute_text(row), *(efficiency if scaling else []), f"{_num(row.step_ms_p50)} / {_num(row.step_ms_p90)}",
            wait_text(row), mem_text(row),
            _num(row.gpu_util_pct, ".0f", "%"), claim_text(row), row.verdict or "-", status]


def efficiency_text(row: RungRow) -> str:
    """E(N) with its 95% band: ``88% [84-92%]``."""
    if row.scaling_efficiency is None:
        return "-"
    band = f" [{100 * row.scaling_band[0]:.0f}-{100 * row.scaling_band[1]:.0f}%]" if row.scaling_band else ""
    return f"{100 * row.scaling_efficiency:.0f}%{band}"


def compute_text(row: RungRow) -> str:
    """The compute column: the compute part's speedup per sample over the rung this one was built on."""
    parts = row.parts
    if parts is None or parts.x_compute is None:
        return "-"
    return f"{parts.x_compute.value:.2f}x" + (" (within noise)" if parts.x_compute.within_noise else "")


def claim_text(row: RungRow) -> str:
    """The guide's claim, with the part of the step it is about when it is not the whole step."""
    if not row.claim:
        return "-"
    return f"{row.claim} ({epochs.label(row.claim_component)})" if row.claim_component else row.claim


def status_text(row: RungRow) -> str:
    """``ok``, ``ok x3``, or every status with its count when any run failed or ran on a busy machine (left out):
    ``ok 2/3, nan 1``, ``ok 1/2, busy 1``, ``busy x2``."""
    ok = row.statuses.get("ok", 0) if row.samples_per_s is not None else 0
    how = "" if row.how == "measured" else f" ({row.how})"
    times = f" x{row.repeats}" if row.repeats > 1 else ""
    if ok == row.repeats and not row.busy:
        return "ok" + how + times
    others = {s: n for s, n in row.statuses.items() if s != "ok" or not ok}
    if ok and ok == row.busy and not others:
        return "busy" + how + times
    failed = ", ".join(f"{s} {n}" for s, n in ({"busy": row.busy} | others).items() if n)
    if not ok and len(row.statuses) == 1:
        return row.status + how + times
    if not ok:
        return failed + how
    return f"ok {ok - row.busy}/{row.repeats}, {failed}{how}"


def title(table: SweepTable) -> str:
    """The table's caption: sweep, ladder, workload and where it ran."""
    limit = (f", memory capped at {table.memory_limit_gb:g} GiB (memory.limit_gb)"
             if table.memory_limit_gb is not None else "")
    return (f"sweep {table.sweep_id}: ladder {table.ladder}, workload {table.workload} ({table.size}), "
            f"on {table.device} {table.hardware}{limit}")


def _strong(text: str) -> str:
    return f"**{text}**"


def group_line(group: GroupRow, strong: Callable[[str], str] = _strong) -> str:
    """One sentence: a group claim, what was measured and its verdict."""
    note = f" ({group.note})" if group.note else ""
    claim = f"{group.claim} {_group_part(group.component)}" if group.component else group.claim
    return (f"Rungs {group.first}-{group.last} together ({group.changes}): measured "
            f"{ratio_text(group.measured, band=True)}{note}; the guide claims {claim} ({group.claim_source}): "
            f"{strong(group.verdict or 'not measured')}.")


def _group_part(component: str) -> str:
    return epochs.label(component) if epochs.epoch_samples(component) else f"in {component}"


def total_line(table: SweepTable, strong: Callable[[str], str] = _strong) -> str:
    """The total claim's sentence ("" without one)."""
    if not table.total_claim:
        return ""
    return (f"Total: measured {ratio_text(table.total_measured, band=True)} over the baseline; the guide claims "
            f"{table.total_claim}: {strong(table.total_verdict or 'not measured')}.")


def footer_lines(table: SweepTable, strong: Callable[[str], str] = _strong) -> list[str]:
    """The sentences under the table: total and group verdicts, how to read it (not the notes)."""
    lines = [total_line(table, strong)] if table.total_claim else []
    lines += [group_line(g, strong) for g in table.groups]
    mem = MEMORY_NOTE.get(table.device, "peak memory")
    if table.device == "cuda":
        mem += (" (what the allocator holds), with the allocated peak (live tensors) beside it where they differ and "
                "the allocator's retries where there were any (cudaMalloc failed, the cache was freed: memory "
                "pressure that slows steps); NVML's device-wide figure (every process, the CUDA context too) is in "
                "the memory plot")
    lines.append(f"Peak mem is {mem}. Verdicts compare x previous, with its 95% band (the rung x round model), to the "
                 "guide's claim, on this device: confirms only when the band excludes 1 (no change); inconclusive when "
                 "it holds both; no verdict from a busy machine or without a band.")
    if any(r.bound for r in table.rows):
        lines.append("Beside the data wait: what the rung's profile says bounds a step (data-bound: the host waits "
                     "for batches >= 30% of the step while the device idles; both: the loader and the device, when it "
                     "waits while the device runs kernels nearly the whole step; launch-bound: the device runs no "
                     "kernel >= 60% of it).")
    lines.append(compute_line(table))
    lines += table.readings
    if has_scaling(table):
        lines.append("E(N) = X(N) / (N x X(1)): the rung's global samples/s over N times the last single-device "
                     "rung's, or for a rung that changes nodes the last one-node rung's, N its ranks over that "
                     "rung's (100% is perfect scaling; samples/s is global, the slowest rank's pace); in brackets "
                     "its 95% band from the rung x round model.")
    return lines


def compute_line(table: SweepTable) -> str:
    """How to read the compute column, and the claims judged on one part of the step."""
    source = ("the device's own step time (CUDA events)" if table.device == "cuda"
              else "the step time minus the time waiting on the loader")
    return (f"Compute x previous: the change's effect on the compute part alone, per sample: {source}. A claim marked "
            "(data), (compute) or (validation) is judged on that part: the loader's pace, the compute part, the "
            "validation passes' time per training sample.")


def _markdown_grid(head: tuple[str, ...], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return lines + ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in rows]


def to_markdown(table: SweepTable) -> str:
    """The table as markdown: a heading, the grid, the verdict sentences, then the notes as a list."""
    scaling = has_scaling(table)
    lines = [f"### {title(table)}", ""]
    lines += _markdown_grid(headers(table), [row_cells(r, scaling) for r in table.rows])
    lines.append("")
    lines += footer_lines(table)
    lines += [f"- {n}" for n in table.notes]
    return "\n".join(lines) + "\n"


def to_csv(table: SweepTable) -> str:
    """One CSV row per rung, the sweep id first."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(("sweep_id",) + headers(table))
    for r in table.rows:
        writer.writerow([table.sweep_id] + row_cells(r, has_scaling(table)))
    return buf.getvalue()


def to_html(table: SweepTable) -> str:
    """An HTML table with its caption, then the sentences under it (as the markdown's) and the notes."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers(table))
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row_cells(r, has_scaling(table)))
                   + "</tr>" for r in table.rows)
    # the same sentences as the markdown's, the strong parts (**...**) in bold
    extra = "".join("<p>" + re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", html.escape(line)) + "</p>"
                    for line in footer_lines(table))
    if table.notes:
        extra += "<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in table.notes) + "</ul>"
    return (f"<table class='sweep'><caption>{html.escape(title(table))}</caption><thead><tr>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table>{extra and '<div>' + extra + '</div>'}")


FORMATS = {"md": to_markdown, "csv": to_csv, "html": to_html}


def render(table: SweepTable, fmt: str = "md") -> str:
    """The table in ``fmt``: one of :data:`FORMATS`."""
    return FORMATS[fmt](table)


def campaign_cells(summary: CampaignSummary) -> list[list[str]]:
    """One row of cells per sweep of the campaign, in the order of :data:`CAMPAIGN_HEADER`."""
    return [[r.sweep_id, r.workload, r.ladder, r.device, ratio_text(r.total_measured, band=True), r.total_claim,
             r.total_verdict, str(r.failed_rungs)] for r in summary.rows]


def render_campaign_summary(summary: CampaignSummary, fmt: str = "md") -> str:
    """The campaign's summary table: a line per sweep, total measured against claimed."""
    cells = campaign_cells(summary)
    if fmt == "csv":
        buf = io.StringIO()
        csv.writer(buf).writerows([("campaign_id",) + CAMPAIGN_HEADER] + [[summary.campaign_id] + c for c in cells])
        return buf.getvalue()
    if fmt == "html":
        head = "".join(f"<th>{html.escape(h)}</th>" for h in CAMPAIGN_HEADER)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in cells)
        return (f"<table class='campaign'><caption>campaign {html.escape(summary.campaign_id)}</caption>"
                f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
    lines = [f"### campaign {summary.campaign_id}: {len(summary.rows)} sweeps", ""]
    return "\n".join(lines + _markdown_grid(CAMPAIGN_HEADER, cells)) + "\n"


def render_campaign(summary: CampaignSummary, fmt: str = "md") -> str:
    """Every sweep's table, then the summary."""
    parts = [render(t, fmt) for t in summary.tables] + [render_campaign_summary(summary, fmt)]
    return ("" if fmt == "csv" else "\n").join(parts)
