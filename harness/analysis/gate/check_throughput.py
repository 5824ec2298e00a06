"""How ``check`` judges the throughput of its configs: current over baseline on the rung x round model
(``harness.analysis.stats.checkstats``, a saved baseline: no shared rounds), Holm over every config, each band shown at
the level its config is tested at (no torch). ``harness.analysis.gate.check`` picks the records and writes the rows."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from harness.analysis.stats import checkstats, noise_model, speedup

ALPHA = noise_model.ALPHA


@dataclass(frozen=True)
class RatioEstimate:
    """Throughput ratio current/baseline (>1 is faster), its band at the level it is tested at, and the one-sided
    p-value of "current is slower". ``low``/``high`` are NaN when there is no band (no variance known)."""

    ratio: float
    low: float = math.nan
    high: float = math.nan
    p_slower: float = math.nan
    method: str = ""

    @property
    def has_interval(self) -> bool:
        return not (math.isnan(self.low) or math.isnan(self.high))


def estimate(base: noise_model.Runs, current: noise_model.Runs, noise: noise_model.Noise) -> RatioEstimate:
    """One config on its own (a family of one): current over baseline with its one-sided 5% band."""
    cv, df = (noise.cv, noise.df) if noise.calibrated else (None, 0.0)
    comp = checkstats.compare(base.logs()[None, :], current.logs()[None, :], paired=False, calibration_cv=cv,
                              calibration_df=df)
    return _estimates(comp, [ALPHA], noise)[0]


def classify(estimate: RatioEstimate, threshold: float, significant: bool | None = None) -> str:
    """'regressed', 'warned', 'improved' or 'unchanged' for a throughput ratio.

    Regressed: the drop is significant (``significant``: Holm's decision over the whole check; None: as if a
    family of one) AND the band's upper end lies below ``1 - threshold``. Past the threshold but not so
    (or no band): warned. Improved: above ``1 + threshold`` with the whole band above 1.
    """
    beyond = estimate.has_interval and estimate.high < 1 - threshold
    if significant is None:
        significant = beyond
    if estimate.ratio < 1 - threshold:
        return "regressed" if significant and beyond else "warned"
    if estimate.ratio > 1 + threshold and estimate.has_interval and estimate.low > 1:
        return "improved"
    return "unchanged"


def _estimates(comp: checkstats.Comparison, levels: list[float], noise: noise_model.Noise) -> list[RatioEstimate]:
    method = ("rung x round model across sweeps, calibrated CV pooled" if noise.calibrated
              else "rung x round model across sweeps, the runs' own spread")
    p = comp.p_slower()[0]
    out = []
    for i, level in enumerate(levels):
        low, high = (b[0, i] for b in comp.bounds(2 * level))
        out.append(RatioEstimate(float(np.exp(comp.diff[0, i])), float(low), float(high), float(p[i]), method))
    return out


def _log_table(sides: list) -> np.ndarray:
    """Log throughputs ``[config, round]`` (NaN where a config has no run in that round): a run's ``round``
    column, or its order when that is missing."""
    rounds = [[int(r) if r == r and r is not None else i for i, r in enumerate(ok["round"])] for ok in sides]
    table = np.full((len(sides), max(max(r) for r in rounds) + 1), np.nan)
    for k, (ok, where) in enumerate(zip(sides, rounds)):
        table[k, where] = np.log(ok["samples_per_s"].to_numpy(dtype=float))
    return table


def throughput(base_sides: list, current_sides: list, noise: noise_model.Noise) -> list[tuple[RatioEstimate, bool]]:
    """Every config of one check at once (the variance is pooled over the configs of a side): its estimate, band
    at its tested level and p-value, and whether Holm finds it significantly slower. ``base_sides`` and
    ``current_sides``: each config's ok runs (frames with ``samples_per_s`` and ``round``), in the same order."""
    return throughput_logs(_log_table(base_sides), _log_table(current_sides), noise)


def throughput_logs(base, current, noise: noise_model.Noise) -> list[tuple[RatioEstimate, bool]]:
    """``throughput`` on log throughputs ``[config, round]`` (NaN: no run), as simulations hand them."""
    cv, df = (noise.cv, noise.df) if noise.calibrated else (None, 0.0)
    comp = checkstats.compare(base, current, paired=False, calibration_cv=cv, calibration_df=df)
    p_values = comp.p_slower()[0]
    significant, levels = speedup.holm(p_values, ALPHA)  # each config's band at the level its rank is tested at
    return [(e, bool(s)) for e, s in zip(_estimates(comp, levels.tolist(), noise), significant)]
