"""Climbing a ladder: the settings of each rung, the rule its cache of earlier measurements copies by, failures.

Plain Python called by the sweep loop (``harness.sweeps.loop``) for each rung: every rung still
measures in its own child process through ``harness.run.parent.runner``.

Rules:
  * rung k = ladder base + the changes of rungs 1..k, except those of earlier rungs that did not
    run ``ok`` in this sweep (a failed change is not built on); the user's overrides win over the
    ladder's base (they may not touch what the ladder varies);
  * a rung whose resolved settings (``config_hash``) and environment (``env_key``) already have an
    ``ok`` measurement in the store, not yet used by this sweep, is copied instead of re-run
    (``cached_from`` names the original; ``cache_rule``: the rule the runner asks the store,
    ``harness.session.cache``), unless ``sweep.rerun=true``; a round copies whole from ONE earlier
    sweep or is measured whole (``round_source``): a round is one session's block, and a run copied from
    another session beside runs measured today would carry the between-session effect into the rung's ratio,
    which the rung x round model has no term for; its runs are copied oldest first, so that a sweep run again
    replays the earlier one round by round (its looks, its stop, its verdicts);
  * with ``stop_on_oom`` the first out-of-memory ends the ladder: later rungs are not run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from harness import config as config_mod
from harness.config import ladder as ladder_mod
from harness.records.sinks import Pipeline, Sink
from harness.run.parent import env as env_mod, runner
from harness.session import cache as cache_mod, runner as session_runner
from harness.session.cache import CacheRule
from harness.sweeps import nodes
from harness.store import RunRecord, load_runs
from harness.workload import applicability, datasets, first_item


ANY_SWEEP = "*"
SESSION_S = 1800  # runs this close to now are of this session: copies of them may join a round of fresh runs


@dataclass(frozen=True)
class SweepContext:
    """What every rung of one sweep shares."""

    sweep_id: str
    ladder: ladder_mod.Ladder
    settings: dict[str, Any]  # the composed settings (defaults + the user's overrides), nested
    user_keys: frozenset[str]  # settings the user overrode on the command line
    repeats: int | str = 1  # rounds, or "auto": rounds until decided (``harness.sweeps.rounds``)
    rerun: bool = False
    campaign_id: str = ""  # set when the sweep is one job of a campaign (``sweep -m``)
    max_repeats: int = 6  # repeats=auto: the most rounds
    budget_min: float = 10.0  # repeats=auto: no round starts that would end after these minutes
    record_fields: tuple[tuple[str, Any], ...] = ()  # fields every record of the sweep carries (its calibration)
    remeasure_busy: bool = True  # a run of a busy machine is measured again, once (``sweep.remeasure_busy``)
    copy_from: str = ANY_SWEEP  # the earlier sweep this round's runs may be copied from ("": none; ``round_source``)
    sinks: tuple[Sink, ...] = ()  # where its records go besides the store (``harness.records.sinks``)
    pipeline: Pipeline = field(init=False, repr=False, compare=False)  # the store's, then ``sinks``: built once

    def __post_init__(self):
        object.__setattr__(self, "pipeline", Pipeline.to_store(self.results_dir, *self.sinks))

    @property
    def results_dir(self) -> str:
        return self.settings.get("results_dir", "results")

    @property
    def span(self) -> int:
        """The nodes the sweep spans (its ``nodes``, 1 unless started across nodes): a rung on more is skipped."""
        return int(self.settings.get("nodes", 1))


def conflicts(ladder: ladder_mod.Ladder, user_keys: set[str]) -> list[str]:
    """User overrides of what the ladder varies (refused: the rung would not change what it says)."""
    return sorted(user_keys & ladder.varied_keys())


def rung_config(ctx: SweepContext, rung: int, machine: runner.Machine, dropped: frozenset[int] = frozenset(),
                round_: int = 0) -> config_mod.RunConfig:
    """The resolved settings of ``rung`` on this machine (:func:`rung_turn`'s, without its labels)."""
    return rung_turn(ctx, rung, machine, dropped, round_)[0]


def rung_turn(ctx: SweepContext, rung: int, machine: runner.Machine, dropped: frozenset[int] = frozenset(),
              round_: int = 0) -> tuple[config_mod.RunConfig, dict[str, Any]]:
    """The resolved settings of ``rung`` on this machine: the composed settings with the ladder's (those the user
    did not give) and the sweep's own on top, built into one config at once and resolved; and the labels its record
    carries (the sweep's, the rung's change, the ladder's claims). Loader workers the ladder chose beyond this
    machine's bound skip the rung (``applicability``); the user's own are refused."""
    size = _size(ctx.settings, machine)
    given, claims = ctx.ladder.turn(rung, size, dropped)
    ladder = {k: v for k, v in given.items() if k not in ctx.user_keys}
    sweep = {"sweep.id": ctx.sweep_id, "sweep.rung": rung, "sweep.round": round_, "sweep.repeats": ctx.repeats,
             "sweep.rerun": ctx.rerun, "sweep.max_repeats": ctx.max_repeats, "sweep.budget_min": ctx.budget_min,
             "sweep.remeasure_busy": ctx.remeasure_busy}
    values = {**config_mod.flatten(ctx.settings), **ladder, **sweep}
    cfg = config_mod.from_dict({**values, **nodes.turn_dist(values, rung, round_, len(ctx.ladder.rungs))})
    cfg = config_mod.resolve(cfg, machine.cuda_available, ladder_keys=frozenset(ladder),
                             dataset_shape=first_item.input_shape)
    labels = dict(sweep_id=ctx.sweep_id, campaign_id=ctx.campaign_id, ladder=ctx.ladder.name, rung=rung,
                  round=round_, change=ctx.ladder.rungs[rung].change(cfg.size), **claims, **dict(ctx.record_fields))
    return cfg, labels


def _size(settings: dict[str, Any], machine: runner.Machine) -> str:
    """The size the rung's values are given for (a ladder may give one per size), as resolution will choose it."""
    size, device = str(settings.get("size", "auto")), str(settings.get("device", "auto"))
    if size != "auto":
        return size
    return "full" if device == "cuda" or (device == "auto" and machine.cuda_available) else "smoke"


def preflight(ctx: SweepContext, machine: runner.Machine) -> list[config_mod.RunConfig]:
    """Resolve every rung up front, so bad input stops the sweep before anything runs; build the
    on-disk datasets the rungs read, so that no rung times a dataset being written."""
    configs = []
    for r in ctx.ladder.rungs:
        try:
            configs.append(rung_config(ctx, r.index, machine))
        except ValueError as exc:
            what = f"rung {r.index} ({r.change('smoke') or 'baseline'})"
            raise ValueError(f"ladder {ctx.ladder.name!r} {what} does not fit these settings: {exc}") from exc
    for cfg in configs:
        datasets.prepare(cfg)
    return configs


SWEEP_COLUMNS = ("run_id", "rung", "round", "status", "cached_from")  # what run_rung needs of the sweep's earlier rungs


def dropped_rungs(mine, rung: int) -> frozenset[int]:
    """Earlier rungs of this sweep with no ``ok`` record: their changes are not built on. (Over the two columns'
    values: the frame's own filters took ~0.6 ms a call, asked twice a rung.)"""
    seen, ok = set(), set()
    for r, status in zip(mine["rung"].astype("float64").tolist(), mine["status"].fillna("").tolist()):
        if r == r and r < rung:  # a record without a rung (nan) is no earlier rung
            seen.add(int(r))
            if status == "ok":
                ok.add(int(r))
    return frozenset(seen - ok)


def oom_rung(mine, rung: int) -> int | None:
    hit = mine[(mine["rung"] < rung) & (mine["status"] == "oom")]
    return int(hit["rung"].min()) if len(hit) else None


@dataclass
class RungOutcome:
    record: RunRecord | None
    how: str  # "measured", "cached", "skipped", "not run"
    built_on: frozenset[int]
    message: str = ""


def measured_rungs(ctx: SweepContext) -> set[tuple[int, int]]:
    """(rung, round) pairs this sweep already has a record for (a requeued job resumes after them)."""
    try:
        mine = load_runs(ctx.results_dir, columns=["rung", "round"], where={"sweep_id": ctx.sweep_id})
    except ValueError:  # no results folder yet
        return set()
    return {(int(r), int(k)) for r, k in zip(mine["rung"], mine["round"].fillna(0))}


def cache_rule(ctx: SweepContext, used: frozenset[str] = frozenset()) -> CacheRule | None:
    """The rule a rung of this sweep copies by (``harness.session.cache``): the originals ``used`` by none of its
    runs, from the round's one source sweep (``round_source``) or any; None for a re-run, or a round measured
    whole. From one source sweep the oldest come first, so that its rounds are replayed in the order they were
    measured and the looks of ``sweep.repeats=auto`` see what the source's looks saw: newest first, a replay of a
    sweep that stopped after its fourth round looked at rounds 4, 3, 2 and could stop after three, with other
    verdicts than the sweep it replays (a second look at data that had already been looked at)."""
    if ctx.rerun or not ctx.copy_from:
        return None
    source = "" if ctx.copy_from == ANY_SWEEP else ctx.copy_from
    return CacheRule(ctx.results_dir, used, source, oldest=bool(source))


def round_source(ctx: SweepContext, machine: runner.Machine, round_: int) -> str:
    """The one earlier sweep that every rung of this round still to measure can be copied from (the newest such);
    else an earlier sweep of this session (its last run less than ``SESSION_S`` ago: an interrupted sweep resumed,
    a ladder after another), whose runs may stand beside fresh ones; else "": the whole round is measured. A round
    already begun keeps its kind (measured, or copied from its sweep)."""
    if ctx.rerun:
        return ""
    try:
        mine = load_runs(ctx.results_dir, columns=SWEEP_COLUMNS, where={"sweep_id": ctx.sweep_id})
    except ValueError:  # no results folder yet: nothing to copy
        return ""
    begun = mine[mine["round"].fillna(0) == round_]
    if len(begun):
        return _begun_source(ctx.results_dir, begun)
    used = set(mine["cached_from"].fillna("")) | set(mine["run_id"])
    key = env_mod.environment_key(str(rung_config(ctx, 0, machine).device))
    hashes = []
    for rung in range(len(ctx.ladder.rungs)):
        try:
            cfg = rung_config(ctx, rung, machine, dropped_rungs(mine, rung), round_)
        except ValueError:
            return ""  # the rung says why when it runs
        if cache_mod.debug_active(cfg):
            return ""
        if not applicability.skip_reason(cfg, cap_workers_at_cpus=ctx.ladder.cap_workers_at_cpus,
                                         have_nodes=ctx.span):
            hashes.append(config_mod.config_hash(cfg))  # a skipped rung is recorded as skipped, never copied
    return _one_source(ctx.results_dir, hashes, key, used)


def _one_source(results_dir: str, hashes: list[str], env_key: str, used: set[str]) -> str:
    """The newest earlier sweep holding an unused original ``ok`` run of every one of ``hashes`` here; else the
    newest sweep of this session holding any (one ladder after another, an interrupted sweep resumed); else ""."""
    if not hashes:
        return ""
    keys = load_runs(results_dir, columns=cache_mod.CACHE_COLUMNS,
                     where={"config_hash": sorted(set(hashes)), "env_key": env_key, "status": "ok"})
    since = time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime(time.time() - SESSION_S))
    sources: dict[str, str] | None = None
    recent: dict[str, str] = {}
    for config_hash in hashes:
        hits = cache_mod.originals(keys, config_hash, env_key, used)
        found = {str(k): str(v) for k, v in hits.groupby("sweep_id")["timestamp"].max().items()}
        recent.update({k: v for k, v in found.items() if v >= since})
        sources = found if sources is None else {k: v for k, v in sources.items() if k in found}
    chosen = sources or recent
    return max(chosen, key=chosen.get) if chosen else ""


def _begun_source(results_dir: str, begun) -> str:
    """The source of a round begun already: "" if any run of it was measured, else its copies' earlier sweep."""
    originals = set(begun["cached_from"].fillna(""))
    if "" in originals:
        return ""
    rows = load_runs(results_dir, columns=["run_id", "sweep_id"], where={"run_id": sorted(originals)[0]})
    return str(rows["sweep_id"].iloc[0]) if len(rows) else ""


def would_be_cached(ctx: SweepContext, cfg: config_mod.RunConfig) -> bool:
    """Whether :func:`run_rung` would copy these settings from the store (any sweep's measurement), from the
    store's short columns alone (``CacheRule.holds``): a round's estimate asks it of every rung, and the records
    themselves are read once, when a rung copies one."""
    reason = applicability.skip_reason(cfg, cap_workers_at_cpus=ctx.ladder.cap_workers_at_cpus, have_nodes=ctx.span)
    rule = cache_rule(ctx)
    return not reason and rule is not None and rule.holds(cfg, env_mod.environment_key(cfg.device))


def run_rung(ctx: SweepContext, rung: int, round_: int, machine: runner.Machine,
             on_start: Callable[[config_mod.RunConfig, frozenset[int]], Any] | None = None,
             on_progress=None, before_launch: Callable[[config_mod.RunConfig, str], Any] | None = None) -> RungOutcome:
    """Measure (or take from the cache) one rung of one round (``harness.session.runner.run_one``), its record handed
    to the store and the sweep's other sinks (``SweepContext.pipeline``); ``before_launch(cfg, reason)`` is called
    when a run is about to be measured or recorded as skipped (not for one the store holds), with its resolved
    settings."""
    ladder = ctx.ladder
    # the store is read per rung, filtered inside pyarrow: four columns of this sweep's rows, then the cache's
    # few columns and the one record it copies. Each rung may run in another process (any Hydra launcher), so
    # no in-memory index; on a compacted store of 10,000 runs each read takes milliseconds (benchmarks/)
    mine = load_runs(ctx.results_dir, columns=SWEEP_COLUMNS, where={"sweep_id": ctx.sweep_id})
    if ladder.stop_on_oom and (hit := oom_rung(mine, rung)) is not None:
        return RungOutcome(None, "not run", frozenset(), f"memory ran out at rung {hit}; the ladder stops there")
    dropped = dropped_rungs(mine, rung)
    cache = cache_rule(ctx, frozenset(mine["cached_from"].fillna("")) | frozenset(mine["run_id"]))
    cfg, fields = rung_turn(ctx, rung, machine, dropped, round_)
    if on_start:
        on_start(cfg, dropped)
    outcome = session_runner.run_one(cfg, fields, ctx.pipeline, cache, None, on_progress, before_launch,
                                     cap_workers_at_cpus=ladder.cap_workers_at_cpus, have_nodes=ctx.span)
    return RungOutcome(outcome.record, outcome.how, dropped, outcome.message)
