"""What this machine allows the settings: the CPUs this process may use, and the loader workers they can feed.

A loader worker is a process holding a copy of the dataset's state; beyond the CPUs they only wait for one, and far
beyond they exhaust memory before the first step (``data.num_workers=999999`` once started some 500 processes
until memory ran out). So workers above ``WORKERS_PER_CPU`` per usable CPU are refused before anything runs, and
workers above the CPU count are said in a warning (:class:`SettingWarning`); a ladder's own rungs above the bound
are recorded as skipped instead (``harness.workload.applicability``), so one ladder serves a laptop and a server.
"""

from __future__ import annotations

import os
from typing import Iterable

from harness.config.keys import get_key
from harness.config.schema import RunConfig

WORKERS_PER_CPU = 4
WORKER_KEYS = ("data.num_workers", "val.num_workers")  # each is a loader's worker processes


class SettingWarning(UserWarning):
    """A setting that runs, but not as it might here (shown as one line by the command line)."""


def usable_cpus() -> int:
    """CPUs this process may run on (a container or taskset may allow fewer than the machine has)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def workers_over_bound(cfg: RunConfig, keys: Iterable[str] = WORKER_KEYS, cpus: int | None = None) -> str:
    """Why the loader workers of ``keys`` are more than this machine can hold ("" when they are not)."""
    cpus = cpus or usable_cpus()
    bound = WORKERS_PER_CPU * cpus
    return "; ".join(
        f"{key}={get_key(cfg, key)} is more than {bound} loader workers, the bound here ({WORKERS_PER_CPU} for each "
        f"of the {cpus} CPUs this process may use): use {key}={bound} or fewer"
        for key in keys if get_key(cfg, key) > bound)


def workers_over_cpus(cfg: RunConfig, keys: Iterable[str] = WORKER_KEYS, cpus: int | None = None) -> list[str]:
    """A warning for each of ``keys`` whose loader workers are more than the usable CPUs (but within the bound)."""
    cpus = cpus or usable_cpus()
    return [f"{key}={get_key(cfg, key)} is more than the {cpus} CPUs this process may use: the loader workers "
            "will take turns on them" for key in keys if cpus < get_key(cfg, key) <= WORKERS_PER_CPU * cpus]
