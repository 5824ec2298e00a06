"""One self-contained HTML report of a sweep, from the store alone (no torch, no Hydra).

The command is ``python -m harness report`` (``harness.commands.report``).

The file holds everything inline (styles, and plots as base64 ``data:`` URIs), so it opens offline
and can be attached to a pull request or mailed to a colleague.
"""

from __future__ import annotations

import base64
import html
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from harness.analysis.stats import calibration, speedup
from harness.analysis.views import epochs, plots, render
from harness.analysis.views.profile import profile_html, rung_profiles
from harness.analysis.views.rows import SweepTable
from harness.store import load_runs

# (column, heading) of the per-run environment table
ENV_COLUMNS = (
    ("torch_version", "torch"), ("cuda_version", "CUDA"), ("cudnn_version", "cuDNN"), ("monai_version", "MONAI"),
    ("torchvision_version", "torchvision"), ("python_version", "Python"), ("harness_version", "harness"),
    ("gpu_name", "GPU"), ("gpu_driver", "driver"), ("cpu_model", "CPU"), ("cpu_count", "CPUs"),
    ("hostname", "host"), ("git_commit", "git commit"),
)

STYLE = """
body { font-family: -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; margin: 24px auto; max-width: 1300px;
       color: #222; padding: 0 16px; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #ddd; }
.meta { color: #666; font-size: 13px; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-size: 12px; margin: 8px 0; }
th, td { border: 1px solid #ddd; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } caption { text-align: left; font-weight: bold; padding: 4px 0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.confirms { color: #2e7d32; font-weight: bold; } .exceeds { color: #1565c0; font-weight: bold; }
.short { color: #c62828; font-weight: bold; } .inconclusive { color: #8d6e00; font-weight: bold; }
figure { margin: 16px 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #555; font-size: 13px; }
.scroll div { font-size: 13px; }
"""


@dataclass
class Image:
    """A plot ready to embed."""

    name: str
    caption: str
    data_uri: str


def embed(plot: plots.Plot) -> Image:
    """Render a plot to PNG and wrap it as a base64 data URI."""
    encoded = base64.b64encode(plots.to_bytes(plot, "png")).decode("ascii")
    return Image(plot.name, plot.caption, f"data:image/png;base64,{encoded}")


def _esc(value) -> str:
    return html.escape("" if value is None else str(value))


def _verdict_class(verdict: str) -> str:
    if verdict.startswith("confirms"):
        return "confirms"
    if verdict.startswith("exceeds"):
        return "exceeds"
    if verdict.startswith("inconclusive"):
        return "inconclusive"
    return "short" if verdict else ""


def verdicts_html(table: SweepTable) -> str:
    """The guides' claims next to what was measured, one line per claimed rung, plus the total."""
    claimed = [r for r in table.rows if r.claim]
    if not claimed and not table.total_claim and not table.groups:
        return "<p>This ladder makes no claims to check.</p>"
    body = ""
    for r in claimed:
        shown = r.component_measured or r.x_previous  # a claim about one part is judged on that part's ratio
        measured = ("not measured (" + r.status + ")" if shown is None else speedup.band_text(shown)
                    + (f" ({epochs.label(r.claim_component)})" if r.component_measured else ""))
        verdict = r.verdict or "no verdict"
        body += (f"<tr><td class='num'>{r.rung}</td><td>{_esc(r.change)}</td><td>{_esc(render.claim_text(r))}</td>"
                 f"<td>{_esc(measured)}</td><td class='{_verdict_class(r.verdict)}'>{_esc(verdict)}</td>"
                 f"<td>{_esc(r.claim_source)}</td></tr>")
    if table.total_claim:
        m = table.total_measured
        measured = "not measured" if m is None else speedup.band_text(m)
        body += (f"<tr><td></td><td><b>all rungs together</b> (x baseline)</td><td>{_esc(table.total_claim)}</td>"
                 f"<td>{_esc(measured)}</td><td class='{_verdict_class(table.total_verdict)}'>"
                 f"{_esc(table.total_verdict or 'no verdict')}</td><td></td></tr>")
    for g in table.groups:
        m = g.measured
        measured = "not measured" if m is None else speedup.band_text(m)
        body += (f"<tr><td class='num'>{g.first}-{g.last}</td><td><b>together</b> ({_esc(g.changes)})</td>"
                 f"<td>{_esc(g.claim)}</td><td>{_esc(measured)}</td><td class='{_verdict_class(g.verdict)}'>"
                 f"{_esc(g.verdict or 'no verdict')}</td><td>{_esc(g.claim_source)}</td></tr>")
    head = "".join(f"<th>{h}</th>" for h in ("rung", "change", "guide claims", "measured x previous [noise band]",
                                              "verdict", "source"))
    return (f"<div class='scroll'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"
            f"<p class='meta'>A claim is confirmed when the measured ratio's 95% band overlaps the claimed range "
            f"and excludes 1 (no change); a band holding both is inconclusive. On this device "
            f"({_esc(table.device)}: {_esc(table.hardware)}); {_esc(table.noise_note)}.</p>")


def _env_value(column: str, value) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return ""
    if column == "git_commit":
        return str(value)[:10]
    return str(value)


def environment_html(records) -> str:
    """What every run shares, then one row per run (id, rung, status, and its environment)."""
    records = records.sort_values(["rung", "round", "timestamp"])
    shared, varying = [], []
    for column, heading in ENV_COLUMNS:
        values = {_env_value(column, v) for v in records[column]}
        (shared if len(values) == 1 else varying).append((column, heading, values))
    shared_html = "".join(f"<tr><th>{_esc(h)}</th><td>{_esc(next(iter(v)) or '-')}</td></tr>" for _, h, v in shared)
    head = "".join(f"<th>{_esc(h)}</th>" for h in ("run", "rung", "round", "status", "when", "cached from")) + "".join(
        f"<th>{_esc(h)}</th>" for _, h in ENV_COLUMNS)
    rows = ""
    for _, r in records.iterrows():
        dirty = " (dirty)" if r.get("git_dirty") is True else ""
        cells = [r["run_id"], r["rung"], r["round"], r["status"], str(r["timestamp"])[:19], r["cached_from"] or "-"]
        cells += [_env_value(c, r[c]) + (dirty if c == "git_commit" else "") for c, _ in ENV_COLUMNS]
        rows += "<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in cells) + "</tr>"
    note = ("Every run ran in the same environment." if not varying else
            "Runs differ in: " + ", ".join(h for _, h, _ in varying) + ".")
    return (f"<p>{_esc(note)}</p><table><caption>shared by all runs</caption>{shared_html}</table>"
            f"<div class='scroll'><table><caption>each run</caption><thead><tr>{head}</tr></thead>"
            f"<tbody>{rows}</tbody></table></div>")


def profiles_html(records, results_dir: str | Path | None = None, page_dir: str | Path | None = None) -> str:
    """Each profiled rung's step breakdown, top operators and a link to its trace ("" when no rung was profiled).
    A trace's link is relative to ``page_dir`` (the report's folder), the trace being in ``results_dir``."""
    found = rung_profiles(records)
    if not found:
        return ""
    links = {}
    for p in found:
        if p.trace and results_dir is not None:
            target = Path(results_dir) / p.trace
            links[p.label] = os.path.relpath(target, page_dir) if page_dir is not None else str(target)
    fragment = profile_html({p.label: p.summary for p in found}, links)
    how = ("<p class='meta'>Each profile is of a few training steps run after the measured window had closed "
           "(profile.enabled=true), so it never slows what the table measures. Compare two rungs with "
           "<code>python -m harness profile --rung K --rung K2</code>; open a trace in ui.perfetto.dev.</p>")
    return fragment.replace("</h2>", "</h2>" + how, 1)


def build_report(data: plots.SweepData, images: list[Image], profiles: str = "") -> str:
    """The whole HTML page as one string (``profiles``: :func:`profiles_html`'s section, if any)."""
    t = data.table
    heading = f"Sweep {t.sweep_id}: ladder {t.ladder}, {t.workload} ({t.size}) on {t.device}"
    made = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    figures = "".join(f"<figure id='{_esc(i.name)}'><img alt='{_esc(i.name)}' src='{i.data_uri}'>"
                      f"<figcaption>{_esc(i.caption)}</figcaption></figure>" for i in images)
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{_esc(heading)}</title><style>{STYLE}</style></head><body>"
        f"<h1>{_esc(heading)}</h1><p class='meta'>{_esc(t.hardware)} &middot; swept {_esc(data.date)} &middot; "
        f"harness {_esc(data.harness_version)} &middot; report made {made} with "
        f"<code>python -m harness report</code></p>"
        f"<h2>Speedup table</h2><div class='scroll'>{render.to_html(t)}</div>"
        f"<h2>The guides' claims</h2>{verdicts_html(t)}"
        f"<h2>Plots</h2>{figures}{profiles}"
        f"<h2>Environment</h2>{environment_html(data.records)}"
        "</body></html>\n"
    )


def write_report(frame, sweep: str, out: str | Path, results_dir: str | Path | None = None) -> Path:
    """Build the plots and the page for one sweep and write it to ``out`` (``results_dir``: where the profiles'
    traces are, linked from the page)."""
    data = plots.sweep_data(frame, sweep)
    images = [embed(p) for p in plots.build_plots(data)]
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    profiles = profiles_html(data.records, results_dir, path.parent)
    path.write_text(build_report(data, images, profiles), encoding="utf-8")
    return path


def report_sweep(results_dir: str, sweep: str, out: str | Path) -> Path:
    """:func:`write_report` of ``sweep`` of the store in ``results_dir``, with the store's noise calibration."""
    frame = calibration.calibration_frame(results_dir, load_runs(results_dir, sweep=sweep))
    return write_report(frame, sweep, out, results_dir)
