"""The one place a run's record is made: from its settings, its environment, the child's summary, and labels.

Every record the harness writes, measured, skipped or failed, is made here (``harness.run.parent.isolate`` for a
run, the sweeps' and the climb's copies replace only their labels): identity from the settings (``config_hash``,
``config_json``), the environment as ``harness.run.parent.env`` collected it, the metrics of the child's summary
(anything with ``record_fields()``; none for a run that did not measure), and the caller's labels (a sweep's
fields). A name the record lacks raises, whichever of the four it came from: an environment key as ValueError
naming it, a label as TypeError.
"""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any, Protocol

from harness import config as config_mod
from harness.store import RunRecord, new_id, utc_timestamp

RECORD_FIELDS = frozenset(f.name for f in fields(RunRecord))


class Measured(Protocol):
    """The child's summary as the record reads it (``harness.run.child.summary.Summary``)."""

    def record_fields(self) -> dict[str, Any]: ...


def new_run_id() -> str:
    return new_id()


def make_record(cfg: config_mod.RunConfig, env: dict, env_key: str, status: str, error: str = "",
                summary: Measured | None = None, run_id: str = "", **labels) -> RunRecord:
    """The record of ``cfg`` (resolved): environment and identity, the metrics of ``summary`` (empty without one),
    and ``labels``. Constructed in one call: a label the record lacks raises TypeError, an environment key it
    lacks ValueError (the environment and the record's columns are declared apart: they must agree)."""
    unknown = sorted(set(env) - RECORD_FIELDS)
    if unknown:
        raise ValueError(f"environment key(s) {', '.join(map(repr, unknown))} are no field of RunRecord: add the "
                         "column to harness.store.record (and the store's schema) or leave the key out")
    return RunRecord(
        run_id=run_id or new_run_id(),
        status=status,
        error=error,
        timestamp=utc_timestamp(),
        workload=cfg.workload.name,
        size=cfg.size,
        device=cfg.device,
        config_hash=config_mod.config_hash(cfg),
        **config_mod.code_identity(cfg),
        config_json=json.dumps(config_mod.record_dict(cfg), sort_keys=True),
        env_key=env_key,
        memory_limit_gb=cfg.memory.limit_gb,
        unit=cfg.workload.unit,
        mode=cfg.measure.mode,
        **env,
        **(summary.record_fields() if summary is not None else {}),
        **labels,
    )
