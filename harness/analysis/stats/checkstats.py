"""``check``'s statistics on the rung x round model: current over baseline per config, Holm over configs,
and looks after every round without inflating the family-wise error (no torch, no pandas).

Two designs:

* **Paired rounds** (``paired=True``): baseline and current were measured in the same rounds, one after
  the other (``climb`` interleaves its candidate and incumbent this way). Both go in one rung x round
  table, rows 0..K-1 the baseline's configs and K..2K-1 the current's, and each config's ratio is a
  contrast of the block model (``harness.analysis.stats.blocks``): round effects cancel, the residual variance
  is pooled over every config of both sides.
* **Separate sweeps** (``paired=False``, a saved baseline): rounds of different sweeps share nothing, so
  a config's mean carries its round's effect too. Its variance is the round-to-round variance of a config
  pooled over the side's configs (the two-way ANOVA's (MS_round + (K-1) MS_residual) / K, with
  Satterthwaite degrees of freedom), and the two sides combine as in Welch.

The one-sided p-values of "current is slower" go through Holm's step-down procedure; at look l of a
sequential check each Holm level alpha / j is replaced by the nominal level of a Lan-DeMets boundary
spending alpha / j (``sequential.nominal_levels``), which is Holm with group-sequential tests (Maurer and
Bretz): the family-wise error over configs AND looks stays at alpha.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from harness.analysis.stats import distributions as sps  # scipy.stats's functions, scipy loaded at the first value

from harness.analysis.stats import blocks, sequential

ALPHA = 0.05


@dataclass(frozen=True)
class Comparison:
    """Per trial and config: log(current / baseline), its standard error and degrees of freedom."""

    diff: np.ndarray  # (trials, K)
    se: np.ndarray
    df: np.ndarray

    def p_slower(self) -> np.ndarray:
        """One-sided p-values of 'current is slower' (trials, K); NaN where no variance is known."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return sps.t.cdf(self.diff / self.se, np.where(self.df > 0, self.df, np.nan))

    def bounds(self, alpha: float = ALPHA) -> tuple[np.ndarray, np.ndarray]:
        """Two-sided band at nominal level ``alpha`` on the ratio scale."""
        with np.errstate(invalid="ignore"):
            half = sps.t.isf(alpha / 2, np.where(self.df > 0, self.df, np.nan)) * self.se
        return np.exp(self.diff - half), np.exp(self.diff + half)


def _batch(logs) -> np.ndarray:
    table = np.asarray(logs, dtype=float)
    return table[None] if table.ndim == 2 else table


def compare(baseline, current, paired: bool, calibration_cv: float | None = None,
            calibration_df: float = 0.0) -> Comparison:
    """Current over baseline for each config: ``baseline``/``current`` are ``[(trial,) config, round]`` log
    throughputs, configs in the same order on both sides (NaN for a missing run). A calibration (its CV is
    the run-to-run spread of fresh processes, round effects included) is pooled with each side's variance
    as the rung x round model does (``blocks.fit``: dropped when the runs are noisier beyond chance)."""
    base, cur = _batch(baseline), _batch(current)
    if base.shape[:2] != cur.shape[:2]:
        raise ValueError(f"baseline and current must hold the same configs: {base.shape[1]} vs {cur.shape[1]}")
    if paired:
        return _paired(base, cur, calibration_cv, calibration_df)
    b_mean, b_var, b_df, b_n = _side(base)
    c_mean, c_var, c_df, c_n = _side(cur)
    if calibration_cv is not None and calibration_df > 0:  # one variance for both sides, as the machine's
        data_df = b_df + c_df
        with np.errstate(invalid="ignore"):
            data = (np.nan_to_num(b_var) * b_df + np.nan_to_num(c_var) * c_df) / data_df
        var, df = _pool(data, data_df, calibration_cv, calibration_df)
        se = np.sqrt(var[:, None] * (1 / b_n + 1 / c_n))
        return Comparison(c_mean - b_mean, se, np.broadcast_to(df[:, None], se.shape).copy())
    vb, vc = b_var[:, None] / b_n, c_var[:, None] / c_n
    se2 = vb + vc
    with np.errstate(invalid="ignore", divide="ignore"):
        df = se2 ** 2 / (vb ** 2 / b_df[:, None] + vc ** 2 / c_df[:, None])
    return Comparison(c_mean - b_mean, np.sqrt(se2), np.nan_to_num(df, nan=0.0))


def _paired(base, cur, cv, cal_df) -> Comparison:
    if base.shape[2] != cur.shape[2]:
        raise ValueError(f"paired rounds need as many rounds on both sides: {base.shape[2]} vs {cur.shape[2]}")
    configs = base.shape[1]
    model = blocks.fit(np.concatenate([base, cur], axis=1), cv, cal_df)
    diffs, ses, dfs = [], [], []
    for k in range(configs):
        c = blocks.contrast(model, configs + k, k)
        nan = np.full(base.shape[0], np.nan)
        diffs.append(nan if c is None else c.diff)
        ses.append(nan if c is None else c.se)
        dfs.append(np.zeros(base.shape[0]) if c is None else c.df)
    return Comparison(np.stack(diffs, 1), np.stack(ses, 1), np.stack(dfs, 1))


def _side(logs: np.ndarray):
    """Per trial: config means (trials, K), the variance of one run of a config about its mean including the
    round's effect (trials,), its degrees of freedom (trials,), and runs per config (K,)."""
    n = (~np.isnan(logs[0])).sum(axis=1).astype(float)
    means = np.nanmean(logs, axis=2)
    ss = np.nansum((logs - means[:, :, None]) ** 2, axis=(1, 2))
    df_within = float(np.sum(np.maximum(n - 1, 0)))
    with np.errstate(invalid="ignore", divide="ignore"):
        var = ss / df_within if df_within > 0 else np.full(len(logs), np.nan)
    complete = not np.isnan(logs[0]).any()
    configs, rounds = logs.shape[1], logs.shape[2]
    if complete and configs > 1 and rounds > 1:  # Satterthwaite on the two-way ANOVA's mean squares
        fitted = blocks.fit(logs)
        ms_res = fitted.residual_var
        ms_round = configs * np.var(np.mean(logs, axis=1), axis=1, ddof=1)
        a, b = ms_round / configs, (configs - 1) * ms_res / configs
        with np.errstate(invalid="ignore", divide="ignore"):
            df = (a + b) ** 2 / (a ** 2 / (rounds - 1) + b ** 2 / ((rounds - 1) * (configs - 1)))
    else:  # as if every config moved with the rounds: the fewest runs of a config, minus one
        df = np.full(len(logs), max(float(n.min()) - 1, 0.0))
    return means, var, df, n


def _pool(var: np.ndarray, df: np.ndarray, cv, cal_df: float) -> tuple[np.ndarray, np.ndarray]:
    """The runs' variance pooled with a calibration's, unless the runs are noisier beyond chance (the F test and
    the minimum df of ``blocks.fit``)."""
    cal_var = np.maximum(np.asarray(cv, dtype=float), blocks.MIN_CV) ** 2
    data = np.nan_to_num(var) * df
    with np.errstate(invalid="ignore", divide="ignore"):
        crit = sps.f.ppf(1 - blocks.CALIBRATION_CHECK_LEVEL, np.maximum(df, 1), cal_df)
        changed = (df >= blocks.MIN_DF_CHECKED) & (var / cal_var > crit)
    pooled = (data + cal_df * cal_var) / (df + cal_df)
    return np.where(changed, var, pooled), np.where(changed, df, df + cal_df)


# ------------------------------------------------------------------------------------------
# Holm over configs, at a look of a sequential check


def one_sided_level(alpha: float, fractions: tuple[float, ...] | None = None,
                    spending: str = sequential.DEFAULT_SPENDING) -> float:
    """The one-sided nominal level at the last of the looks at information ``fractions`` for a test at ``alpha``
    (``alpha`` itself for a single look, ``fractions`` None)."""
    if not fractions:
        return alpha
    return sequential.nominal_levels(tuple(fractions), 2 * alpha, spending)[-1] / 2


def look_level(fractions: tuple[float, ...] | None = None,
               spending: str = sequential.DEFAULT_SPENDING) -> Callable[[float], float]:
    """Holm's level alpha / j as tested at the last of the looks at ``fractions`` (``speedup.holm``'s ``at_level``):
    which configs are significantly slower with family-wise error <= alpha, looking after every round."""
    return lambda alpha: one_sided_level(alpha, fractions, spending)


def check_fractions(current_rounds: int, max_rounds: int, baseline_rounds: int | None = None,
                    first: int = 2) -> tuple[float, ...]:
    """Information fractions of a check's looks after rounds ``first``..``current_rounds`` of a ``max_rounds``
    budget: rounds / budget when paired; for a fixed baseline of ``baseline_rounds`` the information of a
    difference of means, 1 / (1/current + 1/baseline), relative to the budget's."""
    def info(r: int) -> float:
        return r if baseline_rounds is None else 1 / (1 / r + 1 / baseline_rounds)

    return tuple(info(r) / info(max_rounds) for r in range(first, min(current_rounds, max_rounds) + 1))
