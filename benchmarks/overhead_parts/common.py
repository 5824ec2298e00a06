"""What every part of the overhead benchmark shares: where the repository and the entry file are, the child
processes' environment, the settings of a run, and the config they resolve to."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ENTRY = REPO / "benchmarks" / "overhead.py"  # the child processes (--plain, --follow, --poll) start it again

DEFAULT_STEPS = {"resnet50": 40, "unet3d": 200}  # ~10 s windows on one CPU of this machine (300 / 48 ms a step)
BLOCK_STEPS = {"resnet50": 10, "unet3d": 50}  # in-process blocks of ~1.5 s on both CPUs (150 / 30 ms a step)


def env() -> dict:
    """This environment with the repository first on the import path (what PYTHONPATH already held is kept)."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, PYTHONPATH=path)


def settings(workload: str, precision: str, steps: int, warmup: int, device: str) -> list[str]:
    """A run's ``key=value`` settings at the smoke size, one batch kept on the device (no loader work)."""
    return [f"workload={workload}", "size=smoke", f"device={device}", f"precision={precision}", "measure.mode=model",
            f"measure.steps={steps}", f"measure.warmup_steps={warmup}"]


def config(items: list):
    """A resolved RunConfig from ``key=value`` strings or (key, value) pairs."""
    import torch  # here: the poller process, standing in for the harness's parent, never loads torch

    from harness import config as config_mod

    cfg = config_mod.RunConfig()
    for item in items:
        key, value = item.split("=", 1) if isinstance(item, str) else item
        config_mod.set_key(cfg, key, value)
    return config_mod.resolve(cfg, cuda_available=torch.cuda.is_available())


def load() -> str:
    """The load average, 1, 5 and 15 minutes."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.1f} {five:.1f} {fifteen:.1f}"


def cpus_label(cpus: set[int]) -> str:
    """``CPUs 0-3``, ``CPU 5`` or ``CPUs 1,3``."""
    ordered = sorted(cpus)
    if len(ordered) > 1 and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"CPUs {ordered[0]}-{ordered[-1]}"
    return ("CPU " if len(ordered) == 1 else "CPUs ") + ",".join(map(str, ordered))


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}%"


def end_with_parent(sig: int) -> None:
    """Linux: this process gets ``sig`` when the benchmark ends, never outliving it (elsewhere: nothing)."""
    try:
        ctypes.CDLL(None).prctl(1, sig)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
