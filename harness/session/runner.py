"""One turn of a session: the questions before a run asked in one place, then the run measured or copied.

Before a run there are three questions, asked here once each and in this order: the environment (collected once
a run; the cache matches on its key; the git state, two git processes, is added only for a run measured or
skipped, which ``runner.store_asked`` stores), whether the run can
act here at all (``applicability.skip_reason``: if not, it is recorded as skipped, never copied), and whether the
store holds a measurement of the same settings here this session may copy (the policy's ``cache``). A copy is a new
record of the original's measurement with the turn's labels; a run measured goes through ``runner.store_asked``.
Either way the record reaches the session's sinks (``harness.records.sinks``), and an :class:`Outcome` says how.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

from harness import config as config_mod
from harness.records.make import new_run_id
from harness.records.sinks import Pipeline
from harness.run.parent import env as env_mod
from harness.run.parent import runner as parent
from harness.store import COPY_COLUMNS, RunRecord, check_writable, utc_timestamp
from harness.workload import applicability, preflight

HOWS = ("measured", "cached", "skipped", "not run")

# (the turn's resolved settings, its env_key) -> the original this turn may copy, or None
Cache = Callable[[config_mod.RunConfig, str], RunRecord | None]


@dataclass(frozen=True)
class Outcome:
    record: RunRecord | None
    how: str  # one of HOWS
    message: str = ""  # why it was skipped or not run


@dataclass(frozen=True)
class Prepared:
    """What every run of a command shares, found once before the first: the settings resolved for this machine, and
    the environment its records carry (its fields and ``env_key``)."""

    resolved: config_mod.RunConfig
    environment: tuple[dict, str]


def prepare(settings: config_mod.RunConfig, command: str, log=print) -> Prepared:
    """The measuring preamble, once for all of a command's runs: a results folder that takes records (``command``:
    what the refusal names), the settings resolved with their on-disk dataset built, the model built on the meta
    device (a user's model that cannot build is refused before anything runs), and the environment. ValueError or
    OSError naming what is wrong."""
    check_writable(settings.results_dir, command)
    resolved, environment = parent.ready(settings, log)
    preflight.check_model_builds(resolved)
    return Prepared(resolved, environment)


def copy_of(original: RunRecord, **labels) -> RunRecord:
    """The copy a session stores of ``original``: a new id and time, the turn's labels (what ``COPY_COLUMNS`` holds:
    every other column is the original's, so the store keeps the copy as those alone)."""
    beyond = sorted(set(labels) - set(COPY_COLUMNS))
    if beyond:
        raise ValueError(f"a copy sets only the store's COPY_COLUMNS; not {', '.join(beyond)}")
    return dataclasses.replace(original, run_id=new_run_id(), timestamp=utc_timestamp(), cached_from=original.run_id,
                               **labels)


@dataclass(frozen=True)
class Asked:
    """The answers before a run: the environment's key, why it cannot act here ("" when it can), the original it
    may copy (None: measure it), and the environment (fields, key) they were asked in, which a run measured keeps."""

    key: str
    reason: str
    original: RunRecord | None
    environment: tuple[dict, str]


def ask(cfg: config_mod.RunConfig, cache: Cache | None = None, environment: tuple[dict, str] | None = None,
        cap_workers_at_cpus: bool = False, have_nodes: int | None = None) -> Asked:
    """The three questions before a run of ``cfg`` (resolved), each asked once. ``environment``: the (fields, key)
    a session collected once for all its runs; else it is collected here, once for this run (without the git
    state, which :func:`act` adds for a run measured). ``have_nodes``: the nodes a sweep across nodes spans."""
    environment = environment if environment is not None else env_mod.environment(cfg.device, git=False)
    reason = applicability.skip_reason(cfg, cap_workers_at_cpus=cap_workers_at_cpus, have_nodes=have_nodes)
    original = cache(cfg, environment[1]) if cache is not None and not reason else None
    return Asked(environment[1], reason, original, environment)


def act(cfg: config_mod.RunConfig, asked: Asked, labels: dict, pipeline: Pipeline, on_progress=None) -> Outcome:
    """What the answers say: the original copied with ``labels``, else ``cfg`` measured (or recorded as skipped) in
    the environment ``asked`` collected; the record handed to ``pipeline``."""
    if asked.original is not None:
        copy = copy_of(asked.original, **labels)
        return Outcome(pipeline.put(copy), "cached")
    env, key = asked.environment
    record = parent.store_asked(cfg, env, key, on_progress, skip_reason=asked.reason, pipeline=pipeline, **labels)
    return Outcome(record, "skipped" if asked.reason else "measured", asked.reason)


def run_one(cfg: config_mod.RunConfig, labels: dict, pipeline: Pipeline, cache: Cache | None = None,
            environment: tuple[dict, str] | None = None, on_progress=None,
            before_launch: Callable[[config_mod.RunConfig], object] | None = None,
            cap_workers_at_cpus: bool = False, have_nodes: int | None = None) -> Outcome:
    """:func:`ask`, then :func:`act`: copy or measure ``cfg`` with ``labels`` on its record. ``before_launch(cfg)``
    is called when a run is about to be measured or recorded as skipped (not for a copy)."""
    asked = ask(cfg, cache, environment, cap_workers_at_cpus, have_nodes)
    if asked.original is None and before_launch is not None:
        before_launch(cfg)
    return act(cfg, asked, labels, pipeline, on_progress)
