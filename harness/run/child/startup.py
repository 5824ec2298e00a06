"""A run's start, in the steps its record times apart (``harness.run.parent.phases``): the workload's modules
imported, the device's context created, the FLOP count, before the model is built and moved to its device.

On one CUDA device the context is created in a thread of its own (:func:`start_context`) while the main thread
imports the workload's modules (MONAI's networks: seconds), and joined (:func:`finish_context`) before the main
thread touches the device and before the loader forks its workers: the two overlap instead of adding up. An
exception in the thread is raised again in the main thread at the join, the same exception a run creating its
context in the main thread would raise. Several ranks (DDP) create theirs in the main thread, as before: each
joins its process group on its own device first.

The FLOP count (on a meta copy of the model) is made once for a model and input: the first run keeps it in the
sweep's shared folder (``HARNESS_SHARED_DATA``, as the synthetic data) and in the harness's cache folder, and the
later runs of the same model and patch read it there, in this sweep or a later command (a single ``run`` too).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import torch

from harness.config.targets import setting_args
from harness.config.workload import WorkloadSpec
from harness.fileio import cache_dir, write_text_atomic
from harness.workload import shared_data, trimmed_imports


def import_workload(workload: WorkloadSpec) -> None:
    """Import the modules of the workload's model, loss and dataset ``_target_``s (MONAI's networks, a user's
    module); a module that fails to import is left to the build, which says so in the run's record. A reference
    workload's MONAI without the optional packages it never uses (``harness.workload.trimmed_imports``)."""
    with trimmed_imports.trimmed(trimmed_imports.reference_only(workload)):
        for module in _modules(workload):
            try:
                importlib.import_module(module)
            except Exception:
                continue


def open_context(device: torch.device) -> None:
    """Create the device's context now (CUDA: the driver's context on this run's GPU); nothing elsewhere."""
    if device.type == "cuda":
        torch.zeros(1, device=device)


class ContextThread:
    """The CUDA context created in a thread of its own; :meth:`join` waits for it and raises what it raised."""

    def __init__(self, device: torch.device):
        self.device = device
        self.error: BaseException | None = None
        self.began: float | None = None  # UNIX times: the thread's own start and end (the record's phase marks)
        self.ended: float | None = None
        self.thread = threading.Thread(target=self._run, name="harness-cuda-context", daemon=True)

    def _run(self) -> None:
        self.began = time.time()
        try:
            open_context(self.device)
        except BaseException as exc:  # raised again in the main thread, at the join
            self.error = exc
        finally:
            self.ended = time.time()

    def join(self) -> dict[str, float]:
        """Wait for the context; its thread's start and end as phase marks ("context_began", "context_ready")."""
        self.thread.join()
        if self.error is not None:
            error, self.error = self.error, None
            raise error
        return {"context_began": self.began, "context_ready": self.ended}


def start_context(kind: str, world_size: int) -> ContextThread | None:
    """The context of a single-device CUDA run started in a thread (None elsewhere: nothing to overlap on a CPU,
    and the ranks of a multi-device run create theirs when they join their process group)."""
    if kind != "cuda" or world_size > 1:
        return None
    opener = ContextThread(torch.device("cuda"))
    opener.thread.start()
    return opener


def finish_context(opener: ContextThread | None, device: torch.device) -> dict[str, float]:
    """The device's context, ready: the thread's joined (its exception raised here), or created now where none was
    started. The thread's phase marks (empty without one)."""
    if opener is None:
        open_context(device)
        return {}
    return opener.join()


def flops_per_sample(cfg, workload: WorkloadSpec, count: Callable[[], float | None]) -> float | None:
    """``count()`` (the model's training FLOPs per sample), counted once for this model and input and kept: in the
    sweep's shared folder, and in the harness's cache for later commands (``HARNESS_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/harness``), keyed by everything the count depends on (:func:`_key`)."""
    key = _key(cfg, workload)
    folder = os.environ.get(shared_data.ENV, "")
    paths = [Path(folder) / f"flops-{key}.json"] if folder and Path(folder).is_dir() else []
    paths.append(cache_dir() / "flops" / f"{key}.json")
    for path in paths:
        try:
            return json.loads(path.read_text())["flops"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
    flops = count()
    for path in paths:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(path, json.dumps({"flops": flops}))
        except OSError:
            continue
    return flops


# the harness's own code a count runs (in harness/workload/, beside shared_data): a change to it counts again
_COUNTING_CODE = ("flops.py", "train_flops.py", "build.py")


def _key(cfg, workload: WorkloadSpec) -> str:
    """Everything the count depends on: the model's node and settings, its input, the mode, its module's file and
    package version, torch's version and the harness's counting code."""
    files, versions = {}, {}
    for module in _modules(workload):
        path = getattr(sys.modules.get(module), "__file__", None)
        top = sys.modules.get(module.partition(".")[0])
        versions[module] = str(getattr(top, "__version__", ""))
        if path:
            try:
                files[path] = os.stat(path).st_mtime_ns
            except OSError:
                continue
    code = hashlib.sha256()
    for name in _COUNTING_CODE:
        try:
            code.update((Path(shared_data.__file__).parent / name).read_bytes())
        except OSError:
            continue
    blob = json.dumps({"model": workload.model_node, "settings": setting_args(workload.model_settings, cfg),
                       "in": workload.in_channels, "patch": list(cfg.data.patch_size), "mode": cfg.measure.mode,
                       "synthetic": workload.synthetic, "files": files, "versions": versions,
                       "torch": torch.__version__, "code": code.hexdigest()}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _modules(workload: WorkloadSpec) -> list[str]:
    nodes = (workload.model_node, workload.loss, workload.dataset)
    targets = [node.get("_target_") for node in nodes if isinstance(node, dict)]
    return [t.rsplit(".", 1)[0] for t in targets if isinstance(t, str) and "." in t]
