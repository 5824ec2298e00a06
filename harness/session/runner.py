"""One turn of a session: the questions before a run asked in one place, then the run measured or copied.

Before a run there are three questions, asked here once each and in this order: the environment (collected once
a run; the cache matches on its key; the git state, two git processes, is added only for a run measured or
skipped, which ``runner.store_asked`` stores), whether the run can
act here at all (``applicability.skip_reason``: if not, it is recorded as skipped, never copied), and whether the
store holds a measurement of the same settings here this session may copy (the policy's rule,
``harness.session.cache``, asked of the store: no call back up into the policy). A copy is a new record of the
original's measurement with the turn's labels (``store.copy_of``); a run measured goes through
``runner.store_asked``.
Either way the record reaches the session's sinks (``harness.records.sinks``), and an :class:`Outcome` says how.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Iterator

from harness import config as config_mod
from harness.records.sinks import Pipeline
from harness.run.parent import env as env_mod, launcher
from harness.run.parent import runner as parent
from harness.session.cache import CacheRule
from harness.store import RunRecord, check_writable, copy_of
from harness.workload import applicability, preflight

HOWS = ("measured", "cached", "skipped", "not run")


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


@contextlib.contextmanager
def launcher_for(settings: config_mod.RunConfig) -> Iterator[launcher.Session | None]:
    """A command's warm launcher, started at once so that it imports torch while the command prepares its runs, which
    then fork from it as a sweep's do; it ends with the block. None for several devices or nodes (torch's launcher
    starts the ranks)."""
    if settings.devices != 1 or settings.nodes != 1:
        yield None
        return
    with launcher.warm() as session:
        session.begin(None, early=True)
        yield session


def run_one(cfg: config_mod.RunConfig, labels: dict, pipeline: Pipeline, cache: CacheRule | None = None,
            environment: tuple[dict, str] | None = None, on_progress=None,
            before_launch: Callable[[config_mod.RunConfig, str], object] | None = None,
            cap_workers_at_cpus: bool = False, have_nodes: int | None = None) -> Outcome:
    """The three questions before a run of ``cfg`` (resolved), each asked once, then what they say: the original
    copied with ``labels``, else ``cfg`` measured (or recorded as skipped) in the environment asked; the record handed
    to ``pipeline``. ``environment``: the (fields, key) a session collected once for all its runs; else it is
    collected here, once for this run, without the git state (``runner.store_asked`` adds it for a run measured or
    skipped, never for a copy). ``cache``: the policy's rule (None: measure). ``before_launch(cfg, reason)``: called
    when a run is about to be measured (``reason`` "") or recorded as skipped (not for a copy): a climb's budget
    refuses a run there (the error propagates: nothing ran). ``have_nodes``: the nodes a sweep across nodes spans."""
    env, key = environment if environment is not None else env_mod.environment(cfg.device, git=False)
    reason = applicability.skip_reason(cfg, cap_workers_at_cpus=cap_workers_at_cpus, have_nodes=have_nodes)
    original = cache.original(cfg, key) if cache is not None and not reason else None
    if original is not None:
        return Outcome(pipeline.put(copy_of(original, **labels)), "cached")
    if before_launch is not None:
        before_launch(cfg, reason)
    record = parent.store_asked(cfg, env, key, on_progress, skip_reason=reason, pipeline=pipeline, **labels)
    return Outcome(record, "skipped" if reason else "measured", reason)
