"""The rung x round model: one sweep's runs analysed together, rounds as blocks (no torch, no pandas).

A sweep measures every rung once per round. Its log throughputs form a table ``logs[rung, round]`` (NaN
where a rung did not run ok in that round), and the model is

    log samples/s = rung effect + round effect + residual,   residual ~ N(0, sigma^2)

* **Rounds are blocks.** Whatever slows a whole round (a busy neighbour, a warm or cold machine) is
  taken out by the round effect, so a rung is compared with its predecessor within the same rounds.
* **One residual variance pooled over all rungs**, with (R-1)(K-1) degrees of freedom for a complete
  table of K rungs and R rounds (cells - rank of the design when some are missing). With 2 runs a rung
  and 6 rungs that is 5 degrees of freedom where Welch on one pair of rungs has 1-2, which is what lets
  a second run add power instead of taking it away.
* **A calibration** (``python -m harness noise``: the same settings N times) is pooled with the residual
  variance (its N-1 degrees of freedom added) unless the runs are noisier than it beyond chance, by an F
  test at :data:`CALIBRATION_CHECK_LEVEL` (25%) once they have 3 or more degrees of freedom of their
  own: then the machine changed since, and the runs' variance is used alone, with their own df.
* **A rung noisier than the rest** (compile, a loader that sometimes stalls) must not borrow the others'
  small variance. Each rung with 4 or more runs has its own residual variance F-tested at
  :data:`CHECK_LEVEL` against the model fitted without it; a comparison involving a rung that is noisier
  beyond chance uses the larger of the pooled variance and the pair's own paired differences (one per
  round both ran), with the pair's m - 1 degrees of freedom: a paired t on those two rungs alone, which
  holds whatever the other rungs do. With 2-3 runs a rung no test tells it apart at a price worth paying
  (docs/statistics.md has the numbers).
* **No variance, no band.** One round and no calibration leave no degree of freedom: the band is
  undefined (NaN), and a verdict says so instead of assuming a CV (docs/statistics.md says why).

Every function takes ``logs`` as an array ``(K, R)`` for one sweep or ``(trials, K, R)`` for many
simulated sweeps with the same missing cells: the simulations in the tests run this very code.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from harness.analysis.stats import distributions as sps  # scipy.stats's functions, scipy loaded at the first value

from harness.analysis.stats import speedup
from harness.analysis.stats.busy import busy_reason, reader
from harness.analysis.stats.speedup import Ratio

CHECK_LEVEL = 0.10  # level of the F test of a rung against the others; docs/statistics.md: why
CALIBRATION_CHECK_LEVEL = 0.25  # level of the F test of the runs against the calibration; docs/statistics.md: why
MIN_DF_CHECKED = 3  # runs with fewer residual df cannot tell a changed machine apart: the calibration is trusted
MIN_CV = 0.005  # a calibration cannot prove noise below this (as noise_model.MIN_CV)
MIN_RUNS_CHECKED = 4  # with 2-3 runs a rung's own variance has 1-2 df: the check would cost more power than it saves


@dataclass(frozen=True)
class Design:
    """The least-squares design of one missing-cell pattern: rung effects then round effects (round 0 is the
    reference), fitted to the observed cells in rung-major order."""

    observed: np.ndarray  # (K, R) bool
    matrix: np.ndarray  # (n, K + R - 1) the design matrix
    pinv: np.ndarray  # (K + R - 1, n) its Moore-Penrose inverse
    rank: int

    @property
    def residual_df(self) -> int:
        return int(self.observed.sum()) - self.rank

    def estimable(self, vector: np.ndarray) -> bool:
        """Whether a linear combination of the parameters can be estimated (its rungs are connected by rounds)."""
        back = vector @ self.pinv @ self.matrix
        return bool(np.allclose(back, vector, atol=1e-8))


def _matrix(observed: np.ndarray) -> np.ndarray:
    rungs, rounds = observed.shape
    cells = np.argwhere(observed)
    x = np.zeros((len(cells), rungs + rounds - 1))
    x[np.arange(len(cells)), cells[:, 0]] = 1.0
    later = cells[:, 1] > 0
    x[np.nonzero(later)[0], rungs + cells[later, 1] - 1] = 1.0
    return x


@functools.lru_cache(maxsize=256)
def _design(shape: tuple[int, int], mask: bytes) -> Design:
    observed = np.frombuffer(mask, dtype=bool).reshape(shape).copy()
    x = _matrix(observed)
    pinv = np.linalg.pinv(x) if x.size else np.zeros((x.shape[1], 0))
    rank = int(np.linalg.matrix_rank(x)) if x.size else 0
    return Design(observed, x, pinv, rank)


def design(observed: np.ndarray) -> Design:
    """The (cached) design of a missing-cell pattern ``observed[rung, round]``."""
    observed = np.asarray(observed, dtype=bool)
    return _design(observed.shape, np.ascontiguousarray(observed).tobytes())


@dataclass(frozen=True)
class BlockFit:
    """A fitted rung x round table. Arrays have one entry per trial (one for a real sweep)."""

    design: Design
    logs: np.ndarray  # (trials, K, R), NaN where a rung did not run ok
    effects: np.ndarray  # (trials, K): rung effects (log scale; only differences mean anything), NaN if never ran
    round_effects: np.ndarray  # (trials, R): round effects, round 0 = 0 (NaN for a round where nothing ran)
    residual_var: np.ndarray  # (trials,): pooled residual variance of the runs alone (NaN with no df)
    residual_df: int
    var: np.ndarray  # (trials,): the variance the bands use (residual, pooled with a calibration if it agrees)
    df: np.ndarray  # (trials,): its degrees of freedom (0: no variance known)
    calibration_used: np.ndarray  # (trials,) bool
    calibration_cv: float | np.ndarray | None = None
    calibration_df: float = 0.0

    @property
    def rungs(self) -> int:
        return self.logs.shape[1]

    @functools.cached_property
    def noisy(self) -> np.ndarray:
        """(trials, K): ``noisier`` for every rung at CHECK_LEVEL, computed once per fit."""
        if self.design.observed.all() and self.rounds >= MIN_RUNS_CHECKED:
            return _noisy_complete(self)
        return np.stack([noisier(self, k) for k in range(self.rungs)], axis=1)

    @property
    def rounds(self) -> int:
        return self.logs.shape[2]


def fit(logs, calibration_cv=None, calibration_df: float = 0.0,
        check_level: float = CALIBRATION_CHECK_LEVEL) -> BlockFit:
    """Fit the model to ``logs[(trial,) rung, round]`` (log samples/s, NaN for a missing cell).

    ``calibration_cv``/``calibration_df``: this machine's calibrated CV (a number, or one per trial) and its
    degrees of freedom (runs - 1), pooled with the residual variance unless the runs alone are noisier than
    it beyond chance by an F test at ``check_level`` (0: never dropped, for comparisons)."""
    table = np.asarray(logs, dtype=float)
    table = table[None] if table.ndim == 2 else table
    if table.ndim != 3 or 0 in table.shape[1:]:
        raise ValueError(f"logs must be (rungs, rounds) or (trials, rungs, rounds) with at least one of each, "
                         f"got shape {np.shape(logs)}")
    observed = ~np.isnan(table[0])
    if (np.isnan(table) != ~observed).any():
        raise ValueError("every trial must have the same missing cells (one design per call)")
    d = design(observed)
    y = table[:, observed]  # (trials, n), rung-major like the design's rows
    params = y @ d.pinv.T
    residuals = y - params @ d.matrix.T
    df_res = d.residual_df
    ss = np.einsum("ij,ij->i", residuals, residuals)
    res_var = ss / df_res if df_res > 0 else np.full(len(table), np.nan)
    rungs = table.shape[1]
    effects = np.where(observed.any(axis=1), params[:, :rungs], np.nan)
    rounds = np.concatenate([np.zeros((len(table), 1)), params[:, rungs:]], axis=1)
    rounds = np.where(observed.any(axis=0), rounds, np.nan)
    var, df, used = _with_calibration(ss, df_res, calibration_cv, calibration_df, check_level)
    return BlockFit(d, table, effects, rounds, res_var, df_res, var, df, used, calibration_cv, calibration_df)


def _with_calibration(ss: np.ndarray, df_res: int, cv, cal_df: float, check_level: float):
    """(variance, df, calibration used?) per trial: the residual variance pooled with the calibration's
    unless the runs are noisier than it (see ``fit``)."""
    trials = len(ss)
    alone = ss / df_res if df_res > 0 else np.full(trials, np.nan)
    if cv is None or cal_df <= 0:
        return alone, np.full(trials, float(df_res)), np.zeros(trials, dtype=bool)
    cal_var = np.maximum(np.asarray(cv, dtype=float), MIN_CV) ** 2
    if df_res >= MIN_DF_CHECKED and check_level > 0:
        changed = alone / cal_var > sps.f.ppf(1 - check_level, df_res, cal_df)
    else:
        changed = np.zeros(trials, dtype=bool)
    pooled = (ss + cal_df * cal_var) / (df_res + cal_df)
    return (np.where(changed, alone, pooled), np.where(changed, float(df_res), df_res + cal_df), ~changed)


@dataclass(frozen=True)
class Contrast:
    """log(new / old) from the model: estimate, standard error and degrees of freedom per trial.

    ``own`` marks the trials where this comparison's paired differences were noisier than the pooled
    variance and the comparison fell back on them; ``pairs`` is the number of rounds both rungs ran."""

    new: int
    old: int
    diff: np.ndarray
    se: np.ndarray
    df: np.ndarray
    own: np.ndarray
    pairs: int

    def half_width(self, alpha) -> np.ndarray:
        """Half-width of the two-sided band at nominal level ``alpha`` (a number or one per trial); NaN
        where no variance is known (df 0)."""
        with np.errstate(invalid="ignore"):
            q = sps.t.ppf(1 - np.asarray(alpha, dtype=float) / 2, np.where(self.df > 0, self.df, np.nan))
        return q * self.se

    def bounds(self, alpha) -> tuple[np.ndarray, np.ndarray]:
        """The band on the ratio scale: (low, high) per trial."""
        half = self.half_width(alpha)
        return np.exp(self.diff - half), np.exp(self.diff + half)

    def p_slower(self) -> np.ndarray:
        """One-sided p-value of 'new is slower than old' per trial (NaN with no variance)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return sps.t.cdf(self.diff / self.se, np.where(self.df > 0, self.df, np.nan))

    def ratio(self, alpha: float = 0.05, trial: int = 0) -> Ratio:
        """One trial's band as the speedup.Ratio every table and verdict takes."""
        low, high = self.bounds(alpha)
        method = ("paired t on this pair alone (noisier than the other rungs)" if self.own[trial]
                  else "rung x round model, pooled variance")
        return Ratio(float(np.exp(self.diff[trial])), float(low[trial]), float(high[trial]), runs=self.pairs,
                     method=method, se=float(self.se[trial]), df=float(self.df[trial]))


def contrast(model: BlockFit, new: int, old: int, check_level: float = CHECK_LEVEL) -> Contrast | None:
    """Rung ``new`` over rung ``old``; None when either never ran ok or no round connects them.

    The pooled variance, unless either rung is noisier than the others beyond chance (``noisier``): then
    this pair's own paired differences (one per round both ran), with pairs - 1 degrees of freedom, or the
    pooled variance if that is larger."""
    observed = model.design.observed
    vector = np.zeros(model.design.pinv.shape[0])
    vector[new], vector[old] = 1.0, -1.0
    if not (observed[new].any() and observed[old].any()) or not model.design.estimable(vector):
        return None
    diff = model.effects[:, new] - model.effects[:, old]
    factor = float(np.sum((vector @ model.design.pinv) ** 2))  # Var(diff) = sigma^2 * factor
    se, df = np.sqrt(model.var * factor), model.df.copy()
    both = observed[new] & observed[old]
    pairs = int(both.sum())
    own = np.zeros(len(diff), dtype=bool)
    if pairs >= 2:
        if check_level == CHECK_LEVEL:
            own = model.noisy[:, new] | model.noisy[:, old]
        else:
            own = noisier(model, new, check_level) | noisier(model, old, check_level)
        d = model.logs[:, new, both] - model.logs[:, old, both]
        own_se = np.sqrt(np.var(d, axis=1, ddof=1) / pairs)
        se = np.where(own, np.maximum(own_se, se), se)
        df = np.where(own, float(pairs - 1), df)
    return Contrast(new, old, diff, se, df, own, pairs)


def noisier(model: BlockFit, rung: int, check_level: float = CHECK_LEVEL) -> np.ndarray:
    """Per trial: is ``rung`` noisier than the other rungs beyond chance at ``check_level``?

    An F test of the rung's own residual variance (its runs about its mean, after the round effects
    estimated from the other rungs alone) against the variance of the model fitted without it, which shares
    no run with it. False where the rung ran fewer than MIN_RUNS_CHECKED rounds or nothing else gives a
    variance."""
    trials = model.logs.shape[0]
    mine = model.design.observed[rung]
    keep = [k for k in range(model.rungs) if k != rung and model.design.observed[k].any()]
    if mine.sum() < MIN_RUNS_CHECKED or not keep:
        return np.zeros(trials, dtype=bool)
    rest = fit(model.logs[:, keep], model.calibration_cv, model.calibration_df)
    if not (rest.df > 0).all() or np.isnan(rest.round_effects[:, mine]).any():
        return np.zeros(trials, dtype=bool)
    e = model.logs[:, rung, mine] - rest.round_effects[:, mine]
    ss = np.sum((e - e.mean(axis=1, keepdims=True)) ** 2, axis=1)
    n_rest = len(keep)
    expected = (mine.sum() - 1) * rest.var * (1 + 1 / n_rest)  # its own noise plus that of the round estimates
    with np.errstate(invalid="ignore", divide="ignore"):
        return ss / expected > sps.f.ppf(1 - check_level, mine.sum() - 1, rest.df)


def _noisy_complete(model: BlockFit) -> np.ndarray:
    """``noisier`` for every rung of a complete table at once: the fits without each rung in closed form (the
    two-way table's row and column means), not K least-squares fits."""
    y = model.logs  # (trials, K, R)
    rungs, rounds = model.rungs, model.rounds
    if rungs < 2:
        return np.zeros((len(y), rungs), dtype=bool)
    rows = y - y.mean(axis=2, keepdims=True)  # A[j, r] = y[j, r] - mean of row j
    cols = rows.sum(axis=1)  # (trials, R): sum over rungs of A
    # B[k, r]: round effect of the table without rung k (its round mean minus its grand mean)
    b = (cols[:, None, :] - rows) / (rungs - 1)
    ss_rest = (np.sum(rows ** 2, axis=(1, 2))[:, None] - 2 * np.einsum("tkr,tr->tk", b, cols)
               + rungs * np.sum(b ** 2, axis=2) - np.sum((rows - b) ** 2, axis=2))
    df_rest = (rounds - 1) * (rungs - 2)
    e = rows - b  # rung k about its mean, after the other rungs' round effects
    ss_own = np.sum((e - e.mean(axis=2, keepdims=True)) ** 2, axis=2)
    out = np.zeros((len(y), rungs), dtype=bool)
    for k in range(rungs):
        var, df, _ = _with_calibration(np.maximum(ss_rest[:, k], 0.0), df_rest, model.calibration_cv,
                                       model.calibration_df, CALIBRATION_CHECK_LEVEL)
        if not (df > 0).all():
            continue
        expected = (rounds - 1) * var * (1 + 1 / (rungs - 1))
        with np.errstate(invalid="ignore", divide="ignore"):
            out[:, k] = ss_own[:, k] / expected > sps.f.ppf(1 - CHECK_LEVEL, rounds - 1, df)
    return out


def previous_ran(model: BlockFit, rung: int) -> int | None:
    """The last earlier rung that ran ok at least once (what ``rung`` was built on), None if none."""
    ran = model.design.observed.any(axis=1)
    earlier = [k for k in range(rung) if ran[k]]
    return earlier[-1] if earlier else None


def log_table(samples_per_s, rungs: int | None = None, rounds: int | None = None) -> np.ndarray:
    """``{(rung, round): samples/s}`` -> the (K, R) table of log throughputs with NaN for missing cells.
    Non-positive or missing throughputs count as missing (their run's status says why)."""
    cells = {k: v for k, v in dict(samples_per_s).items() if v is not None and math.isfinite(v) and v > 0}
    k_max = max((k for k, _ in cells), default=-1) + 1
    r_max = max((r for _, r in cells), default=-1) + 1
    table = np.full((rungs or k_max, rounds or r_max), np.nan)
    for (k, r), v in cells.items():
        table[k, r] = math.log(v)
    return table


def level_variance(model: BlockFit) -> tuple[np.ndarray, np.ndarray]:
    """(variance, degrees of freedom) per trial of one run about its rung's level, the round's effect included: what
    the band of one rung's mean throughput (the table's "±") needs, for a rung's runs carry their rounds' effects
    where a contrast cancels them. The two-way table's (SS_round + SS_residual) / (n - K), Satterthwaite's degrees
    of freedom (for a complete table (MS_round + (K-1) MS_residual) / K); pooled with a calibration as ``fit``
    pools it (a calibration measures fresh processes one after the other: this very spread)."""
    observed = model.design.observed
    rungs_ran = int(observed.any(axis=1).sum())
    df_e = int(observed.sum()) - rungs_ran
    trials = model.logs.shape[0]
    if df_e <= 0:
        return _with_calibration(np.zeros(trials), 0, model.calibration_cv, model.calibration_df, 0.0)[:2]
    e = model.logs[:, observed] - np.broadcast_to(model.effects[:, :, None], model.logs.shape)[:, observed]
    ss_e = np.sum((e - e.mean(axis=1, keepdims=True)) ** 2, axis=1)
    df_res = model.residual_df
    ss_res = np.nan_to_num(model.residual_var) * df_res
    df_round = df_e - df_res
    a = np.maximum(ss_e - ss_res, 0.0) / df_e  # the rounds' part and the residual's part of ss_e / df_e
    b = ss_res / df_e
    with np.errstate(invalid="ignore", divide="ignore"):
        df = (a + b) ** 2 / ((a ** 2 / df_round if df_round > 0 else 0.0) + (b ** 2 / df_res if df_res > 0 else 0.0))
    df = np.where(np.isfinite(df), df, float(df_e))
    var = a + b
    if model.calibration_cv is None or model.calibration_df <= 0:
        return var, df
    cal_var = np.maximum(np.asarray(model.calibration_cv, dtype=float), MIN_CV) ** 2
    with np.errstate(invalid="ignore", divide="ignore"):
        crit = sps.f.ppf(1 - CALIBRATION_CHECK_LEVEL, np.maximum(df, 1), model.calibration_df)
    changed = (df >= MIN_DF_CHECKED) & (var / cal_var > crit)
    pooled = (var * df + model.calibration_df * cal_var) / (df + model.calibration_df)
    return np.where(changed, var, pooled), np.where(changed, df, df + model.calibration_df)


def cells_ratio(cells, new: int, old: int, alpha: float = 0.05) -> Ratio | None:
    """Rung ``new`` over rung ``old`` from ``{(rung, round): value}`` (a throughput or a part of one, per run), on
    this model with no calibration: a part of the step (the compute part, the throughput at the guide's epoch)
    is not the whole run the calibration measured, so only its runs' own spread gives its band (NaN bounds with
    one round). None when either rung has no value or no round connects them."""
    ran = {k for k, _ in cells}
    if new not in ran or old not in ran:
        return None
    c = contrast(fit(log_table(cells, rungs=max(ran) + 1)), new, old)
    return None if c is None else c.ratio(alpha)


def planned_power(distance: float, cv: float, runs: int, rungs: int = 2, calibration_df: float = 0.0,
                  alpha: float = 0.05, trials: int = 4000, seed: int = 0) -> float:
    """Share of sweeps of ``rungs`` rungs x ``runs`` rounds, at process CV ``cv`` (and a calibration with
    ``calibration_df`` df, its own estimate drawn around ``cv``), whose band (level ``alpha``) for rung 1 over
    rung 0 excludes no change when rung 1 is really ``distance`` (log) faster: this very model on ``trials``
    seeded sweeps, every branch (pooled, calibration dropped, a rung judged on its pair) included. The same
    draws serve every ``distance``, so the answer grows with it, as a bisection needs. Where the model has a
    single branch (no calibration to drop, no rung checked), the noncentral t gives it exactly."""
    df_res = (runs - 1) * (rungs - 1)
    branches = (calibration_df > 0 and df_res >= MIN_DF_CHECKED) or (
        runs >= MIN_RUNS_CHECKED and (rungs >= 3 or calibration_df > 0))
    if not branches:
        return speedup.power(distance, cv * math.sqrt(2 / runs), df_res + calibration_df, alpha)
    rng = np.random.default_rng(seed)
    logs = cv * rng.standard_normal((trials, rungs, runs))
    logs[:, 1] += distance
    cal_cv = cv * np.sqrt(rng.chisquare(calibration_df, trials) / calibration_df) if calibration_df > 0 else None
    c = contrast(fit(logs, cal_cv, calibration_df), 1, 0)
    if c is None:
        return 0.0
    low, high = c.bounds(alpha)
    return float(np.mean((low > 1) | (high < 1)))


def from_records(records, rungs: int | None = None, rounds: int | None = None) -> tuple[np.ndarray, dict]:
    """The (K, R) log table of a sweep's records (RunRecords, dicts or pandas rows: ``rung``, ``round``,
    ``status``, ``samples_per_s``), and ``{(rung, round): reason}`` for the ok runs left out because their
    machine was busy (``busy.busy_reason``): a busy run is no measurement. A rung measured twice in one round
    (a resumed sweep) keeps its last ok run."""
    cells, busy = {}, {}
    for record in records:
        field = reader(record)
        rung, round_, value = field("rung"), field("round"), field("samples_per_s")
        if rung is None or field("status") != "ok" or value is None or not value == value:
            continue
        key = (int(rung), int(round_ if round_ is not None and round_ == round_ else 0))
        reason = busy_reason(record)
        if reason:
            busy[key] = reason
            continue
        cells[key] = float(value)
    return log_table(cells, rungs, rounds), busy
