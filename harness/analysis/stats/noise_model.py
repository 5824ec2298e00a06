"""The run-level noise model of two groups of runs, calibrations and what they let a sweep detect (no torch).

A sweep's rungs are judged together by the rung x round model of ``harness.analysis.stats.blocks`` (rounds as
blocks, one pooled variance, no verdict from an assumed CV); ``sequential`` and ``checkstats`` build on it
and ``calibration`` chooses the calibration (docs/statistics.md). This module keeps the two-group model
that ``compare`` and older callers use, the calibration numbers of the ``noise`` command (its outlier rule, Grubbs'
test) and ``detectable_speedup``.

Unit of replication: the run (one fresh process). Throughput varies more between processes than
between the steps of one process: four fresh ResNet-50 processes with the same settings gave 40.1 to
42.2 samples/s while each run's step bootstrap claimed +-1.7-3.6%, and two identical phase2 sweeps
differed by 6% on a rung. So a speedup's interval is built from run-level throughputs:

* **Log scale.** Speedups are ratios and noise is multiplicative, so we work on log(samples/s): the
  ratio of two geometric means is exp(difference of mean logs), and its interval is symmetric there.
  The standard deviation of log throughput is (to first order) the coefficient of variation (CV).
* **A t-interval, not a bootstrap.** With 2-3 runs per side a bootstrap has 3-10 distinct resamples
  and its interval is degenerate (too narrow); a t-interval pays for the few runs with its quantile.
* **Two or more runs per side, no calibration**: Welch's t on log throughput (unequal variances,
  Welch-Satterthwaite degrees of freedom).
* **A calibration on this machine** (``python -m harness noise``: the same settings N times, A/A)
  gives a process-to-process CV with N-1 degrees of freedom. It is pooled with the runs' own
  variance (Student's t with the degrees of freedom of both), or used alone when a side has one run.
* **One run on a side, no calibration**: a default CV of 5% taken as known (normal quantile); a
  larger spread among the other side's runs widens it. Kept for older callers only: at a true CV of
  10% that band holds the truth 67% of the time, so the rung x round model gives no band there.
* **Within-run step bootstrap** (the 95% band of one run's mean step time) may widen a side's
  standard error, never narrow it.

A regression check turns the same numbers into a one-sided p-value (current slower than baseline),
and Holm's step-down (``speedup.holm``) controls the family-wise error over all configs of one check.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np
from harness.analysis.stats import distributions as sps  # scipy.stats's functions, scipy loaded at the first value

from harness.analysis.stats import blocks
from harness.analysis.stats.bimodal import ADVICE as BIMODAL_ADVICE
from harness.analysis.stats.bimodal import bimodal
from harness.analysis.stats.speedup import BUSY_PCT, POWER, Ratio
from harness.analysis.stats.speedup import power as _power
from harness.analysis.stats.speedup import within_run_uncertainty
from harness.store import load_runs, newest_ok_sweeps

CONFIDENCE = 0.95
DEFAULT_CV = 0.05  # process-to-process CV assumed where this machine has no calibration
ALPHA = 0.05  # family-wise error rate of a check
MIN_CV = 0.005  # a few identical runs cannot prove noise below this; a calibrated CV is never taken lower
UNFIT_CV = 0.10  # a calibration at or above this CV: the machine is too noisy to measure speedups
SHAKY_CV = 0.06  # a calibration above this CV (or with a run apart) gives no verdict before two rounds
APART_LEVEL = 0.10  # Grubbs' test at this level: a calibration run that "stands apart" (refused at 1%)
NOISE_LADDER = "noise"
_Z = 1.959963984540054  # sps.norm.ppf(0.5 + CONFIDENCE / 2), written out so that importing this loads no scipy


@dataclass(frozen=True)
class Noise:
    """The process-to-process CV assumed for this environment, and where it came from."""

    cv: float = DEFAULT_CV
    df: float = math.inf  # degrees of freedom of cv: runs - 1 for a calibration, inf for the default
    sweep_id: str = ""
    runs: int = 0
    match: str = ""  # "environment" or "hardware" for a calibration
    apart: str = ""  # a run of the calibration that stands apart (Grubbs at 10%), in words; "" when none

    @property
    def calibrated(self) -> bool:
        return bool(self.sweep_id)

    def describe(self) -> str:
        if self.calibrated:
            return (f"noise: calibrated CV {self.cv:.1%} from sweep {self.sweep_id}, {self.runs} runs "
                    f"(same {self.match})")
        return (f"noise: default CV {self.cv:.0%} (no calibration here; run python -m harness noise)")


DEFAULT = Noise()


@dataclass
class Runs:
    """One side of a comparison: the throughputs of its ok runs, and each run's within-run band."""

    samples_per_s: list[float]
    within: list[float] = field(default_factory=list)  # relative 95% half-widths of each run's mean

    @property
    def n(self) -> int:
        return len(self.samples_per_s)

    def logs(self) -> np.ndarray:
        return np.log(np.asarray(self.samples_per_s, dtype=float))

    def var(self) -> float | None:
        """Sample variance of log throughput (None with one run)."""
        return float(np.var(self.logs(), ddof=1)) if self.n >= 2 else None

    def within_var_of_mean(self) -> float:
        """The variance of the side's mean log throughput that the step bootstraps alone imply."""
        if not self.within:
            return 0.0
        return float(np.mean([(w / _Z) ** 2 for w in self.within])) / self.n


@dataclass(frozen=True)
class Difference:
    """log(new) - log(old) geometric means, its standard error and degrees of freedom."""

    diff: float
    se: float
    df: float
    method: str

    def quantile(self, confidence: float = CONFIDENCE) -> float:
        q = 0.5 + confidence / 2
        return float(sps.norm.ppf(q) if math.isinf(self.df) else sps.t.ppf(q, self.df))

    def ratio(self, runs: int) -> Ratio:
        half = self.quantile() * self.se
        return Ratio(math.exp(self.diff), math.exp(self.diff - half), math.exp(self.diff + half), runs=runs,
                     method=self.method, se=self.se, df=self.df)

    def p_slower(self) -> float:
        """One-sided p-value of 'new is slower than old' (small when the drop is clear)."""
        if self.se == 0:
            return 0.0 if self.diff < 0 else 1.0
        t = self.diff / self.se
        return float(sps.norm.cdf(t) if math.isinf(self.df) else sps.t.cdf(t, self.df))


def difference(new: Runs, old: Runs, noise: Noise = DEFAULT) -> Difference:
    """The run-level model of the module docstring, for the ratio new/old."""
    diff = float(new.logs().mean() - old.logs().mean())
    if noise.calibrated:
        se, df, method = _pooled(new, old, noise)
    elif new.n >= 2 and old.n >= 2:
        se, df, method = _welch(new, old)
    else:
        spread = max([v for v in (new.var(), old.var()) if v is not None], default=0.0)
        var = max(noise.cv ** 2, spread)
        se, df, method = math.sqrt(var * (1 / new.n + 1 / old.n)), math.inf, "default CV"
    floor = math.sqrt(new.within_var_of_mean() + old.within_var_of_mean())
    if floor > se:  # the step bootstrap widens, never narrows
        se, method = floor, method + ", widened by the step bootstrap"
    return Difference(diff, se, df, method)


def _welch(new: Runs, old: Runs) -> tuple[float, float, str]:
    a, b = new.var() / new.n, old.var() / old.n
    se2 = a + b
    if se2 == 0:
        return 0.0, math.inf, "Welch t (no spread)"
    df = se2 ** 2 / (a ** 2 / (new.n - 1) + b ** 2 / (old.n - 1))
    return math.sqrt(se2), df, "Welch t"


def _pooled(new: Runs, old: Runs, noise: Noise) -> tuple[float, float, str]:
    """The calibration's variance pooled with the runs' own (same machine, same process noise)."""
    ss, df = noise.df * noise.cv ** 2, noise.df
    for side in (new, old):
        if side.n >= 2:
            ss += side.var() * (side.n - 1)
            df += side.n - 1
    var = ss / df if df > 0 else noise.cv ** 2
    return math.sqrt(var * (1 / new.n + 1 / old.n)), df, "t, calibrated CV pooled"


def ratio(new: Runs, old: Runs, noise: Noise = DEFAULT) -> Ratio:
    """The speedup new/old (geometric means) with its 95% band."""
    return difference(new, old, noise).ratio(min(new.n, old.n))


def band(runs: Runs, noise: Noise = DEFAULT) -> float:
    """Relative 95% half-width of one rung's mean throughput (error bars)."""
    var = runs.var()
    if noise.calibrated:
        ss, df = noise.df * noise.cv ** 2 + (var or 0.0) * (runs.n - 1), noise.df + runs.n - 1
        var, q = ss / df, sps.t.ppf(0.5 + CONFIDENCE / 2, df)
    elif var is not None:
        q = sps.t.ppf(0.5 + CONFIDENCE / 2, runs.n - 1)
    else:
        var, q = noise.cv ** 2, _Z
    se = max(math.sqrt(var / runs.n), math.sqrt(runs.within_var_of_mean()))
    return float(math.expm1(q * se))


# ------------------------------------------------------------------------------------------
# calibration (A/A: the same settings in N fresh processes)


@dataclass
class Calibration:
    """What an A/A sweep says about this machine's noise."""

    runs: int
    cv: float  # sd of log samples_per_s between processes (~ CV)
    within: float  # median within-run 95% half-width of the mean step time
    detectable: dict[int, float]  # repeats per side -> smallest speedup (x) told from no change in 80% of sweeps
    mean_samples_per_s: float
    warnings: list[str] = field(default_factory=list)


def calibrate(samples_per_s: list[float], within: list[float] | None = None,
              other_cpu_pct: list[float] | None = None, repeats=(1, 3, 5),
              busy: list[str | None] | None = None) -> Calibration:
    """Process-to-process CV and what it lets a sweep detect; warnings when the machine is unfit.

    ``busy``: each run's ``busy.busy_reason`` (GPU clocks and memory as well as the CPUs); ``other_cpu_pct``
    is the older, CPU-only form of the same warning."""
    values = [v for v in samples_per_s if v is not None and math.isfinite(v) and v > 0]
    if len(values) < 2:
        raise ValueError(f"a calibration needs at least 2 ok runs, got {len(values)}")
    logs = np.log(values)
    cv = float(np.std(logs, ddof=1))
    detectable = {r: detectable_speedup(cv, len(values) - 1, r) for r in repeats}
    cal = Calibration(runs=len(values), cv=cv, within=float(np.median(within)) if within else math.nan,
                      detectable=detectable, mean_samples_per_s=float(np.exp(logs.mean())))
    cal.warnings = _warnings(values, cv, other_cpu_pct or [], detectable_speedup(cv, len(values) - 1, 1))
    reasons = [(i, b) for i, b in enumerate(busy or []) if b]
    if reasons:
        cal.warnings.append(f"machine busy during {len(reasons)} run(s) (run {reasons[0][0]}: {reasons[0][1]}): "
                            "measure on an idle machine")
    return cal


def detectable_speedup(cv: float, df: float, repeats: int, power: float = POWER, rungs: int = 2) -> float:
    """The smallest speedup a sweep with ``repeats`` runs per rung tells from no change (its 95% band excludes
    1x) in ``power`` (80%) of sweeps, at process CV ``cv`` known with ``df`` degrees of freedom (a
    calibration's runs - 1), with the quantiles that sweep really uses: the rung x round model of
    ``harness.analysis.stats.blocks``, run on seeded simulated sweeps (``planned_power``: every branch included).
    ``df`` inf: a CV taken as known (normal quantile). inf when no band is possible."""
    return math.exp(cv * _detectable_in_cvs(repeats, rungs, df, power))


@functools.lru_cache(maxsize=64)
def _detectable_in_cvs(repeats: int, rungs: int, df: float, power: float) -> float:
    """The log speedup, in units of the CV, detected in ``power`` of sweeps (the model is scale-free)."""
    if math.isinf(df):
        def chance(d: float) -> float:
            return _power(d, math.sqrt(2 / repeats), math.inf)
    else:
        def chance(d: float) -> float:
            return blocks.planned_power(d, 1.0, repeats, rungs, df)
    hi = 1.0
    while chance(hi) < power:
        hi *= 2
        if hi > 1e4:
            return math.inf
    lo = 0.0
    for _ in range(40):  # bisection
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if chance(mid) < power else (lo, mid)
    return hi


def _warnings(values: list[float], cv: float, other_cpu_pct: list[float], single: float) -> list[str]:
    out = []
    if cv >= UNFIT_CV:
        out.append(f"CV {cv:.1%} >= {UNFIT_CV:.0%}: too noisy to measure speedups (one run per rung sees "
                   f"only changes beyond {single:.2f}x); stop other work, pin clocks, or measure elsewhere")
    two = bimodal(values)
    if two:
        out.append(f"the runs are {two.describe()}: the machine runs this at two speeds; {BIMODAL_ADVICE}")
    for i in ([] if two else outliers(values)):
        out.append(f"run {i} is an outlier ({values[i]:.2f} samples/s vs median {np.median(values):.2f}): "
                   "something disturbed it; run the calibration again")
    busy = [p for p in other_cpu_pct if p is not None and math.isfinite(p) and p > BUSY_PCT]
    if busy:
        out.append(f"other processes used up to {max(busy):.0f}% of the CPUs during {len(busy)} run(s): "
                   "measure on an idle machine")
    return out


OUTLIER_LEVEL = 0.01  # Grubbs' test: a clean calibration is refused for an outlier in 1% of cases, whatever its CV


def outliers(values: list[float], level: float = OUTLIER_LEVEL) -> list[int]:
    """The run whose log throughput lies farthest from the mean, when Grubbs' test (the largest studentized
    deviation, its critical value for n normal runs) rejects it at ``level``; [] otherwise or with fewer than 3.

    The rule before (3.5 robust SDs, a MAD of at least 1%) refused 10% (CV 2%) to 20% (CV 5%) of clean 5-run
    calibrations: the MAD of 5 runs is often far below their SD, and refusing the widest samples left the used
    calibrations too quiet (docs/statistics.md)."""
    n = len(values)
    if n < 3:
        return []
    logs = np.log(np.asarray(values, dtype=float))
    sd = float(np.std(logs, ddof=1))
    if not sd > 0:
        return []
    far = int(np.argmax(np.abs(logs - logs.mean())))
    t = sps.t.isf(level / (2 * n), n - 2)
    critical = (n - 1) / math.sqrt(n) * math.sqrt(t * t / (n - 2 + t * t))
    return [far] if abs(logs[far] - logs.mean()) / sd > critical else []


# ------------------------------------------------------------------------------------------
# reading the store


def runs_of(records, within: bool = True) -> Runs:
    """A Runs from ok records (a pandas frame); NaN throughputs are left out (their status says why)."""

    ok = records[(records["status"] == "ok") & records["samples_per_s"].notna() & (records["samples_per_s"] > 0)]
    bands = []
    if within and "step_ms" in ok:
        bands = [u for u in (within_run_uncertainty(s) for s in ok["step_ms"] if s is not None) if u is not None]
    return Runs([float(v) for v in ok["samples_per_s"]], bands)


def hardware_label(row, short: bool = False) -> str:
    """What must be equal for two records to be comparable: the device type and the GPU or CPU model and count
    (``cuda 2x A100``, ``cpu EPYC (16 cores)``); ``short`` for a line that names the device apart (``A100 x2``,
    ``EPYC (16 CPUs)``), and the topology where the record has one (GPU links, NCCL version and settings)."""
    topology = row.get("topology") if hasattr(row, "get") else ""
    label = _hardware(row, short)
    if isinstance(topology, str) and topology and not short:  # unlike interconnects or NCCL settings: not comparable
        return f"{label} [{topology}]"
    return label


def _hardware(row, short: bool) -> str:
    gpu = row["device"] == "cuda"
    if short:
        return (f"{row['gpu_name']} x{_count(row['gpu_count'])}" if gpu
                else f"{row['cpu_model']} ({_count(row['cpu_count'])} CPUs)")
    if gpu:
        return f"cuda {_count(row['gpu_count'])}x {row['gpu_name']}"
    if row["device"] == "cpu":
        return f"cpu {row['cpu_model']} ({_count(row['cpu_count'])} cores)"
    return str(row["device"])


def _count(value) -> str:
    """A stored count as text; "?" where the record has none (None, NaN)."""
    try:
        return str(int(value))
    except (TypeError, ValueError):
        return "?"


def find_calibration(frame, env_key: str, hardware: str) -> Noise:
    """The newest noise sweep of this environment (else of this hardware) in ``frame``; DEFAULT if none."""
    if "ladder" not in frame or not len(frame):
        return DEFAULT
    cal = frame[(frame["ladder"] == NOISE_LADDER) & (frame["status"] == "ok")]
    if cal.empty:
        return DEFAULT
    same_env = cal[cal["env_key"] == env_key]
    match = "environment"
    if same_env.empty:
        same_env = cal[cal.apply(hardware_label, axis=1) == hardware]
        match = "hardware"
    if same_env.empty:
        return DEFAULT
    newest = same_env.sort_values("timestamp")["sweep_id"].iloc[-1]
    runs = [float(v) for v in same_env.loc[same_env["sweep_id"] == newest, "samples_per_s"] if v > 0]
    if len(runs) < 2:
        return DEFAULT
    cv = max(float(np.std(np.log(runs), ddof=1)), MIN_CV)
    return Noise(cv=cv, df=len(runs) - 1, sweep_id=str(newest), runs=len(runs), match=match)


def with_calibrations(results_dir, frame):
    """``frame`` (one sweep, read alone) plus the store's noise calibrations that ``noise_for`` may choose: when
    every environment of ``frame`` has one, only the newest calibration sweep of each (the rule of
    find_calibration, answered by the store's index footers), so a table reads what it shows, not every
    calibration ever made; otherwise all of them (the match by hardware needs their other columns)."""
    import pandas as pd


    envs = set(frame["env_key"].dropna()) if "env_key" in frame else set()
    newest = newest_ok_sweeps(results_dir, NOISE_LADDER) or {}
    if envs and envs <= set(newest):
        chosen = sorted({newest[e] for e in envs})
        calibrations = load_runs(results_dir, where={"ladder": NOISE_LADDER, "sweep_id": chosen})
    else:
        calibrations = load_runs(results_dir, where={"ladder": NOISE_LADDER})
    if not len(calibrations):
        return frame
    return pd.concat([frame, calibrations], ignore_index=True).drop_duplicates("run_id")


def noise_for(frame, records) -> Noise:
    """The noise model for ``records`` (one sweep) given the whole store ``frame``."""
    if not len(records):
        return DEFAULT
    first = records.iloc[0]
    return find_calibration(frame, str(first["env_key"]), hardware_label(first))


def format_calibration(cal: Calibration, sweep_id: str, attempted: int) -> str:
    """The calibration as the ``noise`` command prints it."""
    lines = [f"noise calibration {sweep_id}: {cal.runs} of {attempted} runs ok, "
             f"geometric mean {cal.mean_samples_per_s:.2f} samples/s",
             f"  process-to-process CV of samples/s: {cal.cv:.1%}",
             "  within-run spread (95% step bootstrap of one run's mean, median): "
             + ("-" if math.isnan(cal.within) else f"±{cal.within:.1%}"),
             f"  smallest speedup told from no change in {POWER:.0%} of sweeps (95% band excludes 1x):"]
    lines += [f"    sweep.repeats={r}: {x:.3f}x ({x - 1:.1%})" for r, x in cal.detectable.items()]
    if cal.warnings:
        lines += ["  NOT FIT TO MEASURE:"] + [f"    - {w}" for w in cal.warnings]
    else:
        lines.append("  this machine looks fit to measure")
    return "\n".join(lines)
