"""``sweep.repeats=auto``: rounds until every verdict is decided, without the looks inflating the error.

After each round the rung x round model (``harness.analysis.stats.blocks``) is refitted and every question of
the sweep (each rung with a claim against the rung it was built on, rungs without a claim, the total,
group claims) is asked again. Looking after every round at a plain 95% band would give a no-change rung
up to R chances to look like a change; instead each look's band is a *repeated confidence interval*
(Jennison and Turnbull): its level comes from an alpha-spending function, so that the bands of ALL looks
hold the truth together in 95% of sweeps. Any verdict read from any look, at whatever round the sweep
stops, is then wrong in at most 5% of sweeps, and the stopping rule itself can be anything.

* Spending: Lan-DeMets, O'Brien-Fleming type by default (2 - 2 Phi(z / sqrt(t)) at information fraction
  t = rounds / budget): it spends little early, so the last look's band is nearly a fixed sweep's and the
  budget keeps its power; clear effects still stop after 3-4 rounds. Pocock type (alpha ln(1 + (e - 1) t))
  stops clear effects half a round sooner but loses a fifth of the power at the budget on a noisy
  machine (``spending="pocock"``). docs/statistics.md has the simulations behind the choice.
* Boundaries: the joint normal law of the look statistics (independent increments), integrated on a
  grid look by look (Armitage, McPherson and Rowe); the nominal level of each look then sets a t quantile
  on that look's degrees of freedom.
* Order: serpentine (rungs forward in even rounds, backward in odd ones), so a slow drift of the
  machine over the sweep cancels in pairs of rounds instead of piling up along the ladder.
"""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
from harness.analysis.stats import distributions as sps  # scipy.stats's functions, scipy loaded at the first value

from harness.analysis.stats import blocks, speedup
from harness.fileio import keep, read_kept

ALPHA = 0.05
SPENDING = ("obrien-fleming", "pocock")
DEFAULT_SPENDING = "obrien-fleming"
MIN_EFFECT = 0.03  # a rung without a claim is decided once its band excludes 1x or lies within +-3%
_GRID = 401


def serpentine_order(rungs: Sequence[int] | int, round_: int) -> list[int]:
    """The rungs in the order round ``round_`` (0-based) measures them: as given in even rounds, reversed in odd."""
    order = list(range(rungs)) if isinstance(rungs, int) else list(rungs)
    return order if round_ % 2 == 0 else order[::-1]


def spent(t: float, alpha: float = ALPHA, spending: str = DEFAULT_SPENDING) -> float:
    """The error allowed up to information fraction ``t`` (0..1): Lan-DeMets O'Brien-Fleming or Pocock type."""
    if spending not in SPENDING:
        raise ValueError(f"spending={spending!r}: valid choices are {', '.join(SPENDING)}")
    t = min(max(t, 0.0), 1.0)
    if t == 0:
        return 0.0
    if spending == "pocock":
        return alpha * math.log(1 + (math.e - 1) * t)
    return float(2 * sps.norm.sf(sps.norm.isf(alpha / 2) / math.sqrt(t)))


@functools.lru_cache(maxsize=512)
def nominal_levels(fractions: tuple[float, ...], alpha: float = ALPHA,
                   spending: str = DEFAULT_SPENDING) -> tuple[float, ...]:
    """Two-sided nominal level of each look at information ``fractions`` (increasing, last <= 1) such that a
    statistic with no effect crosses some look's boundary by look l with probability spent(t_l). Kept between
    processes (``LEVELS_FILE``): the same numbers, without loading scipy.optimize again."""
    question = repr((tuple(float(t) for t in fractions), float(alpha), spending))
    kept = read_kept(LEVELS_FILE, _code_digest())
    levels = kept.get(question)
    if not (isinstance(levels, list) and len(levels) == len(fractions) and all(type(v) is float for v in levels)):
        kept[question] = list(_nominal_levels(fractions, alpha, spending))
        levels = keep(LEVELS_FILE, _code_digest(), kept, KEPT_QUESTIONS)[question]
    return tuple(levels)


# Every sweep of a ladder asks for the same few boundaries (a phase2 sweep's looks: fractions 2/6 .. 6/6), and the
# first one of a process loads scipy.optimize (~0.13 s of CPU on a 2-core AMD EPYC) for the root finder. So they are
# kept in a small file of the harness's cache folder, under the digest of the code that computes them (this module
# and the distributions) and of scipy's and numpy's versions: an edit to either, or another scipy, computes them anew.
LEVELS_FILE = "look-levels.json"
KEPT_QUESTIONS = 256  # the most boundaries the file keeps (a sweep asks a handful)


@functools.lru_cache(maxsize=1)
def _code_digest() -> str:
    import scipy

    digest = hashlib.sha256(f"{scipy.__version__} {np.__version__}".encode())
    for source in (__file__, sps.__file__):
        digest.update(Path(source).read_bytes())
    return digest.hexdigest()[:16]


def _nominal_levels(fractions: tuple[float, ...], alpha: float, spending: str) -> tuple[float, ...]:
    """:func:`nominal_levels`, computed."""
    levels, density, grid, weights, previous_t, previous_spent = [], None, None, None, 0.0, 0.0
    for t in fractions:
        target = spent(t, alpha, spending) - previous_spent
        if t <= previous_t or target <= 0:
            levels.append(0.0)
            continue
        if density is None:  # first look: the plain normal quantile
            c = float(sps.norm.isf(target / 2))
        else:
            c = _boundary(grid, weights * density, t - previous_t, math.sqrt(t), target)
        levels.append(float(2 * sps.norm.sf(c)))
        density, grid, weights = _advance(grid, density, weights, previous_t, t, c)
        previous_t, previous_spent = t, previous_spent + target
    return tuple(levels)


def _boundary(grid: np.ndarray, mass: np.ndarray, step: float, scale: float, target: float) -> float:
    """The z boundary c at which the probability of first crossing at this look equals ``target``."""
    sd = math.sqrt(step)

    def excess(c: float) -> float:
        edge = c * scale
        out = sps.norm.cdf((-edge - grid) / sd) + sps.norm.sf((edge - grid) / sd)
        return float(mass @ out) - target

    if excess(0.0) <= 0:  # everything left would cross: nothing is left to spend here
        return 0.0
    from scipy import optimize  # here, not at the top: scipy.optimize loads in ~0.2 s, and only a look's bands need it

    return float(optimize.brentq(excess, 0.0, 40.0, xtol=1e-10))


def _advance(grid, density, weights, previous_t: float, t: float, c: float):
    """The sub-density of the score S_t on (-c sqrt(t), c sqrt(t)) (paths that have not crossed yet)."""
    edge = c * math.sqrt(t)
    new_grid = np.linspace(-edge, edge, _GRID)
    new_weights = np.full(_GRID, new_grid[1] - new_grid[0])
    new_weights[[0, -1]] /= 2  # trapezoid
    if density is None:
        return sps.norm.pdf(new_grid, scale=math.sqrt(t)), new_grid, new_weights
    sd = math.sqrt(t - previous_t)
    kernel = np.exp(-0.5 * ((new_grid[:, None] - grid[None, :]) / sd) ** 2) / (sd * math.sqrt(2 * math.pi))
    return kernel @ (weights * density), new_grid, new_weights


def look_fractions(rounds: int, max_rounds: int, calibrated: bool) -> tuple[float, ...]:
    """Information fractions of the looks so far: one per round from the first round that has a variance
    (round 1 with a calibration, else round 2) up to ``rounds``."""
    first = 1 if calibrated else 2
    return tuple(r / max_rounds for r in range(first, min(rounds, max_rounds) + 1))


def look_level(rounds: int, max_rounds: int, calibrated: bool, alpha: float = ALPHA,
               spending: str = DEFAULT_SPENDING) -> float:
    """The two-sided nominal level of the band after ``rounds`` rounds of a ``max_rounds`` budget (0.0 before
    the first look: no band yet)."""
    fractions = look_fractions(rounds, max_rounds, calibrated)
    return nominal_levels(fractions, alpha, spending)[-1] if fractions else 0.0


# ------------------------------------------------------------------------------------------
# questions and their answers at one look


@dataclass(frozen=True)
class Question:
    """What the sweep must decide: rung ``new`` over rung ``old`` (None: the last earlier rung that ran),
    against a claimed range, or (no claim) whether it changed by more than ``min_effect`` either way.
    ``first``..``last``: the rungs a total or group claim spans (all must run for a verdict)."""

    label: str
    new: int
    old: int | None = None
    claim: tuple[float, float] | None = None
    first: int | None = None
    last: int | None = None


@dataclass(frozen=True)
class Answer:
    question: Question
    ratio: speedup.Ratio | None
    verdict: str
    decided: bool
    waiting: bool = True  # another round could decide it (False: a rung it needs never ran ok, e.g. out of memory)
    built_on: int | None = None  # the rung it was measured over (a rung's previous ok rung, or the claim's)


@dataclass(frozen=True)
class Look:
    """One look: the bands at the look's corrected level and whether each question is decided."""

    rounds: int
    max_rounds: int
    level: float  # two-sided nominal level of this look's bands (their joint coverage over looks is 95%)
    answers: tuple[Answer, ...]

    @property
    def all_decided(self) -> bool:
        """Every question that another round could still decide is decided."""
        return all(a.decided for a in self.answers if a.waiting)


def decided(ratio: speedup.Ratio | None, claim: tuple[float, float] | None, min_effect: float = MIN_EFFECT) -> bool:
    """Whether a band settles its question: a claim's verdict other than inconclusive (too wide and no band
    are not decided); without a claim, a band that excludes 1x or lies within +-``min_effect``."""
    if ratio is None:
        return False
    code = _codes(np.array([ratio.low]), np.array([ratio.high]), claim, min_effect)
    return bool(code[0] in DECIDED)


FASTER, SLOWER, NO_CHANGE = 100, 101, 102  # the answers of a question without a claim
DECIDED = set(speedup.DECIDED_CODES) | {FASTER, SLOWER, NO_CHANGE}
_NO_CLAIM_TEXT = {FASTER: "faster", SLOWER: "slower", speedup.INCONCLUSIVE: "undecided",
                  speedup.TOO_WIDE_CODE: "too wide to say", speedup.NO_BAND: "no band yet"}


def _codes(low: np.ndarray, high: np.ndarray, claim, min_effect: float) -> np.ndarray:
    if claim is not None:
        return speedup.verdict_codes(low, high, *claim)
    codes = np.where(low > 1.0, FASTER, np.where(high < 1.0, SLOWER, speedup.INCONCLUSIVE))
    inside = (low >= 1 / (1 + min_effect)) & (high <= 1 + min_effect)
    codes = np.where(inside, NO_CHANGE, codes)
    with np.errstate(invalid="ignore", divide="ignore"):
        codes = np.where(high > speedup.TOO_WIDE * low, speedup.TOO_WIDE_CODE, codes)
    return np.where(np.isnan(low) | np.isnan(high), speedup.NO_BAND, codes)


def judge(model: blocks.BlockFit, questions: Sequence[Question], level: float,
          min_effect: float = MIN_EFFECT, skipped: frozenset[int] = frozenset()) -> tuple[np.ndarray,
                                                                                    list[blocks.Contrast | None]]:
    """Codes (trials x questions) of every question at two-sided nominal ``level``, and the contrasts.
    A question whose rungs did not all run ok, or with no band yet, gets NO_BAND (not decided); a rung ``skipped``
    (its knob cannot act on this device: every run of it skipped) does not stop a span's question."""
    ran = set(np.nonzero(model.design.observed.any(axis=1))[0].tolist()) | set(skipped)
    codes = np.full((model.logs.shape[0], len(questions)), speedup.NO_BAND)
    contrasts: list[blocks.Contrast | None] = []
    for i, q in enumerate(questions):
        old = blocks.previous_ran(model, q.new) if q.old is None else q.old
        span = q.first is not None and speedup.span_status(ran, q.first, q.last) is not None
        c = None if old is None or span or q.new not in ran else blocks.contrast(model, q.new, old)
        contrasts.append(c)
        if c is not None and level > 0:
            low, high = c.bounds(level)
            codes[:, i] = _codes(low, high, q.claim, min_effect)
    return codes, contrasts


def look(logs, questions: Sequence[Question], rounds: int, max_rounds: int, calibration_cv: float | None = None,
         calibration_df: float = 0.0, alpha: float = ALPHA, spending: str = DEFAULT_SPENDING,
         min_effect: float = MIN_EFFECT, busy: dict | None = None, skipped: frozenset[int] = frozenset(),
         one_look: bool = False) -> Look:
    """Refit one sweep's ``logs[rung, round]`` after ``rounds`` rounds and answer every question at the look's
    corrected level (docs/statistics.md: why looking after every round keeps the error at ``alpha``); ``one_look``:
    the only look of the sweep, at plain ``alpha``.

    ``logs`` and ``busy`` as ``blocks.from_records`` gives them: runs of a busy machine are already out of
    ``logs``; a question left with no run because of them says so instead of "not measured"."""
    model = blocks.fit(np.asarray(logs, dtype=float)[:, :rounds], calibration_cv, calibration_df)
    calibrated = calibration_cv is not None and calibration_df > 0
    level = look_level(rounds, max_rounds, calibrated, alpha, spending)
    if one_look:  # no earlier look spent any error: the band is a plain one (none before the first band)
        level = alpha if look_fractions(rounds, rounds, calibrated) else 0.0
    codes, contrasts = judge(model, questions, level, min_effect, skipped)
    ran = set(np.nonzero(model.design.observed.any(axis=1))[0].tolist()) | set(skipped)
    answers = []
    for q, code, c in zip(questions, codes[0], contrasts):
        ratio = c.ratio(level) if c is not None and level > 0 else None
        missing = speedup.span_status(ran, q.first, q.last) if q.first is not None else None
        busy_now = _busy_reason(q, busy or {}, rounds)
        text = _text(q, int(code), ratio, c, busy_now, missing)
        answers.append(Answer(q, ratio, text, int(code) in DECIDED, c is not None or busy_now is not None,
                              c.old if c is not None else None))
    return Look(rounds, max_rounds, level, tuple(answers))


def fixed(logs, questions: Sequence[Question], calibration_cv: float | None = None, calibration_df: float = 0.0,
          busy: dict | None = None, skipped: frozenset[int] = frozenset()) -> Look:
    """A sweep with a fixed number of rounds (``sweep.repeats=N``): one look, plain 95% bands."""
    rounds = np.asarray(logs).shape[-1]
    return look(logs, questions, rounds, rounds, calibration_cv, calibration_df, busy=busy, skipped=skipped,
                one_look=True)


def questions_for(rungs: int, claims: dict, total: tuple[float, float] | None = None, groups=()) -> list[Question]:
    """The questions of a ladder of ``rungs`` rungs: every rung after the baseline over the rung it was built on
    (against its claim, ``claims[rung] = (low, high)``, if any), the total (last rung over rung 0, against
    ``total``; judged only when every rung ran) and each group claim (``{first, last, low, high}``: its last
    rung over the rung before it, judged only when all of those ran; ``low`` None for a claim with no figure)."""
    out = [Question(f"rung {k}", k, None, claims.get(k)) for k in range(1, rungs)]
    if rungs > 1:
        out.append(Question("total", rungs - 1, 0, total, 0, rungs - 1))
    for g in groups:
        first, last = int(g["first"]), int(g["last"])
        if not 1 <= first < last < rungs:
            raise ValueError(f"group claim over rungs {first}-{last}: need 1 <= first < last < {rungs} (the rungs)")
        claim = (float(g["low"]), float(g["high"])) if g.get("low") is not None else None  # None: no figure
        out.append(Question(f"rungs {first}-{last}", last, first - 1, claim, first - 1, last))
    return out


def _busy_reason(q: Question, busy: dict, rounds: int) -> str | None:
    rungs = {q.new} | ({q.old} if q.old is not None else set())
    if q.first is not None:
        rungs |= set(range(q.first, q.last + 1))
    return next((reason for (rung, r), reason in sorted(busy.items()) if rung in rungs and r < rounds), None)


def _text(q: Question, code: int, ratio: speedup.Ratio | None, c: blocks.Contrast | None, busy: str | None,
          missing: str | None) -> str:
    if c is None:
        if busy:
            return f"no verdict: machine busy ({busy}): not trustworthy"
        return missing or "not measured"
    if q.claim is None:
        return f"no change beyond {MIN_EFFECT:.0%}" if code == NO_CHANGE else _NO_CLAIM_TEXT[code]
    if code == speedup.INCONCLUSIVE:
        return "inconclusive"
    return speedup.verdict(ratio, *q.claim) if ratio is not None else speedup.NO_BAND_TEXT


def next_action(current: Look) -> str:
    """'stop: decided' when every question is decided, 'stop: budget spent' after the last round of the budget,
    else 'another round' (runs of a busy machine are left out of ``logs`` by the caller, so they never count)."""
    if current.all_decided:
        return "stop: decided"
    if current.rounds >= current.max_rounds:
        return "stop: budget spent"
    return "another round"
