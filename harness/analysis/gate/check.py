"""Regression checks that CI can gate on: which records are compared, and how each config is judged.

``check_sweep`` compares a sweep with a baseline (``harness.analysis.gate.baseline`` reads and writes those
files; ``harness.analysis.gate.check_formats`` writes the result as text, JUnit XML or JSON; the command is
``python -m harness check``). Its exit code: 0 nothing regressed, 1 something regressed (throughput,
memory, or a config that now fails), 2 bad input or nothing at all comparable. Records are matched by
``config_hash`` on the same hardware; a stored-baseline check matches them by their settings alone (``settings_hash``,
``harness.analysis.gate.identity``), so that a change of the user's own model code is named, not a new config.

Which statistic decides, and why (also in docs/regression.md and docs/statistics.md)
-------------------------------------------------------------------------------------
Two rules, by what the baseline is:

* **A stored baseline** (``check --baseline``, ``check_sweep``): measured on another day, so the runs' own
  variance (the run-level model of ``harness.analysis.stats.noise_model``: the unit of replication is the run, a
  fit calibration of this environment pooled in, ``harness.analysis.stats.calibration``) gets the term between
  sessions (``harness.analysis.gate.sessions``). The rule is the gate's (``harness.analysis.gate.rule``): a config
  regresses when its band's upper end, one-sided at the level Holm's step-down tests it at over every config
  of the check, lies below ``1 - threshold``; so the family-wise error of one ``check`` is at most 5%.
* **Both sides of one session** (``compare`` without a session): ``harness.analysis.gate.check_throughput`` on the
  rung x round model, Holm over the configs, the band at the level each config is tested at.

A drop past the threshold that the band cannot separate from it is a *warning* that asks for more repeats.
With one run a side and no calibration there is no variance: no band, nothing flagged, a warning that asks
for repeats. A run of a busy machine (``harness.analysis.stats.busy``) decides nothing: the check names its configs
and exits 2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from harness.analysis.stats import calibration, noise_model, sweepstats
from harness.analysis.gate import answers, comparable, identity, sessions
from harness.analysis.stats.busy import busy_reasons
from harness.analysis.gate.check_throughput import classify, throughput
from harness.analysis.gate.thresholds import BadInput, Thresholds
from harness.store import load_runs, select_sweep as sweep_records

# "warned": only ``compare``'s rule without a session term (``check_throughput.classify``); the check says undecided
STATUSES = ("regressed", "undecided", "warned", "improved", "unchanged", "busy", "missing", "new", "not comparable")
COMPARED = ("regressed", "undecided", "warned", "improved", "unchanged")
SOFTWARE = {"torch_version": "torch", "cuda_version": "CUDA", "cudnn_version": "cuDNN",
            "gpu_driver": "driver", "monai_version": "MONAI"}


# ------------------------------------------------------------------------------------------
# selecting records


def select_sweep(frame: pd.DataFrame, sweep: str = "latest") -> pd.DataFrame:
    """The records of one sweep (``latest`` or a sweep_id); the table command's rule, as BadInput."""
    try:
        return sweep_records(frame, sweep).reset_index(drop=True)
    except ValueError as exc:
        raise BadInput(str(exc)) from None


def load_sweep(results_dir: str, sweep: str) -> pd.DataFrame:
    """The records of ``sweep`` with the store's noise calibrations: only that sweep's records are read
    (the sweep is resolved from two columns)."""
    try:
        return calibration.calibration_frame(results_dir, load_runs(results_dir, sweep=sweep))
    except ValueError as exc:
        raise BadInput(str(exc)) from None


def with_hardware(frame: pd.DataFrame, data_bound: frozenset[str] = frozenset()) -> pd.DataFrame:
    """The frame plus a ``_hw`` column (the comparability key: ``comparable``; the host joins it for the configs in
    ``data_bound``), with empty strings (not None) where text is missing."""
    text = ["config_hash", "workload", "ladder", "change", "cached_from"]
    frame = frame.assign(**{c: frame[c].fillna("") for c in text})
    if not len(frame):
        return frame.assign(_hw=pd.Series(dtype=object))

    def key(row) -> str:
        label = noise_model.hardware_label(row)
        return label + comparable.host_label(row) if row["config_hash"] in data_bound else label

    return frame.assign(_hw=frame.apply(key, axis=1))


def require_ok(frame: pd.DataFrame, what: str) -> None:
    """BadInput when ``frame`` has no ok record: nothing in it can be compared."""
    if not (frame["status"] == "ok").any():
        counts = ", ".join(f"{n} {s}" for s, n in frame["status"].value_counts().items())
        raise BadInput(f"{what} has no records with status ok ({counts or 'no records'}); nothing to compare")


# ------------------------------------------------------------------------------------------
# statistics (the reasoning is in the module docstring)

CONFIDENCE = noise_model.CONFIDENCE
ALPHA = noise_model.ALPHA


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
    p_value: float | None = None  # one-sided, before Holm: "slower" (across sessions: "slower beyond the threshold")
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
            noise: noise_model.Noise = noise_model.DEFAULT, session=None) -> list[Comparison]:
    """Compare every config of ``current`` with ``baseline``; one row per config and hardware.

    Throughput decisions are made together, with Holm's procedure over every config compared; ``noise``: a
    calibration (``noise.calibrated``) pooled with the runs' own variance, or none; with ``session`` (a stored
    baseline of another day): the gate's rule across sessions, ``harness.analysis.gate.sessions``.
    """
    bound = comparable.data_bound(baseline, current)
    baseline, current = with_hardware(baseline, bound), with_hardware(current, bound)
    pending: list[_Pending] = []
    base_groups = dict(iter(baseline.groupby(["config_hash", "_hw"], sort=False)))
    cur_groups = dict(iter(current.groupby(["config_hash", "_hw"], sort=False)))
    base_hw = {h: sorted(g["_hw"].unique()) for h, g in baseline.groupby("config_hash")}
    rows = []
    for (config, hw), cur in cur_groups.items():
        row = _row(cur, config, hw, thresholds, mem_thresholds)
        if (config, hw) in base_groups:
            pending += _judge(row, base_groups[(config, hw)], cur)
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
    _decide_all(pending, noise, session)
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
    failed: pd.DataFrame
    base_ok: pd.DataFrame
    cur_ok: pd.DataFrame


def _judge(row: Comparison, base: pd.DataFrame, cur: pd.DataFrame) -> list[_Pending]:
    """Means and notes for a config present in both, on the same hardware; the status waits for Holm."""
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
    failed = cur[~cur.index.isin(cur_ok.index)]  # runs that did not run ok (a busy run that did is no failure)
    (quiet_cur, cur_busy), (quiet_base, base_busy) = _quiet(cur_ok), _quiet(base_ok)
    # the means of the runs judged: a busy run measured again quietly in its round is left out of them too
    row.baseline_samples_per_s = float((quiet_base if len(quiet_base) else base_ok)["samples_per_s"].mean())
    row.current_samples_per_s = float((quiet_cur if len(quiet_cur) else cur_ok)["samples_per_s"].mean())
    busy = [("current", why) for why in cur_busy] + [("baseline", why) for why in base_busy]
    if busy:  # a busy machine's runs decide nothing, either way
        row.status = "busy"
        row.notes.append(f"machine busy during {len(busy)} run(s) ({busy[0][0]}: {busy[0][1]}): not trustworthy; "
                         "measure again on an idle machine")
        return []
    return [_Pending(row, failed, quiet_base, quiet_cur)]


def _quiet(ok: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """A config's ok runs of a quiet machine, and why each busy run is not trustworthy, leaving out the busy runs
    measured again quietly in the same round (a sweep does that: the quiet run stands for its round)."""
    reasons = [why or "" for why in busy_reasons(ok)]
    quiet = ok[[not r for r in reasons]]
    rounds = set(quiet["round"].fillna(0))
    return quiet, [why for why, rnd in zip(reasons, ok["round"].fillna(0)) if why and rnd not in rounds]


NO_VARIANCE = ("one run a side and no calibration: no variance, no band; add sweep.repeats=2 or calibrate, as "
               "the noise line says")


def _decide_all(pending: list[_Pending], noise: noise_model.Noise = noise_model.DEFAULT, session=None) -> None:
    """Holm over every config compared on throughput, then each config's status and band at its tested level."""
    if not pending:
        return
    if session is not None:
        _decide_across_sessions(pending, noise, session)
        return
    judged = throughput([p.base_ok for p in pending], [p.cur_ok for p in pending], noise)
    for p, (est, sig) in zip(pending, judged):
        row = p.row
        row.ratio, row.p_value = est.ratio, (None if math.isnan(est.p_slower) else est.p_slower)
        row.ci_low, row.ci_high = (est.low, est.high) if est.has_interval else (None, None)
        if not est.has_interval:
            row.notes.append(NO_VARIANCE)
        _decide(p, classify(est, row.threshold, sig), len(pending))


def _decide_across_sessions(pending: list[_Pending], noise: noise_model.Noise, session) -> None:
    """The gate's rule with the session term (``sessions.judge`` sets each band and p-value), Holm over the configs
    that have a variance; a config of one run a side without a calibration gets no band and no verdict."""
    runs = [(noise_model.runs_of(p.base_ok), noise_model.runs_of(p.cur_ok)) for p in pending]
    tested = [i for i, (b, c) in enumerate(runs) if noise.calibrated or min(b.n, c.n) >= 2]
    statuses = dict(zip(tested, sessions.judge([pending[i].row for i in tested], [runs[i] for i in tested], noise,
                                               session)))
    for i, (p, (base, cur)) in enumerate(zip(pending, runs)):
        p.row.ratio = float(math.exp(cur.logs().mean() - base.logs().mean()))
        if i not in statuses:
            p.row.ci_low = p.row.ci_high = p.row.p_value = None
            p.row.notes.append(NO_VARIANCE)
        _decide(p, statuses.get(i) or "undecided", max(len(tested), 1))


def _decide(p: _Pending, status: str, family: int) -> None:
    row = p.row
    row.status = status
    p_text = "no p-value" if row.p_value is None else f"p={row.p_value:.2g}"
    if row.status == "regressed":
        row.notes.append(f"throughput {_pct(row.ratio)}, band below -{row.threshold:.0%} ({p_text}, "
                         f"significant after Holm over {family})")
    elif row.status == "warned":
        row.notes.append(f"throughput {_pct(row.ratio)} but not clearly past -{row.threshold:.0%} after Holm over "
                         f"{family} configs ({p_text}): add repeats (sweep.repeats=N), or measure both now: "
                         "check --against")
    elif row.status == "undecided" and row.ci_low is not None:
        row.notes.append(f"throughput {_pct(row.ratio)}, band [{row.ci_low:.3f}, {row.ci_high:.3f}] holds "
                         f"{1 - row.threshold:.2f}: neither beyond nor within -{row.threshold:.0%}; more runs "
                         "(sweep.repeats=auto with a larger sweep.budget_min), or measure both now: check --against")
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
    """Software versions that differ between baseline and current, as 'torch 2.3.1 -> 2.4.0', then the code that
    changed (``identity.code_changes``: the user's files, the harness's fingerprint)."""
    changes = []
    for column, label in SOFTWARE.items():
        before = sorted(set(base[column].fillna("")) - {""})
        after = sorted(set(cur[column].fillna("")) - {""})
        if before != after:
            changes.append(f"{label} {','.join(before) or '-'} -> {','.join(after) or '-'}")
    return changes + identity.code_changes(base, cur)


def _statuses(frame: pd.DataFrame) -> str:
    return ", ".join(f"{s}" for s in dict.fromkeys(frame["status"]))


def _pct(ratio: float) -> str:
    return f"{ratio - 1:+.1%}"


def exit_code(rows: list[Comparison]) -> int:
    """``answers.exit_code``: 1 regressed, 5 busy, 2 nothing comparable, 6 undecided, else 0 (decided)."""
    return answers.exit_code(["undecided" if r.status == "warned" else r.status for r in rows])


# ------------------------------------------------------------------------------------------
# one check of a sweep against a baseline


@dataclass
class CheckResult:
    """A check of one sweep against a baseline: every row, and what the output says about how it was made."""

    rows: list[Comparison]
    sweep_id: str
    current_records: int
    baseline_path: Path
    baseline_sweeps: str
    baseline_records: int
    thresholds: Thresholds
    mem_thresholds: Thresholds
    noise: noise_model.Noise
    current_hardware: list[str]
    baseline_hardware: list[str]
    warnings: list[str] = field(default_factory=list)
    sessions: str = ""  # the between-session term, as the output says it ("" when there was none)
    settings_differ: str = ""  # the settings that differ between the two sides' configs (identity.settings_differ)
    calibrate: str = ""  # how to calibrate what the sweep is matched with (calibration.calibrate_hint)

    @property
    def family(self) -> int:
        """How many configs Holm's procedure decided together (those without a variance count too)."""
        return sum(r.ratio is not None for r in self.rows)

    @property
    def exit_code(self) -> int:
        return exit_code(self.rows)

    def error(self) -> str:
        """Why the check decided nothing: busy configs, undecided ones, or nothing comparable ("" when it decided)."""
        busy = [r.name for r in self.rows if r.status == "busy"]
        undecided = [r.name for r in self.rows if r.status in ("undecided", "warned")]
        if self.exit_code == answers.UNDECIDED:
            return (f"{len(undecided)} config(s) undecided: {'; '.join(undecided)}; measure more rounds of the sweep "
                    "(sweep.repeats=auto), or both sides now: check --against REF")
        if self.exit_code not in (answers.BUSY, answers.NOTHING_COMPARABLE):
            return ""
        if busy:
            return (f"machine busy during the runs of {len(busy)} config(s), which decide nothing: {'; '.join(busy)}; "
                    "measure them again on an idle machine")
        where = f"nothing comparable between sweep {self.sweep_id!r} and baseline {self.baseline_path.stem!r}"
        if self.current_hardware != self.baseline_hardware or not self.settings_differ:
            return f"{where}: current hardware {self.current_hardware}, baseline {self.baseline_hardware}"
        return f"{where}: no config in common on the same hardware; the settings differ: {self.settings_differ}"


def check_sweep(baseline: pd.DataFrame, baseline_path: Path, results_dir: str, sweep: str,
                thresholds: Thresholds, mem_thresholds: Thresholds) -> CheckResult:
    """Compare ``sweep`` of the store in ``results_dir`` with ``baseline`` (the records of ``baseline_path``),
    under the noise calibration the sweep stored (else the one the store offers, if any); BadInput for anything it
    cannot use."""
    store = load_sweep(results_dir, sweep)
    current = select_sweep(store, sweep)
    sweep_id = str(current["sweep_id"].iloc[0])
    require_ok(current, f"sweep {sweep_id!r}")
    workloads = set(baseline["workload"].fillna("")) | set(current["workload"].fillna(""))
    ladders = set(baseline["ladder"].fillna("")) | set(current["ladder"].fillna(""))
    thresholds.check_names("--threshold", workloads - {""}, ladders - {""})
    mem_thresholds.check_names("--mem-threshold", workloads - {""}, ladders - {""})
    warnings = []
    if set(current["run_id"]) <= set(baseline["run_id"]):
        warnings.append(f"sweep {sweep_id!r} is the baseline's own sweep; re-run it to check anything")
    chosen = sweepstats.sweep_noise(store, current)
    warnings += list(chosen.notes)
    noise = chosen.noise
    session = sessions.history_for(results_dir, baseline, current)  # today against another day: see sessions.py
    rows = compare(*identity.by_settings(baseline, current), thresholds, mem_thresholds, noise, session)
    return CheckResult(
        rows=rows, sweep_id=sweep_id, current_records=len(current), baseline_path=Path(baseline_path),
        baseline_sweeps=",".join(dict.fromkeys(baseline["sweep_id"].fillna(""))), baseline_records=len(baseline),
        thresholds=thresholds, mem_thresholds=mem_thresholds, noise=noise,
        current_hardware=sorted(set(with_hardware(current)["_hw"])),
        baseline_hardware=sorted(set(with_hardware(baseline)["_hw"])), warnings=warnings,
        sessions=session.describe(), settings_differ=identity.settings_differ(baseline, current),
        calibrate=_calibrate_hint(current.iloc[0], results_dir))


def _calibrate_hint(first, results_dir: str) -> str:
    return calibration.calibrate_hint(str(first["workload"]), str(first["size"]), str(first["device"]), results_dir)
