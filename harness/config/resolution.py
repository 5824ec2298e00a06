"""Resolution for a machine: every "auto" and unset value made concrete for the device the run will use, and the
machine's bounds on the settings checked. The device facts (``cuda_available``) are passed by the caller, so that
nothing here imports torch.
"""

from __future__ import annotations

import copy
import dataclasses
import warnings
from typing import Callable, Collection

from harness.config import axes as axes_mod
from harness.config import machine, targets
from harness.config import workload as workloads_mod
from harness.config.schema import RunConfig, SweepConfig
from harness.config.validate import check_shape, validate


def resolve(cfg: RunConfig, cuda_available: bool, ladder_keys: Collection[str] = (),
            dataset_shape: Callable[[RunConfig], list[int]] | None = None) -> RunConfig:
    """A validated copy with every 'auto' and unset value made concrete for this device (ValueError naming what is
    wrong). Loader workers beyond this machine's bound are refused, and above its CPUs they are warned about
    (:class:`~harness.config.machine.SettingWarning`), except for ``ladder_keys``, the settings a ladder's rung
    chose: such a rung is recorded as skipped (``harness.workload.applicability``), not the sweep refused.
    ``dataset_shape``: reads the input shape of a workload's own dataset that gives none
    (``harness.workload.first_item.input_shape``, passed by the caller: building a dataset is not this layer's)."""
    validate(cfg)
    _check_workers(cfg, [k for k in machine.WORKER_KEYS if k not in ladder_keys])
    out = copy.deepcopy(cfg)
    if out.device == "auto":
        out.device = "cuda" if cuda_available else "cpu"
    elif out.device == "cuda" and not cuda_available:
        raise ValueError("device='cuda' was asked for, but torch sees no CUDA device here; use device=cpu or auto")
    if out.size == "auto":
        out.size = "full" if out.device == "cuda" else "smoke"
    if not workloads_mod.is_builtin(out.workload):  # editing the user's model file measures it anew
        out.workload.source_sha = targets.source_sha(out.workload)
    if workloads_mod.shape_from_data(out.workload):
        _shape_from_data(out, dataset_shape)
    _fill_from_size(out)
    axes_mod.name_units(out.workload)
    on_cuda = out.device == "cuda"
    if out.data.pin_memory == "auto":
        out.data.pin_memory = on_cuda
    if out.cudnn_benchmark == "auto":
        out.cudnn_benchmark = on_cuda
    out.sweep = SweepConfig(**dataclasses.asdict(cfg.sweep))
    return out


def _shape_from_data(cfg: RunConfig, dataset_shape: Callable[[RunConfig], list[int]] | None) -> None:
    """The workload's input_shape, which it leaves to its own dataset, read from the dataset's first item."""
    spec = cfg.workload
    if dataset_shape is None:
        raise ValueError(f"workload {spec.name!r} has no input shape: set workload.input_shape=[C, ...] (one sample, "
                         "channels first)")
    spec.input_shape = [int(v) for v in dataset_shape(cfg)]
    check_shape(spec)


def _fill_from_size(cfg: RunConfig) -> None:
    """Settings left unset take the size preset's values (the size is concrete by now)."""
    preset = cfg.workload.sizes[cfg.size]
    if cfg.batch_size is None:
        cfg.batch_size = preset.batch_size
    if cfg.data.patch_size is None:
        cfg.data.patch_size = cfg.workload.sample_shape(cfg.size)[1:]
    if cfg.data.epoch_steps is None:
        cfg.data.epoch_steps = preset.epoch_steps
    if cfg.measure.warmup_steps is None:
        cfg.measure.warmup_steps = preset.warmup_steps
    if cfg.measure.steps is None:
        cfg.measure.steps = preset.steps


def _check_workers(cfg: RunConfig, keys: list[str]) -> None:
    over = machine.workers_over_bound(cfg, keys)
    if over:
        raise ValueError(over)
    for text in machine.workers_over_cpus(cfg, keys):
        warnings.warn(text, machine.SettingWarning, stacklevel=3)


def per_device_batch(cfg: RunConfig) -> int:
    """Samples per device per micro-batch: ``batch_size`` (weak scaling), or its share of it (strong scaling)."""
    return cfg.batch_size // cfg.devices if cfg.scaling == "strong" else cfg.batch_size
