"""One sweep's verdicts from its records: the rung x round model at the sweep's last look (no torch).

The table and the sweep loop (``sweep.repeats=auto``) judge a sweep with this one function, so what the loop
stopped on is what the table prints:

* the runs of a busy machine are left out (``blocks.from_records``), and a question left with no run because
  of them says so;
* the calibration is the one stored with the records when the sweep started (``noise_calibration_id``,
  ``noise_cv``, ``noise_df``), so a later calibration never rewrites an old verdict; records older than those
  columns take the one ``calibration.calibration_for`` chooses now, with the ones it skipped and why;
* a sweep of fixed rounds has one look, a plain 95% band (``sequential.fixed``); a ``sweep.repeats=auto``
  sweep (``auto_max_rounds`` set) is read at the level of the look after its last round (``sequential.look``),
  the level its looks were taken at.

docs/statistics.md says why each rule is what it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from harness.analysis.stats import distributions as sps  # scipy.stats's functions, scipy loaded at the first value

from harness.analysis.stats import blocks, calibration, noise_model, sequential, speedup
from harness.analysis.stats import busy as busy_mod
from harness.analysis.stats.busy import busy_reason
from harness.analysis.stats.speedup import Ratio

STORED = "environment, workload and size; chosen when the sweep started"


@dataclass(frozen=True)
class SweepNoise:
    """The calibration a sweep is judged with, whether it was stored with the sweep, and the skipped ones."""

    noise: noise_model.Noise
    stored: bool = False
    notes: tuple[str, ...] = ()

    @property
    def cv(self) -> float | None:
        return self.noise.cv if self.noise.calibrated else None

    @property
    def df(self) -> float:
        return float(self.noise.df) if self.noise.calibrated else 0.0


def stored_noise(records) -> SweepNoise | None:
    """The calibration stored with a sweep's records (None for records older than the ``noise_*`` columns)."""
    if "noise_df" not in records or not records["noise_df"].notna().any():
        return None
    first = records[records["noise_df"].notna()].iloc[0]
    df = float(first["noise_df"])
    if df <= 0 or not first["noise_calibration_id"]:
        return SweepNoise(noise_model.DEFAULT, stored=True)
    noise = noise_model.Noise(cv=float(first["noise_cv"]), df=df, sweep_id=str(first["noise_calibration_id"]),
                              runs=int(round(df)) + 1, match=STORED)
    return SweepNoise(noise, stored=True)


def sweep_noise(frame, records) -> SweepNoise:
    """The stored calibration if the records have one, else the one the store offers now; with the notes of
    every newer calibration skipped (busy, too noisy, made after the sweep started, ...)."""
    choice = calibration.calibration_for(frame, records)
    own = set(records["sweep_id"])  # a calibration's own table is not judged with itself
    stored = stored_noise(records)
    used = stored.noise.sweep_id if stored is not None else choice.noise.sweep_id
    notes = tuple(s.note() for s in choice.skipped if s.sweep_id not in own | {used})
    if stored is None:
        return SweepNoise(choice.noise, False, notes)
    return SweepNoise(stored.noise, True, notes)


def noise_fields(noise: noise_model.Noise) -> dict:
    """The record fields that store a sweep's calibration (``noise_df`` 0: none was fit to use)."""
    if not noise.calibrated:
        return {"noise_calibration_id": "", "noise_cv": None, "noise_df": 0.0}
    return {"noise_calibration_id": noise.sweep_id, "noise_cv": float(noise.cv), "noise_df": float(noise.df)}


@dataclass
class Judgement:
    """A sweep judged at its last look: every answer, the model behind them, what was left out."""

    look: sequential.Look
    model: blocks.BlockFit
    noise: SweepNoise
    busy: dict  # (rung, round) -> reason, for the busy runs left out
    rounds: int  # rounds the sweep ran (a round counts when any rung of it has a record)
    max_rounds: int | None  # the round budget of a sweep.repeats=auto sweep; None for fixed rounds
    answers: dict = field(default_factory=dict)  # question label -> sequential.Answer
    busy_runs: int = 0  # runs of a busy machine (a (rung, round) may have two: one measured again)

    @property
    def level(self) -> float:
        """The two-sided nominal level of the bands (0.05 for fixed rounds; 0.0: no band yet)."""
        return self.look.level

    def ratio(self, new: int, old: int) -> Ratio | None:
        """Rung ``new`` over rung ``old`` at the look's level (NaN bounds when there is no band)."""
        c = blocks.contrast(self.model, new, old)
        return None if c is None else c.ratio(self.level if self.level > 0 else 0.05)

    def measured(self, answer: sequential.Answer) -> Ratio | None:
        """An answer's band; before the first look (one round, no calibration) the estimate with no band."""
        if answer.ratio is not None or answer.built_on is None:
            return answer.ratio
        return self.ratio(answer.question.new, answer.built_on)

    def uncertainty(self, rung: int) -> float | None:
        """Relative half-width of the 95% band of one rung's mean throughput (None with no variance): its runs'
        spread about the rung's level, round effects included (``blocks.level_variance``); a contrast's band
        leaves them out, a rung's own level does not."""
        runs = int(self.model.design.observed[rung].sum()) if rung < self.model.rungs else 0
        var, df = (float(v[0]) for v in blocks.level_variance(self.model))
        if not runs or not df > 0 or not math.isfinite(var):
            return None
        # a 95% band of the level: it describes a rung, it decides nothing, so not at a look's (far wider) level
        return float(math.expm1(sps.t.isf(0.025, df) * math.sqrt(var / runs)))

    @property
    def all_decided(self) -> bool:
        """Every question another round could still decide is decided (``sequential.Look.all_decided`` on the
        answers as the table gives them: a rung whose predecessors were all busy waits for another round)."""
        return all(a.decided for a in self.answers.values() if a.waiting)

    def next_action(self) -> str:
        """``sequential.next_action`` on these answers: "stop: decided", "stop: budget spent" or "another round"."""
        if self.all_decided:
            return "stop: decided"
        return "stop: budget spent" if self.rounds >= (self.max_rounds or self.rounds) else "another round"

    def left_out(self) -> dict:
        """The (rung, round)s whose runs were all busy (not those measured again on a quiet machine)."""
        observed = self.model.design.observed
        return {k: v for k, v in self.busy.items() if not (k[1] < observed.shape[1] and observed[k])}


def rounds_of(records) -> int:
    """Rounds a sweep ran: the highest round with a record, plus one (a record without a round is round 0)."""
    if not len(records) or "round" not in records:
        return 1
    return int(records["round"].fillna(0).max()) + 1


def auto_max_rounds(records) -> int | None:
    """The round budget a ``sweep.repeats=auto`` sweep looked against (None: fixed rounds, or older records)."""
    if "auto_max_rounds" not in records:
        return None
    values = records["auto_max_rounds"].dropna()
    return int(values.max()) if len(values) else None


JUDGED_COLUMNS = ("rung", "round", "status", "samples_per_s", *busy_mod.COLUMNS)  # what judge reads of a row
FRAME_COLUMNS = (*JUDGED_COLUMNS, "auto_max_rounds")  # what judge reads of its frame: a look reads only these


def judge(records, rungs: int, claims: dict, total: tuple[float, float] | None, groups, noise: SweepNoise,
          rounds: int | None = None, max_rounds: int | None = None) -> Judgement:
    """Every question of a sweep of ``rungs`` rungs (``sequential.questions_for``) at its last look.

    ``records``: the sweep's records (a frame); ``claims``: ``{rung: (low, high)}``; ``groups``: the group
    claims (``{first, last, low, high}``), those that do not fit ``rungs`` left out; ``rounds``: the rounds
    so far (default: the records'); ``max_rounds``: the budget of a ``sweep.repeats=auto`` sweep (default:
    the one stored with the records), None for fixed rounds."""
    claims, total, groups = _with_figures(claims, total, groups)
    rounds = rounds or rounds_of(records)
    leaned, why = calibration.for_rounds(noise.noise, rounds)
    if why:
        noise = SweepNoise(leaned, noise.stored, noise.notes + (why,))
    max_rounds = max_rounds if max_rounds is not None else auto_max_rounds(records)
    # once, and only the columns judged (the log table's and the busy rule's): all ~150 as dicts cost ~10 ms a look
    rows = records[[c for c in JUDGED_COLUMNS if c in records]].to_dict("records")
    logs, busy = blocks.from_records(rows, rungs=rungs, rounds=rounds)
    fitting = [g for g in groups if 1 <= int(g["first"]) < int(g["last"]) < rungs]
    questions = sequential.questions_for(rungs, claims, total, fitting)
    if absent_rungs(records, rungs):  # a guide's total measured by its two ends: the last rung over rung 0 as it is
        questions = [replace(q, first=None, last=None) if q.label == "total" else q for q in questions]
    skipped = skipped_rungs(records)
    if max_rounds:
        look = sequential.look(logs, questions, rounds, max(max_rounds, rounds), noise.cv, noise.df, busy=busy,
                               skipped=skipped)
    else:
        look = sequential.fixed(logs, questions, noise.cv, noise.df, busy, skipped)
    model = blocks.fit(logs[:, :rounds], noise.cv, noise.df)
    answers = {a.question.label: _with_busy_predecessor(a, busy, rounds) for a in look.answers}
    busy_runs = sum(1 for r in rows if r.get("status") == "ok" and busy_reason(r))
    return Judgement(look, model, noise, busy, rounds, max_rounds, answers, busy_runs)


def _with_figures(claims: dict, total, groups):
    """The claims a verdict can be judged on: a claim with no figure (the connectomics guide's "minor speedup")
    is reported without a verdict, on every path that judges (the table and the sweep's looks alike)."""
    figures = {k: (c[0], c[1]) for k, c in claims.items() if c[0] is not None and c[1] is not None}
    total = total if total is not None and None not in total[:2] else None
    return figures, total, [g for g in groups if g.get("low") is not None and g.get("high") is not None]


def absent_rungs(records, rungs: int) -> list[int]:
    """The rungs between rung 0 and the last with no record at all in a sweep that has both ends (a guide's total,
    measured by its two ends alone). Nothing of theirs was dropped from the last rung's settings (a sweep drops
    only a rung that ran and failed), so the total is the last rung over rung 0; a rung or group over them is not
    judged."""
    if not len(records) or "rung" not in records:
        return []
    have = {int(r) for r in records["rung"].dropna()}
    if not {0, rungs - 1} <= have:
        return []
    return [r for r in range(1, rungs - 1) if r not in have]


def skipped_rungs(records) -> frozenset[int]:
    """Rungs every run of which was skipped (a knob that cannot act on this device): a group over them is judged
    without them, as the rungs after them are built without them."""
    if not len(records) or "status" not in records:
        return frozenset()
    statuses = records.groupby("rung")["status"].agg(set)
    return frozenset(int(r) for r, s in statuses.items() if s == {"skipped"})


def _with_busy_predecessor(answer: sequential.Answer, busy: dict, rounds: int) -> sequential.Answer:
    """A rung that ran but has nothing to be compared with because every earlier rung's runs were busy gets the
    busy verdict, not "not measured" (the question names no earlier rung: any of them could have been it)."""
    q = answer.question
    if answer.verdict != "not measured" or q.first is not None:
        return answer
    reason = next((why for (rung, r), why in sorted(busy.items()) if rung < q.new and r < rounds), None)
    if reason is None:
        return answer
    return sequential.Answer(q, None, f"no verdict: machine busy ({reason}): not trustworthy", False, True, None)


def verdict_text(answer: sequential.Answer) -> str:
    """An answer's verdict as the table prints it: an inconclusive claim with the repeats that would decide it."""
    q = answer.question
    if answer.verdict == "inconclusive" and answer.ratio is not None and q.claim is not None:
        return speedup.verdict(answer.ratio, *q.claim)
    return answer.verdict


def open_questions(judgement: Judgement) -> list[str]:
    """The questions another round could still decide, each with what it says now."""
    return [f"{a.question.label}: {verdict_text(a)}" for a in judgement.answers.values()
            if a.waiting and not a.decided]
