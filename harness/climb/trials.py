"""The climb's measurements: one run at a time, in a fresh process or copied from the store, every run stored as a
record of the climb's sweep (ladder ``climb``); and what a comparison's runs say together (``measured``). Which
runs a comparison makes, in which order, and a busy run measured again, are the climb's policy
(``harness.climb.policy``) over the session engine."""

from __future__ import annotations

import collections
import dataclasses
import time
from dataclasses import dataclass

from rich.markup import escape

from harness import config as config_mod
from harness.climb.ascent import Budget, BudgetSpent, Measured
from harness.session import engine
from harness.session import cache as cache_mod
from harness.session.cache import CacheRule
from harness.session.events import Events
from harness.session import runner as session_runner
from harness.store import RunRecord
from harness.config import ladder as ladder_mod
from harness.sweeps import rungs as sweep_mod
from harness.analysis.stats import noise_model, speedup

LADDER_NAME = "climb"  # the `ladder` of every record a climb stores
SEARCH = "fit search"  # the role of a run of the search for the largest batch that fits
KILL_MARGIN_S = 5.0  # a run's timeout ends this long before the budget does (killing it takes a moment)


def trial_ladder(workload: str, changes: list[tuple[str, object]]) -> ladder_mod.Ladder:
    """An in-memory ladder: the start, then ``changes`` one rung each (what a trial's settings are built from)."""
    rungs = (ladder_mod.Rung(0, ""),) + tuple(ladder_mod.Rung(i, k, v) for i, (k, v) in enumerate(changes, start=1))
    return ladder_mod.Ladder(name=LADDER_NAME, description="", guide="", workload=workload, base={}, rungs=rungs)


@dataclass(frozen=True)
class Run:
    """One run of a climb: ``changes`` over the start in a ``role`` of step ``step``'s comparison (candidate,
    enabled, incumbent; or SEARCH, a size of the search for the largest batch), its record's ``change``."""

    step: int
    role: str
    round_: int
    change: str
    changes: tuple
    repeats: int

    @property
    def label(self) -> str:
        """``[step 2, candidate 1/2] channels_last=true``, escaped for rich."""
        return _label(self.step, self.role, self.round_, self.repeats, self.change)


class Trials:
    """One run of a climb at a time: a cached copy or a fresh process, its record stored (the comparisons they make
    up, and the order they run in, are the climb's policy: ``harness.climb.policy``)."""

    def __init__(self, ctx: sweep_mod.SweepContext, machine, env: dict, env_key: str, budget: Budget,
                 repeats: int, events: Events):
        self.ctx, self.machine, self.env, self.env_key = ctx, machine, env, env_key
        self.budget, self.repeats, self.events = budget, repeats, events
        self.used: set[str] = set()  # runs this climb has used: no run counts twice
        self.busy: list[str] = []  # why runs were not trustworthy (``busy.busy_reason``), each measured again
        self.source: str | None = None  # the sweep the comparison under way copies from (``whole_source``)

    def trial(self, changes, step: int, role: str, round_: int, change: str,
              hooks: engine.Hooks | None = None) -> tuple[RunRecord, str]:
        """One run of ``changes`` over the start: a cached copy if the store has an unused one, else measured (told
        to ``hooks``: its start and progress); the record, and how it was had (cached, measured, or skipped: a knob
        that cannot act here, recorded at once). Its record is rung 2s-2 of the climb's sweep for the incumbent of
        step s, 2s-1 for the candidate, and no rung for an enabling change measured alone (it is not a comparison
        of the table). BudgetSpent: a run the budget cannot pay for (nothing ran); ValueError: settings that do not
        fit together."""
        cfg = self._config(changes, round_)
        rung = {"incumbent": 2 * (step - 1), "candidate": 2 * step - 1}.get(role)
        fields = dict(sweep_id=self.ctx.sweep_id, ladder=LADDER_NAME, rung=rung, round=round_, change=change,
                      **dict(self.ctx.record_fields))
        launched: list[float] = []  # when the run was launched (none for a copy)
        outcome = session_runner.run_one(cfg, fields, self.ctx.pipeline, self._cache(role), (self.env, self.env_key),
                                         hooks.progress if hooks is not None else None,
                                         lambda cfg, reason: launched.append(self._launching(cfg, reason, hooks)))
        record = outcome.record
        if outcome.how == "cached":
            self.used |= {record.cached_from, record.run_id}
            return record, "cached"
        self.used.add(record.run_id)
        if record.status != "skipped":
            self.budget.record(config_mod.config_hash(cfg), time.monotonic() - launched[0], cfg.compile != "off")
        return record, "skipped" if record.status == "skipped" else "measured"

    def stopped_by_budget(self, record: RunRecord) -> bool:
        """A run's timeout came from the end of the budget (it was stopped, not slow): the climb ends there."""
        return record.status == "timeout" and self.budget.left(time.monotonic()) <= KILL_MARGIN_S + 1

    def whole_source(self, runs) -> str | None:
        """The earlier sweep a comparison's ``runs`` are all copied from: the oldest that holds an unused original of
        every one of them (a climb run again: its own earlier climb), or None: all of them measured now. A comparison
        never pairs a copy with a run measured now: the day's shift between two sessions would read as the change's
        effect (with a 3% shift between days, a copied incumbent against fresh candidates was called faster in 11%
        of A/A comparisons, against the 2.5% the test allows)."""
        try:
            configs = [self._config(list(run.changes), run.round_) for run in runs]
        except ValueError:  # settings that do not fit together: the first run says so, nothing is copied
            return None
        if any(cache_mod.debug_active(cfg) for cfg in configs):
            return None
        needed = collections.Counter(config_mod.config_hash(cfg) for cfg in configs)
        return cache_mod.whole_source(self.ctx.results_dir, needed, self.env_key, self.used)

    def _config(self, changes, round_: int) -> config_mod.RunConfig:
        ctx = dataclasses.replace(self.ctx, ladder=trial_ladder(self.ctx.ladder.workload, changes))
        return sweep_mod.rung_config(ctx, len(changes), self.machine, round_=round_)

    def _cache(self, role: str) -> CacheRule | None:
        """A comparison copies only from its :meth:`whole_source` (``source``; None: it measures every run); a size
        of the batch search, whose memory is what counts, copies from any sweep. The oldest unused original first (a
        climb run again replays in order)."""
        sweep = "" if role == SEARCH else self.source
        if sweep is None:
            return None
        return CacheRule(self.ctx.results_dir, frozenset(self.used), sweep=sweep, oldest=True, match_profile=False)

    def _launching(self, cfg: config_mod.RunConfig, reason: str, hooks: engine.Hooks | None) -> float:
        """Before a run is measured: one the budget cannot pay for is refused (BudgetSpent: nothing ran), and its
        timeout ends before the budget does; a knob that cannot act here (``reason``) is recorded at once, for free.
        When it was launched."""
        if not reason:
            refusal = self.budget.refusal(config_mod.config_hash(cfg), cfg.compile != "off", time.monotonic())
            if refusal:
                raise BudgetSpent(refusal)
            cfg.timeout_s = min(cfg.timeout_s, max(self.budget.left(time.monotonic()) - KILL_MARGIN_S, 1.0))
        if hooks is not None:
            hooks.started(cfg)
        return time.monotonic()


def label_of(role: str, candidate) -> str:
    """The ``change`` a record of this role carries."""
    text = [f"{k}={ladder_mod.format_value(v)}" for k, v in candidate]
    if role == "incumbent":
        return "incumbent"
    if role == "enabled":
        return f"{', '.join(text[:-1])} (to fit {text[-1]})"
    return ", ".join(text)


def measured(records: dict, cached: int, status: str, reason: str, incumbent_status: str = "ok",
              busy: str = "") -> Measured:
    def runs(recs: list[RunRecord]) -> noise_model.Runs:  # as noise_model.runs_of reads them from the store
        ok = [r for r in recs if r.status == "ok" and r.samples_per_s and r.samples_per_s > 0]
        within = [u for u in (speedup.within_run_uncertainty(r.step_ms) for r in ok if r.step_ms) if u is not None]
        return noise_model.Runs([float(r.samples_per_s) for r in ok], within)

    enabled = runs(records["enabled"]) if "enabled" in records else None
    return Measured(status, runs(records["candidate"]), runs(records["incumbent"]), reason, cached, enabled,
                    incumbent_status, busy)


def last_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[-1] if lines else ""


def _label(step: int, role: str, round_: int, repeats: int, change: str) -> str:
    if role == SEARCH:
        return escape(f"[{SEARCH}] {change}")
    again = " again" if round_ >= repeats else ""  # an accepted candidate measured once more
    return escape(f"[step {step}, {role}{again} {round_ % repeats + 1}/{repeats}] {change}")

