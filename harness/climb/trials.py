"""The climb's measurements: a candidate against the incumbent, each run in a fresh process or copied from the
store, every run stored as a record of the climb's sweep (ladder ``climb``). A run made while the machine was busy
(``harness.analysis.stats.busy``) is measured again before anything is decided on it."""

from __future__ import annotations

import dataclasses
import time

from rich.markup import escape

from harness import config as config_mod
from harness.climb.ascent import Budget, BudgetSpent, Measured
from harness.records.sinks import Pipeline
from harness.session.events import Display
from harness.session import runner as session_runner
from harness.store import RunRecord
from harness.config import ladder as ladder_mod
from harness.sweeps import rungs as sweep_mod
from harness.analysis.stats import noise_model, speedup
from harness.analysis.stats.busy import busy_reason

LADDER_NAME = "climb"  # the `ladder` of every record a climb stores
SEARCH = "fit search"  # the role of a run of the search for the largest batch that fits
KILL_MARGIN_S = 5.0  # a run's timeout ends this long before the budget does (killing it takes a moment)


def trial_ladder(workload: str, changes: list[tuple[str, object]]) -> ladder_mod.Ladder:
    """An in-memory ladder: the start, then ``changes`` one rung each (what a trial's settings are built from)."""
    rungs = (ladder_mod.Rung(0, ""),) + tuple(ladder_mod.Rung(i, k, v) for i, (k, v) in enumerate(changes, start=1))
    return ladder_mod.Ladder(name=LADDER_NAME, description="", guide="", workload=workload, base={}, rungs=rungs)


class Trials:
    """Measures a candidate against the incumbent: fresh processes (or cached copies), stored records."""

    def __init__(self, ctx: sweep_mod.SweepContext, machine, env: dict, env_key: str, budget: Budget,
                 repeats: int, display: Display):
        self.ctx, self.machine, self.env, self.env_key = ctx, machine, env, env_key
        self.budget, self.repeats, self.display = budget, repeats, display
        self.used: set[str] = set()  # runs this climb has used: no run counts twice
        self.busy: list[str] = []  # why runs were not trustworthy (``busy.busy_reason``), each measured again

    def compare(self, accepted, candidate, step: int, again: bool = False, whole: bool = False) -> Measured:
        """``climb.repeats`` rounds; the candidate first in round 0 (a candidate that cannot run costs one run),
        then the order alternates (ABBA), so that a slow drift of the machine favours neither side. A candidate
        of two changes (checkpointing to fit a larger batch) also measures the first change alone: the
        ladder the climb writes has a rung for it, and re-running that ladder must find it in the store.
        ``again``: an accepted candidate measured once more (rounds after the first ``climb.repeats``), with
        runs other than those that accepted it: the band the ladder claims. ``whole``: ``candidate`` is every change
        the climb kept, measured as one against the start (``final``); no change is measured alone. Until then,
        each run keeps time for that check (2 x ``climb.repeats`` runs) once a change was accepted."""
        self.budget.reserve_runs = 0 if whole or not accepted else 2 * self.repeats
        roles = ["candidate"] + (["enabled"] if len(candidate) > 1 and not whole else []) + ["incumbent"]
        changes = {"candidate": accepted + list(candidate), "enabled": accepted + list(candidate[:-1]),
                   "incumbent": accepted}
        records: dict[str, list[RunRecord]] = {role: [] for role in roles}
        cached, busy, first = 0, "", self.repeats if again else 0
        for round_ in range(first, first + self.repeats):
            for role in (roles if (round_ - first) % 2 == 0 else roles[::-1]):
                try:
                    record, how, still = self._trustworthy(changes[role], step, role, round_,
                                                           _label_of(role, candidate))
                except ValueError as exc:  # settings that do not fit together: nothing ran
                    return _measured(records, cached, "skipped", str(exc))
                except BudgetSpent as exc:
                    done = sum(map(len, records.values()))
                    if not done:
                        raise
                    raise BudgetSpent(f"{exc}; {done} of {len(roles) * self.repeats} runs of this step "
                                      "are stored, and a re-run takes them from the store") from None
                records[role].append(record)
                cached += how == "cached"
                busy = busy or still
                if record.status != "ok":
                    failed = {"incumbent" if role == "incumbent" else "candidate": record.status}
                    return _measured(records, cached, failed.get("candidate", "ok"), _last_line(record.error),
                                     failed.get("incumbent", "ok"))
        return _measured(records, cached, "ok", "", busy=busy)

    def again(self, accepted, candidate, step: int) -> Measured:
        """An accepted candidate measured once more (``compare(..., again=True)``)."""
        return self.compare(accepted, candidate, step, again=True)

    def final(self, accepted, candidate, step: int) -> Measured:
        """The start against the best (``candidate``: every accepted change), side by side, at the end."""
        self.display.say(f"step {step}: the start and the best, measured side by side")
        return self.compare(accepted, candidate, step, whole=True)

    def search_run(self, changes, size: int) -> str:
        """One size of the search for the largest batch that fits (``harness.session.probe``): ``changes`` over the
        start with ``batch_size=size``, a fresh process (or a stored run a re-run replays); its status. Its record is
        no rung of the climb's table, and no comparison uses it (their rounds interleave candidate and incumbent)."""
        record, _ = self.trial(list(changes) + [("batch_size", size)], 0, SEARCH, 0, f"batch_size={size} (fit search)")
        return record.status

    def _trustworthy(self, changes, step: int, role: str, round_: int, change: str) -> tuple[RunRecord, str, str]:
        """``trial``; a run of a busy machine measured again, once (a run of the store this climb has not used may
        stand in, so a climb run again replays): the record kept, how it was had, why it is still not trustworthy."""
        record, how = self.trial(changes, step, role, round_, change)
        why = busy_reason(record) if record.status == "ok" else None
        if not why or not self.ctx.remeasure_busy:
            return record, how, why or ""
        self.display.say(f"{_label(step, role, round_, self.repeats, change)}: machine busy ({escape(why)}): "
                         "not trustworthy; measuring it again")
        record, how = self.trial(changes, step, role, round_, change)
        return record, how, (busy_reason(record) or "") if record.status == "ok" else ""

    def trial(self, changes, step: int, role: str, round_: int, change: str) -> tuple[RunRecord, str]:
        """One run of ``changes`` over the start: a cached copy if the store has an unused one, else measured.
        Its record is rung 2s-2 of the climb's sweep for the incumbent of step s, 2s-1 for the candidate, and
        no rung for an enabling change measured alone (it is not a comparison of the table)."""
        ctx = dataclasses.replace(self.ctx, ladder=trial_ladder(self.ctx.ladder.workload, changes))
        cfg = sweep_mod.rung_config(ctx, len(changes), self.machine, round_=round_)
        rung = {"incumbent": 2 * (step - 1), "candidate": 2 * step - 1}.get(role)
        fields = dict(sweep_id=ctx.sweep_id, ladder=LADDER_NAME, rung=rung, round=round_, change=change,
                      **dict(ctx.record_fields))
        asked = session_runner.ask(cfg, self._cached, (self.env, self.env_key))  # each question once per run
        if asked.original is not None:
            record = session_runner.act(cfg, asked, fields, self._pipeline()).record
            self.used |= {asked.original.run_id, record.run_id}
            self._print(record, "cached", step, role, round_, change)
            return record, "cached"
        return self._measure(cfg, asked, fields, step, role, round_, change), "measured"

    def _cached(self, cfg: config_mod.RunConfig, env_key: str) -> RunRecord | None:
        """The oldest original of these settings this climb has not used (a climb run again replays in order)."""
        if sweep_mod.debug_active(cfg):
            return None
        return sweep_mod.lookup_cached(self.ctx.results_dir, config_mod.config_hash(cfg), env_key, self.used,
                                       oldest=True)

    def _pipeline(self) -> Pipeline:
        return Pipeline.to_store(self.ctx.results_dir, *self.ctx.sinks)

    def _measure(self, cfg: config_mod.RunConfig, asked: session_runner.Asked, fields: dict, step: int, role: str,
                 round_: int, change: str) -> RunRecord:
        compiles, key = cfg.compile != "off", config_mod.config_hash(cfg)
        if not asked.reason:  # a knob that cannot act here is recorded at once, for free
            refusal = self.budget.refusal(key, compiles, time.monotonic())
            if refusal:
                raise BudgetSpent(refusal)
            cfg.timeout_s = min(cfg.timeout_s, max(self.budget.left(time.monotonic()) - KILL_MARGIN_S, 1.0))
        began = time.monotonic()
        with self.display.progress(_label(step, role, round_, self.repeats, change)) as progress:
            record = session_runner.act(cfg, asked, fields, self._pipeline(), (self.env, self.env_key),
                                        progress.update).record
        self.used.add(record.run_id)
        if record.status != "skipped":
            self.budget.record(key, time.monotonic() - began, compiles)
        self._print(record, "not run" if record.status == "skipped" else "measured", step, role, round_, change)
        if record.status == "timeout" and self.budget.left(time.monotonic()) <= KILL_MARGIN_S + 1:
            raise BudgetSpent("a run was stopped at the end of the budget")
        return record

    def _print(self, record: RunRecord, how: str, step: int, role: str, round_: int, change: str) -> None:
        why = busy_reason(record) if record.status == "ok" else None
        if why:
            self.busy.append(why)
        label = _label(step, role, round_, self.repeats, change)
        if record.status == "ok":
            self.display.say(f"{label}: ok ({how}) {record.samples_per_s:.2f} samples/s")
        else:
            self.display.say(f"{label}: {record.status} ({how}) {escape(_last_line(record.error)[:160])}")


def _label_of(role: str, candidate) -> str:
    """The ``change`` a record of this role carries."""
    text = [f"{k}={ladder_mod.format_value(v)}" for k, v in candidate]
    if role == "incumbent":
        return "incumbent"
    if role == "enabled":
        return f"{', '.join(text[:-1])} (to fit {text[-1]})"
    return ", ".join(text)


def _measured(records: dict, cached: int, status: str, reason: str, incumbent_status: str = "ok",
              busy: str = "") -> Measured:
    def runs(recs: list[RunRecord]) -> noise_model.Runs:  # as noise_model.runs_of reads them from the store
        ok = [r for r in recs if r.status == "ok" and r.samples_per_s and r.samples_per_s > 0]
        within = [u for u in (speedup.within_run_uncertainty(r.step_ms) for r in ok if r.step_ms) if u is not None]
        return noise_model.Runs([float(r.samples_per_s) for r in ok], within)

    enabled = runs(records["enabled"]) if "enabled" in records else None
    return Measured(status, runs(records["candidate"]), runs(records["incumbent"]), reason, cached, enabled,
                    incumbent_status, busy)


def _last_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[-1] if lines else ""


def _label(step: int, role: str, round_: int, repeats: int, change: str) -> str:
    if role == SEARCH:
        return escape(f"[{SEARCH}] {change}")
    again = " again" if round_ >= repeats else ""  # an accepted candidate measured once more
    return escape(f"[step {step}, {role}{again} {round_ % repeats + 1}/{repeats}] {change}")

