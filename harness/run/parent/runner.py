"""One run, end to end: resolve the settings for this machine, measure in isolation, store."""

from __future__ import annotations

import os
from dataclasses import dataclass

from harness import config as config_mod
from harness.run.parent import env as env_mod
from harness.run.parent.isolate import ProgressFn, execute_asked
from harness.records.sinks import Pipeline
from harness.store import RunRecord
from harness.workload import applicability, datasets, first_item
from harness.run.parent import fingerprint, rendezvous, torch_facts


@dataclass(frozen=True)
class Machine:
    """What the parent knows about where runs will execute."""

    cuda_available: bool

    @staticmethod
    def detect() -> "Machine":
        return Machine(cuda_available=torch_facts.cuda_available())


def resolve(cfg: config_mod.RunConfig, machine: Machine) -> config_mod.RunConfig:
    return config_mod.resolve(cfg, machine.cuda_available, dataset_shape=first_item.input_shape)


def ready(settings: config_mod.RunConfig, log=print) -> tuple[config_mod.RunConfig, tuple[dict, str]]:
    """Before measuring anything (the caller has checked that its results folder takes records): the settings
    resolved for this machine, the on-disk dataset built, and the environment the records carry (its fields and
    ``env_key``, ``env.environment``). ValueError or OSError naming what is wrong."""
    resolved = resolve(settings, Machine.detect())
    found = env_mod.environment(resolved.device)
    datasets.prepare(resolved, log)
    return resolved, found


def run_and_store(resolved: config_mod.RunConfig, env: dict, env_key: str, on_progress: ProgressFn | None = None,
                  skip_reason: str | None = None, pipeline: Pipeline | None = None, **sweep_fields) -> RunRecord:
    """:func:`store_asked`, with ``applicability.skip_reason`` asked here when the caller did not (None), and the
    record handed to the store of its results folder when no ``pipeline`` is given."""
    reason = applicability.skip_reason(resolved) if skip_reason is None else skip_reason
    sinks = pipeline if pipeline is not None else Pipeline.to_store(resolved.results_dir)
    return store_asked(resolved, env, env_key, on_progress, skip_reason=reason, pipeline=sinks, **sweep_fields)


def store_asked(resolved: config_mod.RunConfig, env: dict, env_key: str, on_progress: ProgressFn | None = None, *,
                skip_reason: str, pipeline: Pipeline | None = None, **sweep_fields) -> RunRecord:
    """Measure a resolved config and hand its record to ``pipeline``'s sinks (None: none), whatever its status; a
    node but the first of a run across nodes only measures (the first stores the run's one record).
    ``skip_reason``: the caller's answer of ``applicability.skip_reason`` ("" when the run can act here); ``env``:
    the environment's fields (the git state is added here when it was left out: ``fingerprint.with_git``);
    ``sweep_fields`` go into the record as it is made (a name the record lacks raises). The record reaches the sinks
    before an interrupt can end the command, and a measurement the child wrote before an interrupt does too."""
    env = fingerprint.with_git(env)
    meet = rendezvous.of(resolved, os.environ)
    stores = pipeline is not None and (meet is None or meet.node_rank == 0)
    return execute_asked(resolved, env, env_key, skip_reason, on_progress, store=pipeline.put if stores else None,
                         **sweep_fields)
