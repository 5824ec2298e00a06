"""Two or more sweeps side by side, from the store alone (no torch, no Hydra).

The command is ``python -m harness compare SWEEP SWEEP [...]`` (``harness.commands.compare``).

A SWEEP is a sweep id in ``--results``, a results folder (its latest sweep) or a parquet file.
Rungs are lined up by ladder + rung + change. Two GPUs resolve the same rung to different settings
(a different config_hash), and that is the point of comparing them, so a differing hash alone does
not stop a comparison: it is named in the notes. A rung that only one side has, or whose change
differs, is shown as "not comparable" and never paired.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from harness.analysis.gate import sessions
from harness.analysis.stats import noise_model, speedup
from harness.analysis.views import labels, plots, table as table_mod
from harness.analysis.views.rows import RungRow, SweepTable
from harness.registry import unknown_choice
from harness.store import load_parquet_files, load_runs, resolve_sweep

# settings that say where or as what a run was stored, not how it trained
IGNORED_SETTINGS = ("results_dir", "sweep.")


@dataclass
class Side:
    """One sweep being compared, with the label that tells it apart from the others."""

    source: str  # what the user typed
    table: SweepTable
    records: object  # the sweep's records (pandas DataFrame)
    label: str = ""

    def row(self, rung: int) -> RungRow | None:
        return next((r for r in self.table.rows if r.rung == rung), None)


@dataclass
class CompareRow:
    """One rung across all sides: each side's samples/s and each later side's ratio to the first."""

    rung: int
    change: str
    samples_per_s: list[float | None]
    ratios: list[speedup.Ratio | None] = field(default_factory=list)  # side i / side 0, for i >= 1
    comparable: bool = True
    note: str = ""


# ------------------------------------------------------------------------------------------
# Loading


def load_side(source: str, results: str) -> Side:
    """A sweep from an id in ``results`` (or ``latest``, as ``table`` and ``check`` take it), a results folder or a
    parquet file (ValueError if none)."""
    path = Path(source)
    if path.is_file() and path.suffix == ".parquet":
        frame = load_parquet_files([str(path)])
    elif path.is_dir():
        frame = _folder_frame(path)
    else:
        ids = set(load_runs(results, columns=["sweep_id"])["sweep_id"].dropna())
        sweep = resolve_sweep(results, source) if source == "latest" and source not in ids else source
        if sweep not in ids:
            raise unknown_choice(f"sweep (not 'latest', an id in {results}/, a results folder or a parquet file)",
                                 source, sorted(i for i in ids if i)[-20:])
        frame = load_runs(results, where={"sweep_id": sweep})
        return _side(source, noise_model.with_calibrations(results, frame), sweep)
    return _side(source, frame, "latest")


def _folder_frame(path: Path):
    """Records of a results folder, or of a folder of parquet files (e.g. ``results/runs``)."""
    if (path / "runs").is_dir() or (path / "compacted").is_dir():
        return noise_model.with_calibrations(path, load_runs(path, sweep="latest"))
    files = sorted(str(p) for p in path.glob("*.parquet"))
    if not files:
        raise ValueError(f"folder {str(path)!r} holds no runs (expected {path}/runs/*.parquet)")
    return load_parquet_files(files)


def _side(source: str, frame, sweep: str) -> Side:
    table = table_mod.build_table(frame, sweep)
    return Side(source=source, table=table, records=frame[frame["sweep_id"] == table.sweep_id])


# ------------------------------------------------------------------------------------------
# Labels: name each side by what differs between them


def _facts(side: Side) -> dict[str, str]:
    first = side.records.sort_values("timestamp").iloc[0]
    commit = str(first["git_commit"] or "")[:8]
    return {
        "hardware": side.table.hardware,
        "torch": f"torch {first['torch_version']}",
        "commit": f"commit {commit}" if commit else "commit ?",
        "workload": f"{side.table.workload} ({side.table.size})",
        "harness": f"harness {labels.version_text(first)}",
    }


def label_sides(sides: list[Side]) -> None:
    """Label each side by the facts that differ (hardware, torch, commit, ...), else by sweep id."""
    facts = [_facts(s) for s in sides]
    differing = [k for k in facts[0] if len({f[k] for f in facts}) > 1]
    for side, f in zip(sides, facts):
        side.label = ", ".join(f[k] for k in differing) or side.table.sweep_id
    labels = [s.label for s in sides]
    for side in sides:
        if labels.count(side.label) > 1 and side.label != side.table.sweep_id:
            side.label += f" [{side.table.sweep_id}]"
    labels = [s.label for s in sides]
    for i, side in enumerate(sides):  # the same sweep given twice: still tell the columns apart
        if labels.count(side.label) > 1:
            side.label += f" #{i + 1}"


# ------------------------------------------------------------------------------------------
# Lining up rungs


def settings(side: Side, rung: int) -> dict[str, object]:
    """A rung's stored settings, flattened to dotted keys, without storage-only keys."""
    runs = side.records[side.records["rung"] == rung]
    raw = json.loads(runs["config_json"].iloc[0] or "{}") if len(runs) else {}
    flat: dict[str, object] = {}

    def walk(prefix: str, value) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}{k}.", v)
        else:
            flat[prefix[:-1]] = value

    walk("", raw)
    return {k: v for k, v in flat.items() if not any(k == i or k.startswith(i) for i in IGNORED_SETTINGS)}


def line_up(sides: list[Side]) -> list[CompareRow]:
    """One CompareRow per rung index any side has, in rung order."""
    rungs = sorted({r.rung for s in sides for r in s.table.rows})
    return [_compare_rung(sides, rung) for rung in rungs]


def _compare_rung(sides: list[Side], rung: int) -> CompareRow:
    rows = [s.row(rung) for s in sides]
    present = [r for r in rows if r is not None]
    changes = {r.change for r in present}
    out = CompareRow(rung=rung, change=present[0].change if len(changes) == 1 else " / ".join(sorted(changes)),
                     samples_per_s=[r.samples_per_s if r else None for r in rows])
    reason = _not_comparable(sides, rows)
    if reason:
        out.comparable, out.note = False, reason
        out.ratios = [None] * (len(sides) - 1)
        return out
    first = rows[0]
    for side, row in zip(sides[1:], rows[1:]):
        if first.runs is None or row.runs is None:
            out.ratios.append(None)
        else:  # the later side's noise model, as `check` of that sweep against the first would use
            out.ratios.append(side_ratio(row.runs, first.runs, side.table.noise))
    failed = [f"{r.status} on {s.label}" for s, r in zip(sides, rows) if r.status != "ok"]
    differ = _settings_differ(sides, rung)
    out.note = "; ".join(failed + ([f"settings differ: {differ}"] if differ else []))
    return out


def side_ratio(new: noise_model.Runs, old: noise_model.Runs, noise: noise_model.Noise,
               session: sessions.SessionNoise = sessions.DEFAULT) -> speedup.Ratio:
    """new / old with the noise model's band plus the term between two sessions (each side is a sweep of its own:
    ``sessions.DEFAULT``, sd 3%, as ``check --baseline`` assumes without a history), and no band where no variance
    is known (one run on a side and no calibration): never one from an assumed CV."""
    if noise.calibrated or min(new.n, old.n) >= 2:
        e = sessions.effect(old, new, noise, session)
        method = f"the runs' noise model and {session.sd:.0%} between sessions"
        return noise_model.Difference(e.diff, e.se, e.df, method).ratio(min(new.n, old.n))
    value = math.exp(float(new.logs().mean() - old.logs().mean()))
    return speedup.Ratio(value, math.nan, math.nan, runs=min(new.n, old.n),
                         method="no band: one run on a side and no calibration")


def ratio_cell(r: speedup.Ratio | None) -> str:
    """A ratio as the table shows it: ``(within noise)`` where its band holds 1x, ``(no band)`` where there is none
    (a bare ratio reads as a change beyond noise)."""
    if r is not None and (math.isnan(r.low) or math.isnan(r.high)):
        return f"{r.value:.2f}x (no band)"
    return speedup.ratio_text(r)


def _not_comparable(sides: list[Side], rows) -> str:
    """Why this rung cannot be paired across the sides ("" when it can)."""
    missing = [s.label for s, r in zip(sides, rows) if r is None]
    if missing:
        return "not comparable: no such rung on " + ", ".join(missing)
    ladders = {s.table.ladder for s in sides}
    if len(ladders) > 1:
        return "not comparable: different ladders (" + " vs ".join(s.table.ladder for s in sides) + ")"
    if len({r.change for r in rows}) > 1:
        return "not comparable: the change differs (" + " vs ".join(r.change for r in rows) + ")"
    return ""


def _settings_differ(sides: list[Side], rung: int, shown: int = 4) -> str:
    """The settings keys whose values differ between the sides at this rung, e.g. ``precision (32 vs bf16)``."""
    each = [settings(s, rung) for s in sides]
    keys = sorted({k for e in each for k in e if len({json.dumps(x.get(k), sort_keys=True) for x in each}) > 1})
    text = [f"{k} ({' vs '.join(str(e.get(k)) for e in each)})" for k in keys[:shown]]
    return ", ".join(text) + (f" and {len(keys) - shown} more" if len(keys) > shown else "")


# ------------------------------------------------------------------------------------------
# Output


def to_markdown(sides: list[Side], rows: list[CompareRow]) -> str:
    """The side-by-side table: each side's samples/s, each later side's ratio to the first, notes."""
    letters = [chr(ord("A") + i) for i in range(len(sides))]
    lines = [f"### compare: {' vs '.join(s.label for s in sides)}", ""]
    for letter, side in zip(letters, sides):
        t = side.table
        lines.append(f"- {letter} = {side.label}: sweep {t.sweep_id}, ladder {t.ladder}, {t.workload} ({t.size}) "
                     f"on {t.device} {t.hardware} (from {side.source})")
    header = ["rung", "change"] + [f"{letter} samples/s" for letter in letters]
    header += [f"{letter}/A" for letter in letters[1:]] + ["note"]
    lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [str(row.rung), row.change]
        cells += ["-" if v is None else f"{v:.2f}" for v in row.samples_per_s]
        cells += [ratio_cell(r) if row.comparable else "not comparable" for r in row.ratios]
        cells.append(row.note or "-")
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    lines.append("")
    lines.append("Ratios are later side / A in samples/s; '(within noise)' means the ratio's 95% band holds 1x "
                 "(the runs' noise model and a 3% sd between two sweeps' sessions, as check --baseline assumes); "
                 "'(no band)': one run on a side and no calibration, no variance known.")
    return "\n".join(lines) + "\n"


def grouped_plot(sides: list[Side], rows: list[CompareRow], path: Path) -> Path:
    """Grouped bars: samples/s per rung, one bar per side; rungs that cannot be paired are greyed."""

    plt = plots.plt
    fig, ax = plots.new_figure(len(rows) * max(1, len(sides) - 1), 6)
    width = 0.8 / len(sides)
    colours = plt.get_cmap("tab10").colors
    for i, side in enumerate(sides):
        xs = [j + (i - (len(sides) - 1) / 2) * width for j in range(len(rows))]
        values = [v or 0.0 for v in (row.samples_per_s[i] for row in rows)]
        ax.bar(xs, values, width=width * 0.95, color=colours[i % 10], label=f"{chr(65 + i)}: {side.label}")
    top = max([v or 0.0 for row in rows for v in row.samples_per_s] + [1.0])
    for j, row in enumerate(rows):
        if not row.comparable:
            ax.axvspan(j - 0.45, j + 0.45, color="#9e9e9e", alpha=0.25, hatch="//")
            ax.text(j, top * 1.05, "not\ncomparable", ha="center", va="bottom", fontsize=7, color="#c62828")
        elif row.ratios and row.ratios[-1] is not None:
            ax.text(j, top * 1.05, f"{row.ratios[-1].value:.2f}x", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(rows)), labels.tick_labels(rows), fontsize=8)
    ax.set_xlabel("rung and the one change it adds")
    ax.set_ylabel("throughput (samples/s)")
    ax.set_ylim(0, top * 1.25)
    ax.legend(fontsize=8, loc="upper left")
    first = sides[0].records.sort_values("timestamp").iloc[0]
    devices = "/".join(sorted({s.table.device for s in sides}))
    ax.set_title(f"Side by side: {' vs '.join(s.label for s in sides)}\n{sides[0].table.workload} on {devices}, ladder "
                 f"{sides[0].table.ladder}  |  {str(first['timestamp'])[:10]}  |  harness {labels.version_text(first)}"
                 f"  |  number above a rung: {chr(64 + len(sides))}/A", fontsize=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


@dataclass
class SideBySide:
    """Two or more sweeps lined up rung by rung, and the markdown table of them."""

    sides: list[Side]
    rows: list[CompareRow]
    text: str


def compare_sweeps(sources: list[str], results: str) -> SideBySide:
    """Line up the sweeps ``sources`` name (ids in ``results``, results folders or parquet files); ValueError
    for fewer than two, or for one that cannot be read."""
    if len(sources) < 2:
        got = f" ({sources[0]!r})" if sources else ""
        raise ValueError(f"compare needs two or more sweeps, got {len(sources)}{got}")
    sides = [load_side(s, results) for s in sources]
    label_sides(sides)
    rows = line_up(sides)
    return SideBySide(sides, rows, to_markdown(sides, rows))


def write_comparison(comparison: SideBySide, out: str | Path) -> list[Path]:
    """Write the table (``compare.md``) and its plot (``compare.png``) into ``out``; the files written."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare.md").write_text(comparison.text)
    return [out / "compare.md", grouped_plot(comparison.sides, comparison.rows, out / "compare.png")]
