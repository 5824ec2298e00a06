"""A run's start, in the steps its record times apart (``harness.run.parent.phases``): the workload's modules
imported, the device's context created, the FLOP count, before the model is built and moved to its device.

The FLOP count (on a meta copy of the model) is made once per sweep for a model and patch size: the first run of
the sweep keeps it in the sweep's shared folder (``HARNESS_SHARED_DATA``, as the synthetic data), and the later runs
of the same model read it there. Outside a sweep, every run counts its own.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import sys
from pathlib import Path
from typing import Callable

import torch

from harness.config.targets import setting_args
from harness.config.workload import WorkloadSpec
from harness.fileio import write_text_atomic
from harness.workload import shared_data


def import_workload(workload: WorkloadSpec) -> None:
    """Import the modules of the workload's model, loss and dataset ``_target_``s (MONAI's networks, a user's
    module); a module that fails to import is left to the build, which says so in the run's record."""
    for module in _modules(workload):
        try:
            importlib.import_module(module)
        except Exception:
            continue


def open_context(device: torch.device) -> None:
    """Create the device's context now (CUDA: the driver's context on this run's GPU); nothing elsewhere."""
    if device.type == "cuda":
        torch.zeros(1, device=device)


def flops_per_sample(cfg, workload: WorkloadSpec, count: Callable[[], float | None]) -> float | None:
    """``count()`` (the model's training FLOPs per sample), once per sweep for this model and patch size."""
    folder = os.environ.get(shared_data.ENV, "")
    if not folder or not Path(folder).is_dir():
        return count()
    path = Path(folder) / f"flops-{_key(cfg, workload)}.json"
    try:
        return json.loads(path.read_text())["flops"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    flops = count()
    try:
        write_text_atomic(path, json.dumps({"flops": flops}))
    except OSError:
        pass
    return flops


def _key(cfg, workload: WorkloadSpec) -> str:
    """Everything the count depends on: the model's node and settings, its input, the mode, and its module's file."""
    files = {}
    for module in _modules(workload):
        path = getattr(sys.modules.get(module), "__file__", None)
        if path:
            try:
                files[path] = os.stat(path).st_mtime_ns
            except OSError:
                continue
    blob = json.dumps({"model": workload.model_node, "settings": setting_args(workload.model_settings, cfg),
                       "in": workload.in_channels, "patch": list(cfg.data.patch_size), "mode": cfg.measure.mode,
                       "files": files}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _modules(workload: WorkloadSpec) -> list[str]:
    nodes = (workload.model_node, workload.loss, workload.dataset)
    targets = [node.get("_target_") for node in nodes if isinstance(node, dict)]
    return [t.rsplit(".", 1)[0] for t in targets if isinstance(t, str) and "." in t]
