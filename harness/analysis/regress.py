"""Baseline regression checks that CI can gate on: ``baseline save|list`` and ``check``.

    python -m harness baseline save NAME [--sweep latest] [--results DIR] [--force]
    python -m harness baseline list [--results DIR]
    python -m harness check --baseline NAME|PATH [--sweep latest] [--results DIR]
                            [--threshold 0.05] [--threshold WORKLOAD=0.07] [--threshold ladder:NAME=0.1]
                            [--mem-threshold 0.10] [--format text|junit|json]

Exit codes of ``check``: 0 nothing regressed, 1 something regressed (throughput, memory, or a
config that now fails), 2 bad input or nothing at all comparable.

A baseline is a copy of a sweep's records (``<results>/baselines/NAME.parquet``, same schema as the
run store). Records are matched by ``config_hash`` on the same hardware.

Which statistic decides, and why (also in docs/regression.md and docs/statistics.md)
-------------------------------------------------------------------------------------
The run-level noise model of ``harness.analysis.noise_model``, the same one the table, compare,
plots and report use: the unit of replication is the run (one process), the ratio current/baseline is
the ratio of geometric mean throughputs, its 95% interval a t-interval on log throughput (Welch with
repeats; this machine's calibrated CV, or a default 5%, with one run per side), widened (never
narrowed) by the within-run step bootstrap.

A config regresses when the ratio is below ``1 - threshold`` AND the one-sided test "current is
slower" is significant after Holm's step-down procedure over every config of the check, so the
family-wise error of one ``check`` call is at most 5% however many configs it compares. A drop past
the threshold that the test cannot separate from noise is a *warning* that asks for more repeats.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import warnings
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from harness.analysis import noise_model
from harness.store import SCHEMA_VERSION, load_parquet_files, load_runs, records_from_frame, write_records

STATUSES = ("regressed", "warned", "improved", "unchanged", "missing", "new", "not comparable")
COMPARED = ("regressed", "warned", "improved", "unchanged")
SOFTWARE = {"torch_version": "torch", "cuda_version": "CUDA", "cudnn_version": "cuDNN",
            "gpu_driver": "driver", "monai_version": "MONAI"}
FORMATS = ("text", "junit", "json")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class BadInput(ValueError):
    """Input that ``check``/``baseline`` cannot use; the message is one line, and the exit code is 2."""


# ------------------------------------------------------------------------------------------
# selecting records


def select_sweep(frame: pd.DataFrame, sweep: str = "latest") -> pd.DataFrame:
    """The records of one sweep (``latest`` or a sweep_id); the table command's rule, as BadInput."""
    from harness.analysis import table

    try:
        return table.select_sweep(frame, sweep).reset_index(drop=True)
    except ValueError as exc:
        raise BadInput(str(exc)) from None


def _load_sweep(results_dir: str, sweep: str) -> pd.DataFrame:
    """Only the records of ``sweep`` are read from the store (the sweep is resolved from two columns)."""
    try:
        return noise_model.with_calibrations(results_dir, load_runs(results_dir, sweep=sweep))
    except ValueError as exc:
        raise BadInput(str(exc)) from None


def hardware(row) -> str:
    """What must be equal for two records to be comparable: device type plus GPU or CPU model and count."""
    if row["device"] == "cuda":
        return f"cuda {_int(row['gpu_count'])}x {row['gpu_name']}"
    if row["device"] == "cpu":
        return f"cpu {row['cpu_model']} ({_int(row['cpu_count'])} cores)"
    return str(row["device"])


def _int(value) -> str:
    return "?" if value is None or pd.isna(value) else str(int(value))


def _with_hardware(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame plus a ``_hw`` column, with empty strings (not None) where text is missing."""
    text = ["config_hash", "workload", "ladder", "change", "cached_from"]
    frame = frame.assign(**{c: frame[c].fillna("") for c in text})
    return frame.assign(_hw=frame.apply(hardware, axis=1) if len(frame) else pd.Series(dtype=object))


# ------------------------------------------------------------------------------------------
# thresholds


@dataclass
class Thresholds:
    """A default fraction plus overrides by workload or by ladder (the ladder one wins: it is narrower)."""

    default: float
    by_workload: dict[str, float] = field(default_factory=dict)
    by_ladder: dict[str, float] = field(default_factory=dict)

    def get(self, workload: str, ladder: str) -> float:
        if ladder in self.by_ladder:
            return self.by_ladder[ladder]
        return self.by_workload.get(workload, self.default)

    def describe(self, sign: str) -> str:
        extra = [f"{k} {sign}{v:.0%}" for k, v in self.by_workload.items()]
        extra += [f"ladder:{k} {sign}{v:.0%}" for k, v in self.by_ladder.items()]
        return f"{sign}{self.default:.0%}" + (f" ({', '.join(extra)})" if extra else "")

    def check_names(self, flag: str, workloads: set[str], ladders: set[str]) -> None:
        """A threshold naming a workload or ladder that is not in the data is a typo: say so."""
        for kind, given, known in (("workload", self.by_workload, workloads), ("ladder", self.by_ladder, ladders)):
            for name in given:
                if name not in known:
                    raise BadInput(f"{flag} names {kind} {name!r}, which is in neither sweep; "
                                   f"valid choices: {', '.join(sorted(known)) or 'none'}")


def parse_thresholds(values: list[str] | None, default: float, flag: str) -> Thresholds:
    """Parse repeated ``--threshold`` values: ``0.05``, ``WORKLOAD=0.07`` or ``ladder:NAME=0.1``."""
    result = Thresholds(default)
    for value in values or []:
        key, _, number = value.rpartition("=")
        fraction = _fraction(number, value, flag)
        if not key:
            result.default = fraction
        elif key.startswith("ladder:"):
            result.by_ladder[key.removeprefix("ladder:")] = fraction
        else:
            result.by_workload[key] = fraction
    return result


def _fraction(text: str, value: str, flag: str) -> float:
    try:
        fraction = float(text)
    except ValueError:
        fraction = math.nan
    if not 0 < fraction < 1:
        raise BadInput(f"{flag} {value!r}: expected a fraction between 0 and 1 (0.05 means 5%), "
                       f"as 0.05, WORKLOAD=0.07 or ladder:NAME=0.1")
    return fraction


# ------------------------------------------------------------------------------------------
# statistics (the reasoning is in the module docstring)

CONFIDENCE = noise_model.CONFIDENCE
ALPHA = noise_model.ALPHA


@dataclass(frozen=True)
class RatioEstimate:
    """Throughput ratio current/baseline (>1 is faster), its confidence interval, and the one-sided
    p-value of "current is slower". ``low``/``high`` are NaN when there is no interval."""

    ratio: float
    low: float = math.nan
    high: float = math.nan
    p_slower: float = math.nan
    method: str = ""

    @property
    def has_interval(self) -> bool:
        return not (math.isnan(self.low) or math.isnan(self.high))


def estimate(base: noise_model.Runs, current: noise_model.Runs, noise: noise_model.Noise) -> RatioEstimate:
    """The noise model's ratio current/baseline with its interval and p-value."""
    diff = noise_model.difference(current, base, noise)
    band = diff.ratio(min(base.n, current.n))
    return RatioEstimate(band.value, band.low, band.high, diff.p_slower(), diff.method)


def classify(estimate: RatioEstimate, threshold: float, significant: bool | None = None) -> str:
    """'regressed', 'warned', 'improved' or 'unchanged' for a throughput ratio.

    Regressed: the ratio fell below ``1 - threshold`` AND the drop is significant (``significant``:
    Holm's decision over the whole check; None: the interval lies below 1). Past the threshold but
    inside the noise (or no interval): warned. Improved: above ``1 + threshold`` with the whole
    interval above 1.
    """
    if significant is None:
        significant = estimate.has_interval and estimate.high < 1
    if estimate.ratio < 1 - threshold:
        return "regressed" if significant else "warned"
    if estimate.ratio > 1 + threshold and estimate.has_interval and estimate.low > 1:
        return "improved"
    return "unchanged"


# ------------------------------------------------------------------------------------------
# comparing


@dataclass
class Comparison:
    """One row of the check: one config (config_hash) on one hardware."""

    status: str
    workload: str
    config_hash: str
    hardware: str
    ladder: str = ""
    rung: int | None = None
    change: str = ""
    ratio: float | None = None  # throughput current/baseline; >1 is faster
    ci_low: float | None = None
    ci_high: float | None = None
    p_value: float | None = None  # one-sided, "current is slower", before Holm
    mem_ratio: float | None = None  # peak memory current/baseline; >1 is more
    threshold: float = 0.0
    mem_threshold: float = 0.0
    baseline_samples_per_s: float | None = None
    current_samples_per_s: float | None = None
    baseline_records: int = 0
    current_records: int = 0
    software: list[str] = field(default_factory=list)  # e.g. "torch 2.3.1 -> 2.4.0"
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        """How the config is named in messages: ladder, rung and change, then workload and hash."""
        where = f"{self.ladder} rung {self.rung}" if self.ladder else self.workload
        change = f" {self.change}" if self.change else ""
        return f"{where}{change} [{self.workload} {self.config_hash[:10]}]"


def compare(baseline: pd.DataFrame, current: pd.DataFrame, thresholds: Thresholds, mem_thresholds: Thresholds,
            noise: noise_model.Noise = noise_model.DEFAULT) -> list[Comparison]:
    """Compare every config of ``current`` with ``baseline``; one row per config and hardware.

    Throughput decisions are made together, with Holm's procedure over every config compared.
    """
    baseline, current = _with_hardware(baseline), _with_hardware(current)
    pending: list[_Pending] = []
    base_groups = dict(iter(baseline.groupby(["config_hash", "_hw"], sort=False)))
    cur_groups = dict(iter(current.groupby(["config_hash", "_hw"], sort=False)))
    base_hw = {h: sorted(g["_hw"].unique()) for h, g in baseline.groupby("config_hash")}
    rows = []
    for (config, hw), cur in cur_groups.items():
        row = _row(cur, config, hw, thresholds, mem_thresholds)
        if (config, hw) in base_groups:
            pending += _judge(row, base_groups[(config, hw)], cur, noise)
        elif config in base_hw:
            row.status = "not comparable"
            row.notes.append(f"baseline measured on {'; '.join(base_hw[config])}")
        else:
            row.status = "new"
            row.notes.append("not in the baseline")
        rows.append(row)
    current_configs = set(current["config_hash"])
    for (config, hw), base in base_groups.items():
        if config not in current_configs:
            row = _row(base, config, hw, thresholds, mem_thresholds)
            row.status, row.baseline_records, row.current_records = "missing", len(base), 0
            row.notes.append("in the baseline, not in this sweep")
            rows.append(row)
    _decide_all(pending)
    return sorted(rows, key=lambda r: (r.ladder, -1 if r.rung is None else r.rung, r.workload, r.config_hash))


def _row(group: pd.DataFrame, config: str, hw: str, thresholds: Thresholds, mem_thresholds: Thresholds) -> Comparison:
    first = group.iloc[0]
    rungs = sorted({int(r) for r in group["rung"].dropna()})
    workload, ladder = str(first["workload"]), str(first["ladder"])
    return Comparison(
        status="", workload=workload, config_hash=config, hardware=hw, ladder=ladder,
        rung=rungs[0] if rungs else None,
        # two rungs can share a config (a change that does nothing on this hardware): name both
        change=" / ".join(dict.fromkeys(c for c in group["change"] if c)),
        threshold=thresholds.get(workload, ladder), mem_threshold=mem_thresholds.get(workload, ladder),
        current_records=len(group),
    )


@dataclass
class _Pending:
    """A config compared on throughput, waiting for Holm's decision over the whole check."""

    row: Comparison
    estimate: RatioEstimate
    failed: pd.DataFrame
    base_ok: pd.DataFrame
    cur_ok: pd.DataFrame


def _judge(row: Comparison, base: pd.DataFrame, cur: pd.DataFrame, noise: noise_model.Noise) -> list[_Pending]:
    """Ratios and notes for a config present in both, on the same hardware; the status waits for Holm."""
    row.baseline_records, row.current_records = len(base), len(cur)
    row.software = software_changes(base, cur)
    base_ok = base[(base["status"] == "ok") & (base["samples_per_s"] > 0)]
    cur_ok = cur[(cur["status"] == "ok") & (cur["samples_per_s"] > 0)]
    if base_ok.empty:
        was = _statuses(base)
        row.status, note = ("improved", f"was {was}, now ok") if not cur_ok.empty else ("unchanged", f"still {was}")
        row.notes.append(note)
        return []
    if cur_ok.empty:
        row.status = "regressed"
        row.notes.append(f"now {_statuses(cur)} (baseline ok)")
        return []
    row.baseline_samples_per_s = float(base_ok["samples_per_s"].mean())
    row.current_samples_per_s = float(cur_ok["samples_per_s"].mean())
    est = estimate(noise_model.runs_of(base_ok), noise_model.runs_of(cur_ok), noise)
    row.ratio, row.p_value = est.ratio, est.p_slower
    row.ci_low, row.ci_high = (est.low, est.high) if est.has_interval else (None, None)
    if min(len(base_ok), len(cur_ok)) < 2:
        row.notes.append(f"one run on a side: {noise.describe().removeprefix('noise: ')}; sweep.repeats=3 narrows it")
    return [_Pending(row, est, cur[~cur.index.isin(cur_ok.index)], base_ok, cur_ok)]


def throughput_statuses(estimates: list[RatioEstimate], thresholds: list[float]) -> list[str]:
    """The throughput status of every config of one check: Holm over all of them, then ``classify``."""
    significant = noise_model.holm([e.p_slower for e in estimates], ALPHA)
    return [classify(e, t, sig) for e, t, sig in zip(estimates, thresholds, significant)]


def _decide_all(pending: list[_Pending]) -> None:
    """Holm over every config compared on throughput, then each config's status."""
    statuses = throughput_statuses([p.estimate for p in pending], [p.row.threshold for p in pending])
    for p, status in zip(pending, statuses):
        _decide(p, status, len(pending))


def _decide(p: _Pending, status: str, family: int) -> None:
    row = p.row
    row.status = status
    if row.status == "regressed":
        row.notes.append(f"throughput {_pct(row.ratio)} (threshold -{row.threshold:.0%}, p={row.p_value:.2g}, "
                         f"significant after Holm over {family})")
    elif row.status == "warned":
        row.notes.append(f"throughput {_pct(row.ratio)} but not significant after Holm over {family} configs "
                         f"(p={row.p_value:.2g}): add repeats (sweep.repeats=N)")
    if not p.failed.empty:  # a config that sometimes fails now is not healthy, whatever its speed
        row.status = "regressed"
        row.notes.append(f"{_statuses(p.failed)} in {len(p.failed)} of {row.current_records} rounds")
    row.mem_ratio = _memory_ratio(p.base_ok, p.cur_ok)
    if row.mem_ratio is not None and row.mem_ratio > 1 + row.mem_threshold:
        row.status = "regressed"
        row.notes.append(f"peak memory {_pct(row.mem_ratio)} (threshold +{row.mem_threshold:.0%})")
    if (p.cur_ok["cached_from"] != "").all():
        row.notes.append("current records are cached copies, not new measurements (sweep.rerun=true re-measures)")


def _memory_ratio(base_ok: pd.DataFrame, cur_ok: pd.DataFrame) -> float | None:
    # GPU memory on cuda, host RSS on cpu; peak over repeats, since a peak is what runs out
    column = "peak_vram_bytes" if base_ok["device"].iloc[0] == "cuda" else "peak_host_rss_bytes"
    base, cur = base_ok[column].max(), cur_ok[column].max()
    if pd.isna(base) or pd.isna(cur) or base <= 0:
        return None
    return float(cur / base)


def software_changes(base: pd.DataFrame, cur: pd.DataFrame) -> list[str]:
    """Software versions that differ between baseline and current, as 'torch 2.3.1 -> 2.4.0'."""
    changes = []
    for column, label in SOFTWARE.items():
        before = sorted(set(base[column].fillna("")) - {""})
        after = sorted(set(cur[column].fillna("")) - {""})
        if before != after:
            changes.append(f"{label} {','.join(before) or '-'} -> {','.join(after) or '-'}")
    return changes


def _statuses(frame: pd.DataFrame) -> str:
    return ", ".join(f"{s}" for s in dict.fromkeys(frame["status"]))


def _pct(ratio: float) -> str:
    return f"{ratio - 1:+.1%}"


def exit_code(rows: list[Comparison]) -> int:
    """2 when nothing was comparable, else 1 when anything regressed, else 0."""
    if not any(r.status in COMPARED for r in rows):
        return 2
    return 1 if any(r.status == "regressed" for r in rows) else 0


# ------------------------------------------------------------------------------------------
# baselines on disk


def baselines_dir(results_dir: str | os.PathLike) -> Path:
    return Path(results_dir) / "baselines"


def saved_baselines(results_dir: str | os.PathLike) -> list[str]:
    folder = baselines_dir(results_dir)
    return sorted(p.stem for p in folder.glob("*.parquet")) if folder.is_dir() else []


def baseline_path(value: str, results_dir: str | os.PathLike) -> Path:
    """A baseline given by name (``main-h200``) or by path (anything with a / or ending .parquet)."""
    if value.endswith(".parquet") or "/" in value or os.sep in value:
        path = Path(value)
    else:
        path = baselines_dir(results_dir) / f"{value}.parquet"
    if not path.is_file():
        names = ", ".join(saved_baselines(results_dir)) or "none"
        raise BadInput(f"baseline {value!r} not found (no file {path}); saved baselines in "
                       f"{baselines_dir(results_dir)}: {names}")
    return path


def load_baseline(path: Path) -> pd.DataFrame:
    """Read a baseline file, refusing corrupt files, other schema versions and baselines with no ok record."""
    try:
        with warnings.catch_warnings(record=True) as caught:  # the store skips unreadable files with a warning
            warnings.simplefilter("always")
            frame = load_parquet_files([str(path)])
        if frame.empty and caught:
            raise ValueError(str(caught[0].message).split(": ", 1)[-1])
    except Exception as exc:  # pyarrow raises several types for truncated / foreign files
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BadInput(f"baseline file {path} is not a readable baseline ({reason}); "
                       f"save it again with `python -m harness baseline save NAME --force`") from None
    versions = sorted({int(v) for v in frame["schema_version"].dropna()})
    if not versions or max(versions) > SCHEMA_VERSION:  # older files read fine: new columns come back empty
        raise BadInput(f"baseline file {path} has schema_version {versions or 'missing'}, but this harness "
                       f"reads schema_version {SCHEMA_VERSION} and older; save a new baseline with this version")
    if not (frame["status"] == "ok").any():
        raise BadInput(f"baseline file {path} has no records with status ok; nothing to compare with")
    return frame


def write_baseline(frame: pd.DataFrame, path: Path) -> None:
    """Write records with the store's schema atomically: a temp file in the same folder, then a rename."""
    write_records(records_from_frame(frame), path)


def require_ok(frame: pd.DataFrame, what: str) -> None:
    if not (frame["status"] == "ok").any():
        counts = ", ".join(f"{n} {s}" for s, n in frame["status"].value_counts().items())
        raise BadInput(f"{what} has no records with status ok ({counts or 'no records'}); nothing to compare")


# ------------------------------------------------------------------------------------------
# output


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def format_text(rows: list[Comparison], header: list[str]) -> str:
    """A plain-text table (no colours or wrapping, so CI logs stay readable), then a summary."""
    table = [("status", "ladder", "rung", "change", "workload", "config", "throughput", "95% interval",
              "memory", "software / notes")]
    for r in rows:
        interval = f"[{_num(r.ci_low, '.3f')}, {_num(r.ci_high, '.3f')}]" if r.ci_low is not None else "-"
        table.append((r.status, r.ladder or "-", _num(r.rung, "d"), r.change or "-", r.workload,
                      r.config_hash[:10], _num(r.ratio, ".3f") + ("x" if r.ratio is not None else ""), interval,
                      _num(r.mem_ratio, ".3f") + ("x" if r.mem_ratio is not None else ""),
                      "; ".join(r.software + r.notes) or "-"))
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]) - 1)]
    lines = list(header) + [""]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)) + "  " + line[-1] for line in table]
    counts = {s: sum(r.status == s for r in rows) for s in STATUSES}
    lines += ["", "summary: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n)]
    regressed = [r.name for r in rows if r.status == "regressed"]
    code = exit_code(rows)
    verdict = {0: "OK", 1: "FAIL: regressed: " + "; ".join(regressed), 2: "ERROR: nothing comparable"}[code]
    lines.append(f"result: {verdict} (exit {code})")
    return "\n".join(line.rstrip() for line in lines)


def format_junit(rows: list[Comparison], suite: str) -> str:
    """JUnit XML: one testcase per config; regressions are failures, missing/not comparable are skipped."""
    root = ET.Element("testsuites")
    node = ET.SubElement(root, "testsuite", name=suite, tests=str(len(rows)),
                         failures=str(sum(r.status == "regressed" for r in rows)), errors="0",
                         skipped=str(sum(r.status in ("missing", "not comparable") for r in rows)))
    for r in rows:
        case = ET.SubElement(node, "testcase", classname=f"harness.check.{r.ladder or r.workload}", name=r.name)
        detail = _detail(r)
        if r.status == "regressed":
            ET.SubElement(case, "failure", message="; ".join(r.notes) or "regressed", type="regressed").text = detail
        elif r.status in ("missing", "not comparable"):
            ET.SubElement(case, "skipped", message=f"{r.status}: {'; '.join(r.notes)}".rstrip(": "))
        ET.SubElement(case, "system-out").text = detail
    return ET.tostring(root, encoding="unicode", xml_declaration=True)


def _detail(r: Comparison) -> str:
    return (f"status {r.status}; throughput ratio {_num(r.ratio, '.3f')} "
            f"[{_num(r.ci_low, '.3f')}, {_num(r.ci_high, '.3f')}]; memory ratio {_num(r.mem_ratio, '.3f')}; "
            f"hardware {r.hardware}; " + "; ".join(r.software + r.notes))


def format_json(rows: list[Comparison], info: dict) -> str:
    """A JSON document: run information, counts by status, the exit code and every row."""
    def clean(value):  # JSON has no NaN
        return None if isinstance(value, float) and math.isnan(value) else value

    items = [{k: clean(v) for k, v in asdict(r).items()} | {"name": r.name} for r in rows]
    counts = {s: sum(r.status == s for r in rows) for s in STATUSES}
    return json.dumps(info | {"exit_code": exit_code(rows), "counts": counts, "rows": items}, indent=2)


# ------------------------------------------------------------------------------------------
# commands


def main(command: str, argv: list[str]) -> int:
    """Entry point for ``baseline`` and ``check``; returns the exit code."""
    handlers = {"baseline": baseline_command, "check": check_command}
    try:
        if command not in handlers:
            raise BadInput(f"unknown command {command!r}; valid choices: {', '.join(handlers)}")
        return handlers[command](argv)
    except (BadInput, ValueError, OSError) as exc:  # any input problem is exit 2, never a "regression" (1)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else 2


def baseline_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness baseline",
                                     description="save or list baselines for `check`")
    sub = parser.add_subparsers(dest="action", required=True, metavar="{save,list}")
    save = sub.add_parser("save", help="copy a sweep's records into results/baselines/NAME.parquet")
    save.add_argument("name", help="baseline name (letters, digits, . _ -), e.g. main-h200")
    save.add_argument("--sweep", default="latest", help="sweep id or 'latest' (default)")
    save.add_argument("--results", default="results", help="results folder (default: results)")
    save.add_argument("--force", action="store_true", help="overwrite an existing baseline of that name")
    listing = sub.add_parser("list", help="list saved baselines")
    listing.add_argument("--results", default="results", help="results folder (default: results)")
    args = parser.parse_args(argv)
    if args.action == "list":
        print(list_baselines(args.results))
        return 0
    path = save_baseline(args.name, args.sweep, args.results, args.force)
    print(f"saved baseline {args.name!r} to {path}")
    return 0


def save_baseline(name: str, sweep: str, results_dir: str, force: bool = False) -> Path:
    """Copy the records of ``sweep`` to ``<results>/baselines/NAME.parquet``; refuse to overwrite unless ``force``."""
    if not NAME_RE.match(name):
        raise BadInput(f"baseline name {name!r} is not valid; use letters, digits, '.', '_' and '-' (e.g. main-h200)")
    path = baselines_dir(results_dir) / f"{name}.parquet"
    if path.exists() and not force:
        raise BadInput(f"baseline {name!r} already exists ({path}); pass --force to overwrite it")
    frame = select_sweep(_load_sweep(results_dir, sweep), sweep)
    require_ok(frame, f"sweep {frame['sweep_id'].iloc[0]!r}")
    write_baseline(frame, path)
    return path


def list_baselines(results_dir: str) -> str:
    """One line per saved baseline: name, sweep, record counts, hardware, torch version."""
    names = saved_baselines(results_dir)
    if not names:
        return f"no baselines in {baselines_dir(results_dir)}; save one with `python -m harness baseline save NAME`"
    lines = []
    for name in names:
        path = baselines_dir(results_dir) / f"{name}.parquet"
        try:
            frame = load_parquet_files([str(path)])
        except Exception as exc:  # list the rest even if one file is broken
            lines.append(f"{name}  (unreadable: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__})")
            continue
        sweeps = ",".join(dict.fromkeys(frame["sweep_id"].fillna("")))
        hw = "; ".join(sorted(set(_with_hardware(frame)["_hw"]))) if len(frame) else "-"
        torch = ",".join(sorted(set(frame["torch_version"].fillna("")) - {""})) or "-"
        lines.append(f"{name}  sweep {sweeps}  {int((frame['status'] == 'ok').sum())}/{len(frame)} ok  "
                     f"{hw}  torch {torch}")
    return "\n".join(lines)


def check_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness check",
                                     description="check a sweep against a baseline: exit 0 ok, 1 regression, "
                                                 "2 bad input or nothing comparable")
    parser.add_argument("--baseline", required=True, help="baseline name (in results/baselines) or path to a .parquet")
    parser.add_argument("--sweep", default="latest", help="sweep id or 'latest' (default)")
    parser.add_argument("--results", default="results", help="results folder (default: results)")
    parser.add_argument("--threshold", action="append", metavar="[WORKLOAD=|ladder:NAME=]FRACTION",
                        help="throughput drop that counts (default 0.05); repeat for per-workload or per-ladder values")
    parser.add_argument("--mem-threshold", action="append", metavar="[WORKLOAD=|ladder:NAME=]FRACTION",
                        help="peak memory growth that counts (default 0.10); same forms as --threshold")
    parser.add_argument("--format", default="text", help="text (default), junit or json")
    args = parser.parse_args(argv)
    if args.format not in FORMATS:
        raise BadInput(f"unknown --format {args.format!r}; valid choices: {', '.join(FORMATS)}")
    thresholds = parse_thresholds(args.threshold, 0.05, "--threshold")
    mem_thresholds = parse_thresholds(args.mem_threshold, 0.10, "--mem-threshold")

    base_path = baseline_path(args.baseline, args.results)
    baseline = load_baseline(base_path)
    store = _load_sweep(args.results, args.sweep)
    current = select_sweep(store, args.sweep)
    sweep_id = current["sweep_id"].iloc[0]
    require_ok(current, f"sweep {sweep_id!r}")
    workloads = set(baseline["workload"].fillna("")) | set(current["workload"].fillna(""))
    ladders = set(baseline["ladder"].fillna("")) | set(current["ladder"].fillna(""))
    thresholds.check_names("--threshold", workloads - {""}, ladders - {""})
    mem_thresholds.check_names("--mem-threshold", workloads - {""}, ladders - {""})
    if set(current["run_id"]) <= set(baseline["run_id"]):
        print(f"warning: sweep {sweep_id!r} is the baseline's own sweep; re-run it to check anything",
              file=sys.stderr)

    noise = noise_model.noise_for(store, current)  # this environment's calibration, else the default
    rows = compare(baseline, current, thresholds, mem_thresholds, noise)
    family = sum(r.p_value is not None for r in rows)
    base_sweeps = ",".join(dict.fromkeys(baseline["sweep_id"].fillna("")))
    if args.format == "junit":
        print(format_junit(rows, f"harness.check {sweep_id} vs {base_path.stem}"))
    elif args.format == "json":
        print(format_json(rows, {"baseline": str(base_path), "baseline_sweep": base_sweeps, "sweep": sweep_id,
                                 "noise": noise.describe(), "family_wise_error": ALPHA, "family": family}))
    else:
        print(format_text(rows, [f"check: sweep {sweep_id} ({len(current)} records) against baseline "
                                 f"{base_path.stem} (sweep {base_sweeps}, {len(baseline)} records)",
                                 f"thresholds: throughput {thresholds.describe('-')}, peak memory "
                                 f"{mem_thresholds.describe('+')}; interval: {CONFIDENCE:.0%} run-level t",
                                 f"{noise.describe()}; family-wise error <= {ALPHA:.0%} over {family} configs (Holm)"]))
    code = exit_code(rows)
    if code == 2:
        print(f"error: nothing comparable between sweep {sweep_id!r} and baseline {base_path.stem!r}: "
              f"current hardware {sorted(set(_with_hardware(current)['_hw']))}, baseline "
              f"{sorted(set(_with_hardware(baseline)['_hw']))}", file=sys.stderr)
    return code
