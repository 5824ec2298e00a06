"""One turn of a session: the questions before a run asked in one place, then the run measured or copied.

Before a run there are three questions, asked here once each and in this order: the environment's key (the
cache matches on it; the git state, two git processes, is collected only for a run measured), whether the run can
act here at all (``applicability.skip_reason``: if not, it is recorded as skipped, never copied), and whether the
store holds a measurement of the same settings here this session may copy (the policy's ``cache``). A copy is a new
record of the original's measurement with the turn's labels; a run measured goes through ``runner.run_and_store``.
Either way the record reaches the session's sinks (``harness.records.sinks``), and an :class:`Outcome` says how.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

from harness import config as config_mod
from harness.records.make import new_run_id
from harness.records.sinks import Pipeline
from harness.run.parent import runner as parent
from harness.store import COPY_COLUMNS, RunRecord, utc_timestamp
from harness.workload import applicability

HOWS = ("measured", "cached", "skipped", "not run")

# (the turn's resolved settings, its env_key) -> the original this turn may copy, or None
Cache = Callable[[config_mod.RunConfig, str], RunRecord | None]


@dataclass(frozen=True)
class Outcome:
    record: RunRecord | None
    how: str  # one of HOWS
    message: str = ""  # why it was skipped or not run


def copy_of(original: RunRecord, **labels) -> RunRecord:
    """The copy a session stores of ``original``: a new id and time, the turn's labels (what ``COPY_COLUMNS`` holds:
    every other column is the original's, so the store keeps the copy as those alone)."""
    beyond = sorted(set(labels) - set(COPY_COLUMNS))
    if beyond:
        raise ValueError(f"a copy sets only the store's COPY_COLUMNS; not {', '.join(beyond)}")
    return dataclasses.replace(original, run_id=new_run_id(), timestamp=utc_timestamp(), cached_from=original.run_id,
                               **labels)


def run_one(cfg: config_mod.RunConfig, labels: dict, pipeline: Pipeline, cache: Cache | None = None,
            environment: tuple[dict, str] | None = None, on_progress=None,
            before_launch: Callable[[], object] | None = None, cap_workers_at_cpus: bool = False) -> Outcome:
    """Copy or measure ``cfg`` (resolved) with ``labels`` on its record, the record handed to ``pipeline``.
    ``environment``: the (fields, key) a session collected once for all its runs; else asked here, the key for the
    cache and the whole of it only for a run measured. ``before_launch`` is called when a run is about to be
    measured or recorded as skipped (not for a copy)."""
    key = environment[1] if environment is not None else parent.environment_key(cfg.device)
    reason = applicability.skip_reason(cfg, cap_workers_at_cpus=cap_workers_at_cpus)  # once per run
    original = cache(cfg, key) if cache is not None and not reason else None
    if original is not None:
        return Outcome(pipeline.put(copy_of(original, **labels)), "cached")
    if before_launch is not None:
        before_launch()
    env, key = environment if environment is not None else parent.environment(cfg.device)
    record = parent.run_and_store(cfg, env, key, on_progress, skip_reason=reason, pipeline=pipeline, **labels)
    return Outcome(record, "skipped" if reason else "measured", reason)
