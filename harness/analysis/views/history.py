"""Every config's throughput over commits and dates, and what each gate decided (no torch, no Hydra).

The history reads everything a results folder keeps: the sweeps of the store, the saved baselines (their
records, and their names), the runs of ``check --against`` (``<results>/checks``, both sides) and every check's
verdict (``harness.analysis.gate.verdicts``). A **point** is one session of a config: a sweep, or one side of a
paired check; its throughput is the geometric mean of its ok runs with the noise model's 95% band (none for a
one-run session: no variance is known, and none is assumed). A
**mark** is one check's decision on the config: regressed, ok or busy. ``harness.analysis.views.history_page``
draws them; the command is ``python -m harness history``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from harness.analysis.stats import noise_model
from harness.analysis.views import changepoints
from harness.analysis.gate import comparable, verdicts
from harness.analysis.gate.check import with_hardware
from harness.analysis.gate.baseline import baselines_dir
from harness.analysis.stats.busy import busy_reason
from harness.analysis.stats.speedup import finite_number
from harness.store import load_parquet_files, load_runs

COLUMNS = ["run_id", "status", "timestamp", "data_wait_frac", "threads", "workload", "ladder", "rung", "change",
           "config_hash", "env_key", "sweep_id", "samples_per_s", "cached_from", "other_cpu_pct", "device",
           "gpu_name", "gpu_count", "cpu_model", "cpu_count", "torch_version", "cuda_version", "hostname",
           "git_commit", "git_dirty", "against_side", "against_commit"]
DECISIONS = {"regressed": "regressed", "busy": "busy", "unchanged": "ok", "improved": "ok", "warned": "undecided",
             "undecided": "undecided", "bimodal": "undecided"}


@dataclass
class Point:
    """One session of one config: a sweep, or one side of a paired check."""

    when: str  # the session's first run (UTC, as records store it)
    session: str  # sweep id or check id
    source: str  # "sweep", "check REF", "check work"
    commit: str  # the measured code's commit (12 hex; "-dirty" for uncommitted changes), "" when unknown
    samples_per_s: float | None
    low: float | None
    high: float | None
    runs: int
    ok: int
    environment: str
    busy: str = ""
    baselines: list[str] = field(default_factory=list)  # baseline names that saved this session


@dataclass
class Mark:
    """One gate's decision on one config."""

    when: str
    kind: str  # "against" or "baseline"
    check_id: str
    decision: str  # regressed, ok or busy
    status: str  # the check's own word (unchanged, warned, improved, ...)
    against: str  # REF as given, or the baseline's name
    session: str  # the point it judged: the check id (against) or the checked sweep (baseline)
    ratio: float | None = None
    low: float | None = None
    high: float | None = None


@dataclass
class ChangePoint:
    """A step of a config's level between two of its sweeps (``changepoints``): the last session before it (GOOD)
    and the first after (BAD), by their index in ``ConfigHistory.points``."""

    before: int
    after: int
    ratio: float  # the level after / before
    good: str  # the commit of the last session before the step ("" when unknown)
    bad: str
    bad_session: str  # the sweep after the step (its configs are the ones to bisect with)
    steps: int = 1  # > 1: a slope, successive steps the same way between ``before`` and ``after`` (a drift)
    wander: float = 0.0  # > 0: undecided, within the wander of sessions autocorrelated this much (``changepoints``)

    @property
    def slope(self) -> bool:
        return self.steps > 1

    @property
    def undecided(self) -> bool:
        return self.wander > 0


@dataclass
class ConfigHistory:
    config_hash: str
    hardware: str
    workload: str
    ladder: str
    rung: int | None
    change: str
    points: list[Point] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    steps: list[ChangePoint] = field(default_factory=list)

    @property
    def title(self) -> str:
        where = f"{self.ladder} rung {self.rung}" if self.ladder and self.rung is not None else self.ladder or "run"
        return f"{self.workload}: {where}{' ' + self.change if self.change else ''}"

    @property
    def anchor(self) -> str:
        return f"c-{self.config_hash[:12]}-{abs(hash(self.hardware)) % 10**6}"


@dataclass
class History:
    configs: list[ConfigHistory]
    results_dir: str
    warnings: list[str] = field(default_factory=list)


def collect(results_dir: str, ladder: str | None = None, workload: str | None = None) -> History:
    """The history of every config in ``results_dir`` (ValueError for a folder or filter that is not there)."""
    records, names = _records(results_dir)
    found, warnings = verdicts.load_verdicts(results_dir)
    records = _finished_checks_only(records, found)
    for column, wanted, flag in (("ladder", ladder, "--ladder"), ("workload", workload, "--workload")):
        if wanted is not None:
            known = sorted(set(records[column]) - {""})
            if wanted not in known:
                raise ValueError(f"{flag} {wanted!r} is in no record of {results_dir}; valid choices: "
                                 f"{', '.join(known) or 'none'}")
            records = records[records[column] == wanted]
    configs = {}
    for (config, hw), group in records.groupby(["config_hash", "_hw"], sort=False):
        configs[(config, hw)] = _config(config, hw, group, names)
    check_hw = dict(zip(records["sweep_id"], records["_hw"]))
    for document in found:
        _mark(configs, document, check_hw)
    ordered = sorted(configs.values(), key=lambda c: (c.workload, c.ladder, -1 if c.rung is None else c.rung,
                                                     c.change, c.hardware))
    return History(ordered, str(results_dir), warnings)


def _finished_checks_only(records: pd.DataFrame, found: list[dict]) -> pd.DataFrame:
    """``records`` without the runs of a ``check --against`` that never decided (interrupted, or a run that could
    not start): half a check is no session; the same command resumes it."""
    decided = {str(d.get("check_id")) for d in found if d.get("kind") == "against"}
    unfinished = (records["against_side"] != "") & ~records["sweep_id"].isin(decided)
    return records[~unfinished]


def _records(results_dir: str) -> tuple[pd.DataFrame, dict[str, list[str]]]:
    """Original records of the store, the baselines and the paired checks (cached copies left out), with
    ``_hw``; and which baselines saved each run."""
    frames = [load_runs(results_dir, columns=COLUMNS)]
    checks = verdicts.checks_dir(results_dir)
    if (checks / "runs").is_dir() or (checks / "compacted").is_dir():
        frames.append(load_runs(checks, columns=COLUMNS))
    names: dict[str, list[str]] = {}
    folder = baselines_dir(results_dir)
    for path in sorted(folder.glob("*.parquet")) if folder.is_dir() else []:
        saved = load_parquet_files([str(path)])
        frames.append(saved[[c for c in COLUMNS if c in saved]])
        for run_id in saved["run_id"]:
            names.setdefault(run_id, []).append(path.stem)
    records = pd.concat([f for f in frames if len(f)], ignore_index=True) if any(len(f) for f in frames) \
        else frames[0]
    records = records.drop_duplicates("run_id")
    text = ["config_hash", "workload", "ladder", "change", "cached_from", "against_side", "against_commit",
            "git_commit", "sweep_id"]
    records = records.assign(**{c: records[c].fillna("").astype(str) for c in text})
    records = _one_config_a_pair(records[records["cached_from"] == ""])
    return with_hardware(records, comparable.data_bound(records)), names


def _one_config_a_pair(records: pd.DataFrame) -> pd.DataFrame:
    """REF's runs of a paired check under the working tree's config_hash: a model's source is part of the hash of a
    workload that is not shipped, so REF's code hashes apart, yet the two sides measured one config."""
    work = records[records["against_side"] == "work"]
    hashes = {(s, r): h for s, r, h in zip(work["sweep_id"], work["rung"], work["config_hash"])}
    ref = records["against_side"] == "ref"
    if not ref.any():
        return records
    mapped = [hashes.get((s, r), h) for s, r, h in zip(records.loc[ref, "sweep_id"], records.loc[ref, "rung"],
                                                      records.loc[ref, "config_hash"])]
    return records.assign(config_hash=records["config_hash"].where(~ref, pd.Series(mapped, index=records.index[ref])))


def _config(config: str, hw: str, group: pd.DataFrame, names: dict[str, list[str]]) -> ConfigHistory:
    ok = group[group["status"] == "ok"]
    first = (ok if len(ok) else group).sort_values("timestamp").iloc[-1]  # named as its newest ok run names it
    rung = first["rung"]
    history = ConfigHistory(config, hw, str(first["workload"]), str(first["ladder"]),
                            None if pd.isna(rung) else int(rung), str(first["change"]))
    for (session, side), runs in group.groupby(["sweep_id", "against_side"], sort=False):
        history.points.append(_point(session, side, runs, names))
    history.points.sort(key=lambda p: (p.when, p.source))
    history.steps = change_points(history.points)
    return history


def examined(points: list[Point]) -> bool:
    """Whether a config has the sweeps a change point needs (``changepoints.MIN_SESSIONS``): with fewer none is looked
    for, which "no change point" must not be mistaken for."""
    return len(_series(points)) >= changepoints.MIN_SESSIONS


def _series(points: list[Point]) -> list[int]:
    """The points change points are looked for in: a config's quiet sweeps (paired checks' sides and busy sessions
    left out: a check measures two commits at once, a busy session measures the neighbours)."""
    return [i for i, p in enumerate(points) if p.source == "sweep" and p.samples_per_s and not p.busy]


def change_points(points: list[Point]) -> list[ChangePoint]:
    """The steps of the level of a config's sweeps (:func:`_series`)."""
    series = _series(points)
    found = changepoints.detect([points[i].samples_per_s for i in series])
    out = []
    for step in found:
        before, after = series[step.index - 1], series[step.last]
        out.append(ChangePoint(before, after, step.ratio, points[before].commit, points[after].commit,
                               points[after].session, step.steps, step.wander))
    return out


def _point(session: str, side: str, runs: pd.DataFrame, names: dict[str, list[str]]) -> Point:
    runs = runs.sort_values("timestamp")
    ok = runs[(runs["status"] == "ok") & (runs["samples_per_s"].fillna(0) > 0)]
    value = low = high = None
    if len(ok):
        spread = noise_model.Runs([float(v) for v in ok["samples_per_s"]])
        value = float(np.exp(spread.logs().mean()))
        if spread.n >= 2:  # one run: a point without a band (no variance is known; none is assumed)
            half = noise_model.band(spread)
            low, high = value / (1 + half), value * (1 + half)
    first = runs.iloc[0]
    busy = "; ".join(dict.fromkeys(r for r in (busy_reason(row) for _, row in runs.iterrows()) if r))
    saved = sorted({n for run_id in runs["run_id"] for n in names.get(run_id, [])})
    return Point(when=str(first["timestamp"]), session=session,
                 source={"ref": "check REF", "work": "check work"}.get(side, "sweep"), commit=_commit(first),
                 samples_per_s=value, low=low, high=high, runs=len(runs), ok=len(ok),
                 environment=_environment(first), busy=busy, baselines=saved)


def _commit(row) -> str:
    if row["against_commit"]:
        sha, _, dirty = row["against_commit"].partition("-")
        return sha[:12] + ("-dirty" if dirty else "")
    dirty = row["git_dirty"] is True or (isinstance(row["git_dirty"], (bool, np.bool_)) and bool(row["git_dirty"]))
    return row["git_commit"][:12] + ("-dirty" if row["git_commit"] and dirty else "")


def _environment(row) -> str:
    parts = [row["_hw"], f"torch {row['torch_version']}" if _text(row["torch_version"]) else "",
             f"CUDA {row['cuda_version']}" if _text(row["cuda_version"]) else "",
             f"host {row['hostname']}" if _text(row["hostname"]) else "",
             f"env {row['env_key'][:8]}" if _text(row["env_key"]) else ""]
    return ", ".join(p for p in parts if p)


def _text(value) -> bool:
    return isinstance(value, str) and bool(value)


def _mark(configs: dict, document: dict, check_hw: dict[str, str]) -> None:
    """Put one check's decisions on the configs it judged."""
    kind = str(document.get("kind", "baseline"))
    check_id = str(document.get("check_id") or document.get("timestamp", ""))
    session = check_id if kind == "against" else str(document.get("checked_sweep") or document.get("sweep", ""))
    against = str(document.get("ref") or Path(str(document.get("baseline", ""))).stem)
    for row in document.get("rows", []):
        decision = DECISIONS.get(str(row.get("status")))
        if decision is None:
            continue
        hw = row.get("hardware") or check_hw.get(check_id, "")
        target = configs.get((row.get("config_hash", ""), hw))
        if target is None:
            continue
        low, high = (row.get("lower"), row.get("upper")) if kind == "against" else (row.get("ci_low"),
                                                                                       row.get("ci_high"))
        target.marks.append(Mark(when=str(document.get("timestamp", "")), kind=kind, check_id=check_id,
                                 decision=decision, status=str(row.get("status")), against=against, session=session,
                                 ratio=finite_number(row.get("ratio")), low=finite_number(low),
                                 high=finite_number(high)))


