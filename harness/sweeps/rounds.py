"""How many rounds a sweep runs, and in which order: ``sweep.repeats=N``, or ``auto``.

* **Order.** Serpentine (``sequential.serpentine_order``): rungs forward in even rounds, backward in odd ones,
  so a slow drift of the machine cancels in every pair of rounds instead of piling up along the ladder.
* **auto.** After every round the sweep's records are read back and judged as the table will judge them
  (``harness.analysis.stats.sweepstats``: the rung x round model, its look's band from O'Brien-Fleming alpha
  spending over ``sweep.max_repeats`` rounds); the sweep stops when every verdict another round could decide
  is decided, after ``max_repeats`` rounds, or before a round that would end past ``sweep.budget_min`` (and no
  run starts once it is spent: ``harness.sweeps.budget``).
  Rounds taken from the store count as rounds done: a sweep already measured in full adds nothing.
* **The calibration** is chosen once, when the sweep starts (``calibration.choose_calibration``: the same
  environment, workload and size, fit, made before now), and stored with every record, so a later
  calibration never rewrites an old verdict; a resumed sweep keeps the one it stored.

docs/statistics.md says why.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

from harness.analysis.stats import calibration, noise_model, sequential, sweepstats
from harness.store import load_runs
from harness.sweeps import budget
from harness.sweeps import rungs as rungs_mod
from harness.run.parent import env as env_mod


def clock() -> float:
    """The sweep's clock (seconds; a test fakes it)."""
    return time.monotonic()


@dataclass
class RoundPlan:
    """The rounds of one sweep and its clock: ``budget_s`` (``sweep.budget_min``) bounds a repeats=auto sweep, and a
    repeats=N one whose user gave it (``harness.sweeps.budget``)."""

    auto: bool
    max_rounds: int
    budget_s: float | None = None
    started: float = field(default_factory=lambda: clock())
    fresh_s: float = 0.0  # seconds spent on rungs measured (not copied from the store), busy runs again included
    fresh_turns: int = 0  # rungs of a round that measured something

    @staticmethod
    def of(ctx: rungs_mod.SweepContext) -> "RoundPlan":
        budget = 60.0 * float(ctx.budget_min)
        if ctx.repeats == "auto":
            return RoundPlan(True, int(ctx.max_repeats), budget)
        return RoundPlan(False, int(ctx.repeats), budget if "sweep.budget_min" in ctx.user_keys else None)

    def measured(self, seconds: float, again: bool = False) -> None:
        """A run was measured (not copied): its time tells how long the next round will take; ``again``: a busy
        run's second measurement, part of the same rung's turn."""
        self.fresh_s += seconds
        self.fresh_turns += not again

    def round_estimate(self, rungs: int) -> float | None:
        """Seconds the next round of ``rungs`` rungs should take, from the runs measured so far (None before any)."""
        return rungs * self.fresh_s / self.fresh_turns if self.fresh_turns else None

    def refusal(self, rungs: int, now: float | None = None) -> str:
        """Why the next round must not start ("" when it may): it would end past the budget."""
        next_round = self.round_estimate(rungs)
        if self.budget_s is None or next_round is None:
            return ""
        spent = (clock() if now is None else now) - self.started
        if spent + next_round <= self.budget_s:
            return ""
        return (f"stop: time budget spent (another round would take ~{next_round / 60:.1f} min after "
                f"{spent / 60:.1f} of sweep.budget_min={self.budget_s / 60:g}; "
                f"sweep.budget_min={budget.give(spent + next_round)} would let it start)")

    def round_line(self, round_: int, rungs: int) -> str:
        """What is said before round ``round_`` (from 0) after the first: its estimate and what is left."""
        left = (f"; {max(0.0, self.budget_s - (clock() - self.started)) / 60:.1f} of sweep.budget_min="
                f"{self.budget_s / 60:g} left" if self.budget_s is not None else "")
        estimate = self.round_estimate(rungs)
        if estimate is None:
            return ""
        return f"round {round_ + 1}: ~{estimate / 60:.1f} min, estimated from the runs measured so far{left}"

    def run_refusal(self, label: str) -> str:
        """Why the run ``label`` names must not start ("" when it may): the budget is spent."""
        spent = clock() - self.started
        if self.budget_s is None or spent < self.budget_s:
            return ""
        return (f"stop: sweep.budget_min={self.budget_s / 60:g} spent ({spent / 60:.1f} min) before {label}: what "
                f"is measured is kept; give a larger sweep.budget_min, or {budget.FEWER_STEPS}")


def order(rungs: list, round_: int) -> list:
    """The rungs in the order round ``round_`` measures them (serpentine)."""
    return sequential.serpentine_order(rungs, round_)


def with_calibration(ctx: rungs_mod.SweepContext, machine) -> tuple[rungs_mod.SweepContext, noise_model.Noise]:
    """The context with the fields every record of the sweep stores: its calibration (kept from the sweep's own
    records when it resumes) and, for repeats=auto, the round budget its looks spend alpha over."""
    noise = _stored(ctx) or _chosen(ctx, machine)
    fields = dict(sweepstats.noise_fields(noise))
    fields["auto_max_rounds"] = int(ctx.max_repeats) if ctx.repeats == "auto" else None
    return dataclasses.replace(ctx, record_fields=tuple(fields.items())), noise


def _stored(ctx: rungs_mod.SweepContext) -> noise_model.Noise | None:
    try:
        mine = load_runs(ctx.results_dir, columns=["noise_calibration_id", "noise_cv", "noise_df"],
                         where={"sweep_id": ctx.sweep_id})
    except ValueError:  # no results folder yet
        return None
    stored = sweepstats.stored_noise(mine) if len(mine) else None
    return stored.noise if stored is not None else None


def _chosen(ctx: rungs_mod.SweepContext, machine) -> noise_model.Noise:
    cfg = rungs_mod.rung_config(ctx, 0, machine)
    return calibration.calibration_now(ctx.results_dir, env_mod.environment_key(cfg.device), cfg.workload.name,
                                       cfg.size)


def look(ctx: rungs_mod.SweepContext, noise: noise_model.Noise, rounds: int,
         max_rounds: int) -> tuple[sweepstats.Judgement, str]:
    """The sweep judged from its stored records after ``rounds`` rounds, and what to do next
    (``sequential.next_action``: "another round", "stop: decided" or "stop: budget spent")."""
    ladder = ctx.ladder
    # the columns judge reads, not all ~150: the frame of a sweep's records cost ~30 ms a look
    records = load_runs(ctx.results_dir, columns=list(sweepstats.FRAME_COLUMNS), where={"sweep_id": ctx.sweep_id})
    records = records[records["round"].fillna(0) < rounds]
    claims = {r.index: (r.claim.low, r.claim.high) for r in ladder.rungs if r.claim is not None}
    total = (ladder.total_claim.low, ladder.total_claim.high) if ladder.total_claim is not None else None
    groups = [{"first": g.first, "last": g.last, "low": g.claim.low, "high": g.claim.high}
              for g in ladder.group_claims]
    judgement = sweepstats.judge(records, len(ladder.rungs), claims, total, groups, sweepstats.SweepNoise(noise),
                                 rounds=rounds, max_rounds=max_rounds)
    return judgement, judgement.next_action()


def look_line(judgement: sweepstats.Judgement, action: str) -> str:
    """One line after a look: how many verdicts are decided, at what level, and what comes next."""
    waiting = [a for a in judgement.answers.values() if a.waiting]
    decided = sum(a.decided for a in waiting)
    level = (f"bands at {1 - judgement.level:.2%}" if judgement.level > 0
             else "no band yet (one round and no calibration)")
    line = f"after round {judgement.rounds}: {decided} of {len(waiting)} verdicts decided ({level}): {action}"
    still = sweepstats.open_questions(judgement)
    return line + (f"; open: {'; '.join(still)}" if still and action != "another round" else "")
