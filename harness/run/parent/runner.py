"""One run, end to end: resolve the settings for this machine, measure in isolation, store."""

from __future__ import annotations

import os
from dataclasses import dataclass

from harness import config as config_mod
from harness.config.identity import env_key
from harness.run.parent import env as env_mod
from harness.run.parent.isolate import ProgressFn, execute
from harness.records.sinks import Pipeline
from harness.store import RunRecord
from harness.store import check_writable
from harness.workload import datasets, first_item
from harness.run.parent import rendezvous, torch_facts


@dataclass(frozen=True)
class Machine:
    """What the parent knows about where runs will execute."""

    cuda_available: bool

    @staticmethod
    def detect() -> "Machine":
        return Machine(cuda_available=torch_facts.cuda_available())


def resolve(cfg: config_mod.RunConfig, machine: Machine) -> config_mod.RunConfig:
    return config_mod.resolve(cfg, machine.cuda_available, dataset_shape=first_item.input_shape)


def environment(device: str) -> tuple[dict, str]:
    """The environment fields a record of a run on ``device`` carries, and its ``env_key``."""
    env = env_mod.collect(device)
    return env, env_key(env, device)


def environment_key(device: str) -> str:
    """The ``env_key`` of runs on ``device`` alone, as :func:`environment` gives it, without the git state it does
    not hash (two git processes): what a cache lookup matches on."""
    return env_key(env_mod.collect(device, git=False), device)


def ready(settings: config_mod.RunConfig, log=print) -> config_mod.RunConfig:
    """Before measuring anything: the settings resolved for this machine, a results folder that takes
    records, and the on-disk dataset built (ValueError or OSError naming what is wrong)."""
    resolved = resolve(settings, Machine.detect())
    check_writable(resolved.results_dir)
    prepare_data(resolved, log)
    return resolved


def prepare_data(resolved: config_mod.RunConfig, log=print) -> None:
    """Build (once) or repair the on-disk dataset a config reads, before anything is timed."""
    if resolved.data.source != "disk":
        return

    spec = datasets.spec_for(resolved, resolved.workload)
    datasets.ensure(spec, datasets.cache_root(resolved), log)


def run_and_store(resolved: config_mod.RunConfig, env: dict, env_key: str, on_progress: ProgressFn | None = None,
                  skip_reason: str | None = None, pipeline: Pipeline | None = None, **sweep_fields) -> RunRecord:
    """Measure a resolved config and hand its record to ``pipeline``'s sinks (the store of its results folder when
    None), whatever its status; ``skip_reason``: the caller's answer of ``applicability.skip_reason`` when it asked
    already (see ``isolate.execute``); ``sweep_fields`` go into the record as it is made (a name the record lacks
    raises). The record reaches the sinks before an interrupt can end the command, and a measurement the child
    wrote before an interrupt does too."""
    meet = rendezvous.of(resolved, os.environ)
    if meet is not None and meet.node_rank > 0:  # node 0 stores the run's one record; this node only measured
        return execute(resolved, env, env_key, on_progress, skip_reason, **sweep_fields)
    sinks = pipeline if pipeline is not None else Pipeline.to_store(resolved.results_dir)
    return execute(resolved, env, env_key, on_progress, skip_reason, store=sinks.put, **sweep_fields)
