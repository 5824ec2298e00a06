"""Small statistics for speedups: medians, spreads, a speedup with its band, and verdicts on claims.

The band itself comes from the run-level noise model (``harness.analysis.stats.blocks`` for a sweep's rung x round
table, ``harness.analysis.stats.noise_model`` for two groups of runs); this module holds what every caller shares
(``Ratio``, ``verdict``, the power arithmetic behind "repeats that would decide") and the within-run step
bootstrap. ``verdict_codes`` is the verdict rule on arrays, so simulations judge with the same rule as tables.
"""

from __future__ import annotations

import functools
import hashlib
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
from harness.fileio import keep, read_kept
from harness.analysis.stats import distributions as sps  # scipy.stats's functions, scipy loaded at the first value

BUSY_PCT = 10.0  # other processes' share of the CPUs above which a measurement is not trusted
TOO_WIDE = 10.0  # a band whose high / low exceeds this says nothing: "too wide to say"
POWER = 0.80  # "repeats that would decide" and "detectable speedup": decided in this share of sweeps


def median(values) -> float | None:
    values = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(values) if values else None


def relative_spread(values) -> float | None:
    """(max - min) / median over repeats; None with fewer than two."""
    values = [v for v in values if v is not None and not math.isnan(v)]
    if len(values) < 2:
        return None
    return (max(values) - min(values)) / statistics.median(values)


def within_run_uncertainty(step_ms, seed: int = 0) -> float | None:
    """Relative half-width of the 95% bootstrap interval of the mean step time of one run."""
    samples = np.asarray(step_ms, dtype=float)
    if samples.size < 5:
        return None
    # scipy.stats.bootstrap's percentile interval, the same resamples drawn from the same generator (equal to
    # within rounding), without importing scipy.stats (over a second) for the table of a sweep served from the store
    means = samples[np.random.default_rng(seed).integers(0, samples.size, (2000, samples.size))].mean(axis=-1)
    low, high = np.quantile(means, [0.025, 0.975])
    return float((high - low) / 2 / samples.mean())


@dataclass(frozen=True)
class Ratio:
    """A speedup with its 95% band: ``value`` x, plausibly anywhere in [low, high].

    ``runs`` is the number of runs on the smaller side (it scales the band in ``repeats_to_decide``);
    ``method`` says which part of the noise model made the band; ``se`` and ``df`` are the standard error
    of log(value) and its degrees of freedom (NaN / inf when the maker did not say: the normal quantile
    is then assumed). A band with NaN bounds means no variance was known (no verdict possible).
    """

    value: float
    low: float
    high: float
    runs: int = 1
    method: str = ""
    se: float = math.nan
    df: float = math.inf

    @property
    def within_noise(self) -> bool:
        return self.low <= 1.0 <= self.high

    @property
    def too_wide(self) -> bool:
        return self.high > TOO_WIDE * self.low


def band_text(r: Ratio | None) -> str:
    """'1.07x [0.83-1.37]'; '0.85x [too wide to say]' when the band spans more than TOO_WIDE; '-' for None."""
    if r is None:
        return "-"
    if math.isnan(r.low) or math.isnan(r.high):
        return f"{r.value:.2f}x [no band: no variance known]"
    if r.too_wide:
        return f"{r.value:.2f}x [too wide to say]"
    return f"{r.value:.2f}x [{r.low:.2f}-{r.high:.2f}]"


def ratio_text(r: Ratio | None, band: bool = False) -> str:
    """``1.23x``, with its band when ``band`` (:func:`band_text`: ``[low-high]``, ``[too wide to say]`` or
    ``[no band: ...]``), and ``(within noise)`` when a band that says something holds 1."""
    if r is None:
        return "-"
    text = band_text(r) if band else f"{r.value:.2f}x"
    return text + (" (within noise)" if r.within_noise and not r.too_wide else "")


def holm(p_values, alpha: float, at_level: Callable[[float], float] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Holm's step-down over the last axis of ``p_values`` (configs; trials x configs in simulations): which
    hypotheses are rejected with family-wise error <= ``alpha``, and the level each one's rank is tested at,
    alpha / (m - rank), or ``at_level`` of it where a look's boundary replaces it (``checkstats.look_level``). NaN
    p-values (nothing to test) are never rejected, rank last and still count in the family."""
    p = np.atleast_2d(np.asarray(p_values, dtype=float))
    m = p.shape[-1]
    by_rank = np.array([alpha / (m - i) if at_level is None else at_level(alpha / (m - i)) for i in range(m)],
                       dtype=float)
    order = np.argsort(np.where(np.isnan(p), np.inf, p), axis=-1, kind="stable")
    ranked = np.take_along_axis(p, order, axis=-1)
    passes = np.cumprod(np.nan_to_num(ranked, nan=np.inf) <= by_rank, axis=-1).astype(bool)
    rejected, levels = np.zeros_like(passes), np.zeros(p.shape)
    np.put_along_axis(rejected, order, passes, axis=-1)
    np.put_along_axis(levels, order, np.broadcast_to(by_rank, p.shape), axis=-1)
    return (rejected, levels) if np.ndim(p_values) > 1 else (rejected[0], levels[0])


# ------------------------------------------------------------------------------------------
# verdicts

CONFIRMS, INCONCLUSIVE, SHORT_NO_CHANGE, SHORT, EXCEEDS, REVERSES, TOO_WIDE_CODE, NO_BAND = range(8)
DECIDED_CODES = (CONFIRMS, SHORT_NO_CHANGE, SHORT, EXCEEDS, REVERSES)
NO_BAND_TEXT = ("inconclusive (one run a rung and no calibration: another round or a calibration decides, as the noise "
                "note says)")
_TEXT = {CONFIRMS: "confirms", SHORT_NO_CHANGE: "falls short (no measurable change)", SHORT: "falls short",
         EXCEEDS: "exceeds", REVERSES: "reverses (slower)", TOO_WIDE_CODE: "too wide to say", NO_BAND: NO_BAND_TEXT}


def verdict_codes(low, high, claim_low: float, claim_high: float) -> np.ndarray:
    """The verdict rule on arrays of bands (one code per band; see ``verdict`` for the words).

    A claim that holds 1x (e.g. 1.0-1.05x, "no slower") is confirmed only when the band lies inside it;
    any other claim when the band overlaps it and excludes 1x. A band with NaN bounds is NO_BAND, one
    spanning more than TOO_WIDE is TOO_WIDE_CODE, whatever it overlaps."""
    low, high = np.broadcast_arrays(np.asarray(low, dtype=float), np.asarray(high, dtype=float))
    holds_one = claim_low <= 1.0 <= claim_high
    within = (low <= 1.0) & (high >= 1.0)
    below, above = high < claim_low, low > claim_high
    short = np.where(within & (claim_low > 1.0), SHORT_NO_CHANGE, SHORT)
    short = np.where((claim_low >= 1.0) & (high < 1.0), REVERSES, short)
    if holds_one:
        inside = (low >= claim_low) & (high <= claim_high)
        middle = np.where(inside, CONFIRMS, INCONCLUSIVE)
    else:
        middle = np.where(within, INCONCLUSIVE, CONFIRMS)
    codes = np.where(below, short, np.where(above, EXCEEDS, middle))
    with np.errstate(invalid="ignore", divide="ignore"):
        codes = np.where(high > TOO_WIDE * low, TOO_WIDE_CODE, codes)
    return np.where(np.isnan(low) | np.isnan(high), NO_BAND, codes).astype(int)


def verdict(measured: Ratio, claim_low: float, claim_high: float, busy: str | None = None) -> str:
    """Confirms, inconclusive, falls short, exceeds or reverses: the band against the claimed range.

    A claim is confirmed only when the band overlaps it AND excludes no change (1.0); a claim that itself
    includes 1 only when the band lies inside it. A band holding both 1 and part of the claim cannot tell
    them apart: inconclusive, with the repeats that would decide in POWER of sweeps. ``busy`` (a reason
    from ``harness.analysis.stats.busy.busy_reason``): no verdict at all.
    """
    if busy:
        return f"no verdict: machine busy ({busy}): not trustworthy"
    code = int(verdict_codes(measured.low, measured.high, claim_low, claim_high))
    if code != INCONCLUSIVE:
        return _TEXT[code]
    runs = repeats_to_decide(measured, claim_low, claim_high)
    return "inconclusive (" + (f"~{runs} repeats would decide)" if runs else "more than 50 repeats to decide)")


def span_status(ran, first: int, last: int) -> str | None:
    """A claim over rungs ``first..last`` (a total or a group) can be judged only when every one of them ran
    ok: otherwise 'not measured (rungs [..] did not run ok)'. ``ran``: the rungs with at least one ok run."""
    missing = [r for r in range(first, last + 1) if r not in set(ran)]
    return f"not measured (rungs {missing} did not run ok)" if missing else None


# ------------------------------------------------------------------------------------------
# power: how many runs decide, what a sweep can detect


def power(distance: float, se: float, df: float, alpha: float = 0.05) -> float:
    """Probability that a two-sided band at level ``alpha`` (t quantile on ``df``) excludes a point
    ``distance`` (log scale) away from the truth, when the estimate's standard error is ``se``: the
    noncentral t (the normal with df inf). The far side's tiny share is left out."""
    if se <= 0 or not math.isfinite(se):
        return 0.0 if not math.isfinite(se) else 1.0
    nc = abs(distance) / se
    if math.isinf(df):
        return float(sps.norm.sf(sps.norm.isf(alpha / 2) - nc))
    if df <= 0:
        return 0.0
    return float(sps.nct.sf(sps.t.isf(alpha / 2, df), df, nc))


def _inconclusive_centres(half: float, claim_low: float, claim_high: float) -> list[tuple[float, float]]:
    """Where the centre of a band of half-width ``half`` (log scale) leaves ``verdict_codes`` inconclusive."""
    lo, hi = math.log(claim_low), math.log(claim_high)
    if claim_low <= 1.0 <= claim_high:  # straddling either edge of the claim
        return [(lo - half, lo + half), (hi - half, hi + half)]
    if lo > 0:  # holding 1x and reaching the claim
        return [(lo - half, half)] if lo - half <= half else []
    return [(-half, hi + half)] if -half <= hi + half else []


def decide_probability(value: float, claim_low: float, claim_high: float, se: float, df: float,
                       alpha: float = 0.05) -> float:
    """Probability that a band (level ``alpha``, t quantile on ``df``) reaches a verdict other than inconclusive
    when the true log ratio is ``value`` and its estimate has standard error ``se``: the estimate is normal,
    the variance estimate independent of it (scaled chi-square on ``df``), averaged over 256 quantiles of it."""
    if not (se > 0 and math.isfinite(se)) or df <= 0:
        return 0.0
    q = sps.norm.isf(alpha / 2) if math.isinf(df) else sps.t.isf(alpha / 2, df)
    scales = [1.0] if math.isinf(df) else np.sqrt(sps.chi2.ppf((np.arange(256) + 0.5) / 256, df) / df)
    spans = [(a, b) for s in scales for a, b in _inconclusive_centres(q * se * s, claim_low, claim_high) if b > a]
    if not spans:
        return 1.0
    # the normal's cdf of every end in one call (a call per end was ~1,000 calls a sweep's look), then summed in
    # the order the loop over scales added them: the same float as before
    a, b = np.array(spans, dtype=float).T
    shares = sps.norm.cdf((b - value) / se) - sps.norm.cdf((a - value) / se)
    return float(1.0 - sum(np.atleast_1d(shares).tolist()) / len(scales))


# A replayed sweep (every rung from the store) asks the same inconclusive verdicts the same question, and its answer
# is a search over up to ``limit`` runs, each averaging 256 chi-square quantiles: the one place a cached sweep loaded
# scipy.special (~0.12 s of its ~2 s on a 2-core CPU). So the answers of the default search (``df_at`` None) are kept
# between processes, under scipy's and numpy's versions and this module's code (any edit of it computes them anew),
# a few per process (a simulation's thousands of questions are computed, never written).
ANSWERS_FILE = "repeats-to-decide.json"  # in the harness's cache folder
KEPT_ANSWERS = 256  # the most answers the file keeps
KEPT_ANSWERS_PER_PROCESS = 16
_ANSWERS: dict = {"entries": None, "added": 0}


def repeats_to_decide(measured: Ratio, claim_low: float, claim_high: float, limit: int = 50,
                      df_at: Callable[[int], float] | None = None) -> int | None:
    """:func:`search_repeats`, its answer kept between processes when ``df_at`` is the default (see ANSWERS_FILE)."""
    code = _answers_code()
    if df_at is not None or code is None:
        return search_repeats(measured, claim_low, claim_high, limit, df_at)
    key = repr(("repeats", measured.value, measured.low, measured.high, measured.runs, measured.se, measured.df,
                claim_low, claim_high, limit))
    if _ANSWERS["entries"] is None:
        _ANSWERS["entries"] = read_kept(ANSWERS_FILE, code)
    kept = _ANSWERS["entries"].get(key, "absent")
    if kept is None or type(kept) is int:  # JSON's null: more than ``limit`` runs
        return kept
    answer = search_repeats(measured, claim_low, claim_high, limit)
    if _ANSWERS["added"] < KEPT_ANSWERS_PER_PROCESS:
        _ANSWERS["added"] += 1
        _ANSWERS["entries"] = keep(ANSWERS_FILE, code, {**_ANSWERS["entries"], key: answer}, KEPT_ANSWERS)
    return answer


@functools.cache
def _answers_code() -> str | None:
    """What the kept answers depend on: scipy's and numpy's versions and this module's source (None where it
    cannot be read: nothing is kept then)."""
    try:
        digest = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
    except OSError:
        return None
    return f"{sps.versions()} speedup {digest}"


def search_repeats(measured: Ratio, claim_low: float, claim_high: float, limit: int = 50,
                   df_at: Callable[[int], float] | None = None) -> int | None:
    """Runs per side that would turn an inconclusive band into a verdict in POWER (80%) of sweeps, if the
    ratio held: the band's own standard error scaled to n runs, with the t quantile that n runs will use
    (``decide_probability``).

    ``df_at(n)``: the degrees of freedom at n runs per side; by default they grow in proportion to n - 1
    (a band from one run: a calibration's df plus one per extra run). None when even ``limit`` runs do not."""
    value = math.log(measured.value)
    runs = max(measured.runs, 1)
    se = measured.se
    if not math.isfinite(se):  # a band from elsewhere: read its standard error off its width
        half = (math.log(measured.high) - math.log(measured.low)) / 2
        q = sps.norm.isf(0.025) if math.isinf(measured.df) else sps.t.isf(0.025, measured.df)
        se = half / q
    if df_at is None:
        df_at = _default_df(measured.df, runs)
    for n in range(1, limit + 1):
        if decide_probability(value, claim_low, claim_high, se * math.sqrt(runs / n), df_at(n)) >= POWER:
            return n
    return None


def _default_df(df: float, runs: int) -> Callable[[int], float]:
    if math.isinf(df) or math.isnan(df):
        return lambda n: math.inf
    if runs < 2:  # a calibration's df, plus one per extra round of a pair
        return lambda n: df + n - 1
    return lambda n: df * (n - 1) / (runs - 1)


def floats(values) -> list[float]:
    """A store's list cell (per-step times) as floats; [] when it is missing (None or NaN)."""
    if values is None or (isinstance(values, float) and math.isnan(values)):
        return []
    return [float(v) for v in values]


def finite_number(value) -> float | None:
    """``value`` as a float, or None when it is missing, not a number, NaN or infinite (a store's cell)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None
