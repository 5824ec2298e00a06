"""The stored-baseline check across sessions: the variance between days that the runs of one day cannot show.

``check --baseline`` compares today's runs with runs saved on another day. The runs of one session vary
around that session's level, and the level itself moves between sessions (a reboot, a driver's mood,
another tenant, the placement of memory): the repeats of one sweep cannot see that, so a check that models
the within-session variance alone raises false alarms across days. So the check adds a between-session
term: each side is one session, so the difference of the two carries ``2 * sd_session**2`` on the log scale
on top of the runs' own variance, however many runs a side has.

Where ``sd_session`` comes from, said in the output:

* **Estimated** from the history of this store and the baseline: the sweeps (sessions) that measured the
  same configs in the same environment (``env_key``: the same code, software and hardware), original
  measurements only (cached copies and debug slowdowns left out), the checked sweep itself left out. A
  one-way random-effects estimate: the spread of the session means beyond what their runs' own spread
  explains, pooled over the configs. Its degrees of freedom are Satterthwaite's for that difference of two
  mean squares, not the sessions' count: where the runs' spread is much of the session means' spread the
  estimate is nearly blind (often at its floor), and counting sessions - 1 df for it put every config at the
  threshold's edge over 5% (7-10% of checks). At least 3 sessions of a config (2 degrees of freedom of the
  session means) are needed; fewer, and
* **the default**: an sd of 3% between sessions (``DEFAULT_SD``), a documented assumption.

The decision is the gate's (``harness.analysis.gate.rule``): one-sided against the threshold, Holm over the
configs, the band at the level tested. No torch, no Hydra.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np

from harness.analysis.gate import rule
from harness.analysis.stats import noise_model
from harness.store import load_runs

DEFAULT_SD = 0.03  # sd of log throughput between sessions where the history cannot say
MIN_DF = 2  # three sessions of one config, or two each of two
MIN_SD = 0.005  # a few sessions cannot prove the sessions agree closer than this
HISTORY_COLUMNS = ["run_id", "sweep_id", "config_hash", "env_key", "status", "samples_per_s", "cached_from",
                   "config_json", "device", "gpu_name", "gpu_count", "cpu_model", "cpu_count"]


@dataclass(frozen=True)
class SessionNoise:
    """The sd of log throughput between sessions assumed for a check, and where it came from."""

    sd: float = DEFAULT_SD
    df: float = math.inf  # degrees of freedom of the estimate; inf for the default
    sessions: int = 0  # earlier sessions it was estimated from (0: the default)
    configs: int = 0

    @property
    def estimated(self) -> bool:
        return self.sessions > 0

    def describe(self) -> str:
        if self.estimated:
            return (f"between sessions: sd {self.sd:.1%} estimated from {self.sessions} earlier sessions of "
                    f"{self.configs} config(s) in the same environment ({self.df:.1f} df)")
        return (f"between sessions: default sd {self.sd:.0%} (fewer than 3 earlier sessions of these configs in "
                "the same environment to estimate it from): an assumption the 5% false-alarm rate rests on; where "
                "sessions differ by 5%, a quarter of 4-config checks at the threshold's edge raise a false alarm "
                "(check --against measures both sides in one session)")


DEFAULT = SessionNoise()


def estimate(history) -> SessionNoise:
    """The between-session sd from ``history``: ok, original records (columns config_hash, env_key, sweep_id,
    samples_per_s) of one hardware; the default when they hold fewer than ``MIN_DF`` degrees of freedom."""
    ok = history[(history["status"] == "ok") & (history["samples_per_s"].fillna(0) > 0)]
    if ok.empty:
        return DEFAULT
    ok = ok.assign(_log=np.log(ok["samples_per_s"].astype(float)))
    sessions = ok.groupby(["config_hash", "env_key", "sweep_id"])["_log"].agg(["mean", "count", "var"]).reset_index()
    spread = sessions[sessions["count"] >= 2]
    within_df = float((spread["count"] - 1).sum())
    within = float(((spread["count"] - 1) * spread["var"]).sum() / within_df) if len(spread) else 0.0
    ss, df, inverse_n, used, configs = 0.0, 0, [], 0, set()
    for (config, _), group in sessions.groupby(["config_hash", "env_key"]):
        if len(group) < 2:
            continue
        ss += float(((group["mean"] - group["mean"].mean()) ** 2).sum())
        df += len(group) - 1
        inverse_n += list(1.0 / group["count"])
        used += len(group)
        configs.add(config)
    if df < MIN_DF:
        return DEFAULT
    between, between_df = _between(ss / df, df, within * float(np.mean(inverse_n)), within_df)
    return SessionNoise(sd=math.sqrt(between), df=between_df, sessions=used, configs=len(configs))


def _between(session_ms: float, session_df: int, runs_part: float, runs_df: float) -> tuple[float, float]:
    """The between-session variance, session means' mean square less their runs' share (never below ``MIN_SD``
    squared), and its Satterthwaite degrees of freedom: the difference is as uncertain as both mean squares
    together, so a history whose session means hardly spread beyond their runs says little, however many
    sessions it has (an estimate at its floor gets few df, and the check's band widens instead of narrowing)."""
    between = max(session_ms - runs_part, MIN_SD ** 2)
    uncertainty = session_ms ** 2 / session_df + (runs_part ** 2 / runs_df if runs_df > 0 else 0.0)
    return between, (between ** 2 / uncertainty if uncertainty > 0 else float(session_df))


def history_for(results_dir, baseline, current) -> SessionNoise:
    """The between-session sd for checking ``current`` (one sweep) against ``baseline``, from the store in
    ``results_dir`` and the baseline's own records (see the module docstring)."""
    import pandas as pd


    configs = sorted(set(current["config_hash"].dropna()))
    stored = load_runs(results_dir, columns=HISTORY_COLUMNS, where={"config_hash": configs, "status": "ok"})
    frame = pd.concat([stored, baseline[[c for c in HISTORY_COLUMNS if c in baseline]]], ignore_index=True)
    frame = frame.drop_duplicates("run_id")
    here = {noise_model.hardware_label(row) for _, row in current.head(1).iterrows()}
    keep = ((frame["cached_from"].fillna("") == "") & (~frame["sweep_id"].isin(set(current["sweep_id"])))
            & frame["config_hash"].isin(configs) & ~frame["config_json"].map(_debug_run).astype(bool))
    frame = frame[keep]
    if frame.empty:
        return DEFAULT
    return estimate(frame[frame.apply(noise_model.hardware_label, axis=1).isin(here)])


def _debug_run(config_json) -> bool:
    """A run with an injected fault or slowdown measures the injection, not the session."""
    try:
        debug = json.loads(config_json or "{}").get("debug", {})
    except (TypeError, ValueError):
        return False
    return debug.get("fault", "none") != "none" or float(debug.get("slowdown_ms", 0) or 0) > 0


def effect(base: noise_model.Runs, current: noise_model.Runs, noise: noise_model.Noise,
           session: SessionNoise) -> rule.Effect:
    """log(current / baseline) with the runs' standard error (the noise model's) and the two sessions' term;
    degrees of freedom by Welch-Satterthwaite."""
    diff = noise_model.difference(current, base, noise)
    runs_var, session_var = diff.se ** 2, 2 * session.sd ** 2
    total = runs_var + session_var
    parts = sum(v ** 2 / d for v, d in ((runs_var, diff.df), (session_var, session.df)) if math.isfinite(d) and d > 0)
    return rule.Effect(diff.diff, math.sqrt(total), total ** 2 / parts if parts > 0 else math.inf)


def decide(pairs: list[tuple[noise_model.Runs, noise_model.Runs]], thresholds: list[float],
           noise: noise_model.Noise, session: SessionNoise) -> list[rule.Decision]:
    """The gate's decisions over every (baseline, current) pair of one check, with the between-session term."""
    return rule.decide([effect(base, cur, noise, session) for base, cur in pairs], thresholds)


def judge(rows: list, runs: list[tuple[noise_model.Runs, noise_model.Runs]], noise: noise_model.Noise,
          session: SessionNoise) -> list[str]:
    """The throughput status of every row of a stored-baseline check (``check.Comparison``s, read for their
    ``threshold``); each row's band becomes the one-sided bounds at the level it was tested at, and its
    p-value that of "slower by more than the threshold"."""
    decisions = decide(runs, [row.threshold for row in rows], noise, session)
    for row, d in zip(rows, decisions):
        row.ci_low, row.ci_high = (d.lower, d.upper) if d.has_band else (None, None)
        row.p_value = d.p_value
    return [rule.status(d, row.threshold) for row, d in zip(rows, decisions)]
