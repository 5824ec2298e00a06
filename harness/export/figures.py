"""What an export hands a tracker: the decided figures of a sweep's rungs or a check's configs, plain Python.

A tracker samples every 10-15 s, coarser than a measuring window, so the export is the decided summary, not a
stream of steps: one :class:`Group` per sweep (its rungs) or check (its configs), each :class:`Entry` with the
settings as params, the figures as metrics (throughput with the ends of its 95% band, the speedups with theirs,
the step times' percentiles, data wait, compute share, peak memory, MFU) and the verdict, claim, commit and code
fingerprint as tags. The writers (``harness.export.to_tb``, ``to_mlflow``, ``to_wandb``) take these alone.
No torch, no tracker library.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness.analysis.gate import verdicts
from harness.analysis.stats.busy import busy_reasons
from harness.analysis.stats.speedup import Ratio
from harness.analysis.views import table as table_mod
from harness.analysis.views.rows import RungRow, SweepTable
from harness.store import load_runs

Value = str | int | float | bool
PERCENTILES = (10, 50, 90, 99)  # of the pooled step times of a rung's ok runs


@dataclass
class Entry:
    """One run folder (TensorBoard), nested run (MLflow) or run (W&B): a rung of a sweep, or a config of a check."""

    name: str
    step: int  # the rung (or the config's place in the check): where its points sit on a chart of the sweep
    params: dict[str, Value] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def slug(self) -> str:
        """The name as a folder name."""
        return re.sub(r"[^A-Za-z0-9._=-]+", "_", self.name).strip("_") or f"entry-{self.step}"


@dataclass
class Group:
    """A sweep or a check: a parent run with figures of its own and one entry per rung or config."""

    kind: str  # "sweep" or "check"
    id: str
    params: dict[str, Value] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    entries: list[Entry] = field(default_factory=list)


def finite(metrics: dict[str, float | None]) -> dict[str, float]:
    """The metrics that have a value: None and NaN left out (a tracker takes numbers)."""
    return {k: float(v) for k, v in metrics.items() if v is not None and math.isfinite(float(v))}


def ratio_metrics(prefix: str, ratio: Ratio | None) -> dict[str, float | None]:
    """``prefix``, ``prefix_low``, ``prefix_high``: a speedup and the ends of its 95% band (none without a band)."""
    if ratio is None:
        return {}
    return {prefix: ratio.value, f"{prefix}_low": ratio.low, f"{prefix}_high": ratio.high}


def flat_settings(config_json: str) -> dict[str, Value]:
    """A record's resolved settings as dotted keys (``data.num_workers``); lists as text."""
    try:
        tree = json.loads(config_json or "{}")
    except ValueError:
        return {}
    out: dict[str, Value] = {}

    def walk(node, prefix: str) -> None:
        for key, value in node.items():
            name = f"{prefix}{key}"
            if isinstance(value, dict):
                walk(value, name + ".")
            elif isinstance(value, (bool, int, float, str)):
                out[name] = value
            else:
                out[name] = "" if value is None else json.dumps(value)

    if isinstance(tree, dict):
        walk(tree, "")
    return out


def sweep_group(results_dir: str, sweep: str = "latest", table: SweepTable | None = None) -> Group:
    """The sweep ``sweep`` of the store in ``results_dir`` (ValueError naming it when it is not there); ``table``:
    its table where the command built it already."""
    table = table if table is not None else table_mod.load_table(results_dir, sweep)
    return table_group(table, load_runs(results_dir, sweep=table.sweep_id))


def table_group(table: SweepTable, records) -> Group:
    """A sweep's table as it was built (its rows are not made again) and its records (each rung's settings)."""
    first = records.iloc[0]
    group = Group(kind="sweep", id=table.sweep_id,
                  params={"sweep_id": table.sweep_id, "ladder": table.ladder, "workload": table.workload,
                          "device": table.device, "hardware": table.hardware, "size": table.size},
                  metrics=finite(ratio_metrics("speedup/total", table.total_measured)
                                 | {"sweep/minutes": table.minutes}),
                  tags=_identity(first) | {"kind": "sweep", "sweep_id": table.sweep_id, "ladder": table.ladder,
                                           "verdict": table.total_verdict or "-", "claim": table.total_claim or "-"})
    for row in table.rows:
        group.entries.append(_rung_entry(table, row, records[records["rung"] == row.rung]))
    return group


def _text(value) -> str:
    """A record's text field; "" where the store has none (pandas reads a missing string as None or NaN)."""
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


def _identity(record) -> dict[str, str]:
    return {"commit": _text(record.get("git_commit")), "fingerprint": _text(record.get("code_fingerprint")),
            "env_key": _text(record.get("env_key"))}


def _rung_entry(table: SweepTable, row: RungRow, runs) -> Entry:
    """One rung: its settings, decided figures (of the runs its table row uses) and verdict."""
    ok = runs[(runs["status"] == "ok") & runs["samples_per_s"].notna()]
    first = (ok if len(ok) else runs).iloc[0]
    quiet = ok[[not why for why in busy_reasons(ok)]]
    shown = quiet if len(quiet) else ok  # the table's rule: a busy machine's runs are left out where any was quiet
    entry = Entry(name=f"rung {row.rung} {row.change}", step=row.rung)
    entry.params = flat_settings(_text(first["config_json"])) | {"rung": row.rung, "change": row.change}
    low, high = row.samples_per_s_band or (None, None)
    metrics: dict[str, float | None] = {
        "throughput/samples_per_s": row.samples_per_s,
        "throughput/samples_per_s_low": low,
        "throughput/samples_per_s_high": high,
        "throughput/units_per_s": _median(shown, "units_per_s"),
        "time/data_wait_share": row.data_wait_frac,
        "time/compute_share": _compute_share(row),
        "memory/peak_bytes": row.peak_mem_bytes,
        "mfu": _median(shown, "mfu"),
        "runs/ok": float(len(quiet)), "runs/busy": float(len(ok) - len(quiet)), "runs/all": float(len(runs)),
    }
    metrics |= ratio_metrics("speedup/x_baseline", row.x_baseline) | ratio_metrics("speedup/x_previous",
                                                                                     row.x_previous)
    metrics |= step_percentiles(shown)
    entry.metrics = finite(metrics)
    unit = _text(first.get("unit"))
    entry.tags = _identity(first) | {"kind": "rung", "sweep_id": table.sweep_id, "status": row.status,
                                     "verdict": row.verdict or "-", "claim": row.claim or "-",
                                     "claim_source": row.claim_source or "-", "unit": unit or "-"}
    return entry


def step_percentiles(ok) -> dict[str, float]:
    """The step times' percentiles (ms) over every measured step of ``ok``: the rung's ok runs that its figures come
    from (a run on a busy machine measured the other work: one of its slow steps would move the p90 and p99)."""
    steps = [float(v) for run in ok["step_ms"] if run is not None for v in run] if "step_ms" in ok else []
    if not steps:
        return {}
    return {f"step_ms/p{p}": float(np.percentile(steps, p)) for p in PERCENTILES}


def _median(frame, column: str) -> float | None:
    if column not in frame:
        return None
    values = frame[column].dropna()
    return float(values.median()) if len(values) else None


def _compute_share(row: RungRow) -> float | None:
    """The compute part of a median step (CUDA events, or the step less its data wait), as a share of it."""
    if row.parts is None or row.parts.compute_ms is None or not row.step_ms_p50:
        return None
    return min(1.0, row.parts.compute_ms / row.step_ms_p50)


def check_document(results_dir: str, check: str = "latest") -> tuple[str, dict]:
    """A kept check verdict (``<results>/checks/verdicts/<id>.json``) by its id or ``latest``: (id, document);
    ValueError naming the id and the ones there are."""
    folder = verdicts.verdicts_dir(results_dir)
    paths = sorted(folder.glob("*.json")) if folder.is_dir() else []
    found = {}
    for path in paths:
        try:
            found[path.stem] = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
    if not found:
        raise ValueError(f"no check verdicts in {folder}: run python -m harness check first")
    if check == "latest":
        wanted = max(found, key=lambda k: str(found[k].get("timestamp", "")))
    else:
        matches = [k for k, d in found.items() if check in (k, str(d.get("check_id", "")))]
        if not matches:
            known = ", ".join(sorted(found)[-5:])
            raise ValueError(f"--check {check!r}: no such check in {folder}; valid choices: latest, {known}")
        wanted = matches[0]
    return wanted, found[wanted]


def check_group(results_dir: str, check: str = "latest") -> Group:
    """A check (either kind) as a group: a config per entry, its ratio with the band, its verdict."""
    check_id, doc = check_document(results_dir, check)
    paired = doc.get("kind") == "against"
    group = Group(kind="check", id=str(doc.get("check_id") or check_id))
    group.params = {k: str(doc[k]) for k in ("kind", "sweep", "ref", "ref_commit", "work_commit", "baseline",
                                              "baseline_sweep", "checked_sweep", "rounds", "max_rounds")
                    if doc.get(k) not in (None, "")}
    group.metrics = finite({f"configs/{s}": float(n) for s, n in (doc.get("counts") or {}).items()}
                           | {"exit_code": doc.get("exit_code")})
    group.tags = {"kind": "check", "check_id": group.id, "exit_code": str(doc.get("exit_code", "")),
                  "commit": str(doc.get("work_commit") or ""), "error": str(doc.get("error") or "")[:500]}
    for i, row in enumerate(doc.get("rows") or []):
        group.entries.append(_check_entry(i, row, paired))
    return group


def _check_entry(i: int, row: dict, paired: bool) -> Entry:
    low, high = ("lower", "upper") if paired else ("ci_low", "ci_high")
    base, head = (("ref_samples_per_s", "work_samples_per_s") if paired
                  else ("baseline_samples_per_s", "current_samples_per_s"))
    entry = Entry(name=str(row.get("name") or f"config {i}"), step=i)
    entry.params = {k: row[k] for k in ("workload", "ladder", "rung", "change", "config_hash", "threshold",
                                        "hardware") if row.get(k) not in (None, "")}
    entry.metrics = finite({"check/ratio": row.get("ratio"), "check/ratio_low": row.get(low),
                            "check/ratio_high": row.get(high), "check/level": row.get("level"),
                            "check/p_value": row.get("p_value"), "throughput/base_samples_per_s": row.get(base),
                            "throughput/head_samples_per_s": row.get(head), "check/rounds": row.get("rounds"),
                            "memory/ratio": row.get("mem_ratio")})
    entry.tags = {"kind": "config", "verdict": str(row.get("status", "")),
                  "notes": "; ".join(map(str, row.get("notes") or []))[:500]}
    return entry


def groups(results_dir: str, sweep: str | None, check: str | None, campaign: str | None = None) -> list[Group]:
    """What the flags name: the sweep, the campaign's sweeps, the check (ValueError for one that is not there)."""
    if not Path(results_dir).is_dir():
        raise ValueError(f"--results {results_dir!r}: no such folder")
    out = []
    if campaign is not None:
        summary = table_mod.load_campaign(results_dir, campaign)  # its tables, each built once
        out += [table_group(t, load_runs(results_dir, sweep=t.sweep_id)) for t in summary.tables]
    if sweep == "all":  # the whole store, oldest first (an export already there is left alone: run it again freely)
        runs = load_runs(results_dir, columns=["sweep_id", "timestamp"]).sort_values("timestamp")
        out += [sweep_group(results_dir, s) for s in dict.fromkeys(runs["sweep_id"].fillna("")) if s]
    elif sweep is not None:
        out.append(sweep_group(results_dir, sweep))
    if check == "all":
        out += [check_group(results_dir, c) for c in check_ids(results_dir)]
    elif check is not None:
        out.append(check_group(results_dir, check))
    return out


def check_ids(results_dir: str) -> list[str]:
    """The ids of every kept check verdict, oldest first."""
    folder = verdicts.verdicts_dir(results_dir)
    return [p.stem for p in sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime)] if folder.is_dir() else []
