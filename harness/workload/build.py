"""The workload's objects, built in the measuring child (imports torch): model, loss, optimizer, checkpoint
unit types and the user's dataset, each from its ``_target_`` node plus the harness settings it is handed."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from harness.config.targets import instantiate, locate, setting_args
from harness.config.workload import WorkloadSpec


def build_all(cfg) -> tuple[nn.Module, nn.Module, tuple[type, ...]]:
    """(model, loss, checkpoint unit types) of a resolved config's workload."""
    return build_model(cfg), build_loss(cfg), checkpoint_unit_types(cfg.workload)


def build_model(cfg) -> nn.Module:
    spec: WorkloadSpec = cfg.workload
    return instantiate(spec.model_node, **setting_args(spec.model_settings, cfg))


def build_loss(cfg) -> nn.Module:
    spec: WorkloadSpec = cfg.workload
    if spec.loss is None:
        return default_loss(spec)
    return instantiate(spec.loss, **setting_args(spec.loss_settings, cfg))


def default_loss(spec: WorkloadSpec) -> nn.Module:
    """The loss of a workload that names none: mean squared error for a regression target, else cross-entropy."""
    return nn.MSELoss() if spec.target == "regression" else nn.CrossEntropyLoss()


def build_optimizer(spec: WorkloadSpec, params, **kwargs) -> torch.optim.Optimizer:
    """The workload's optimizer (a ``_partial_`` node) over ``params``, with the harness's own keyword arguments
    (fused, foreach) added."""
    make = instantiate(spec.optimizer) if spec.optimizer is not None else torch.optim.AdamW
    return make(params, **kwargs)


def checkpoint_unit_types(spec: WorkloadSpec) -> tuple[type, ...]:
    return tuple(locate(path, "workload.checkpoint_units") for path in spec.checkpoint_units)


def build_user_dataset(spec: WorkloadSpec, cfg=None):
    """The user's dataset: the ``dataset`` node built with the settings it is handed (``dataset_settings``), and
    called with no arguments when it is a partial."""
    return user_dataset(spec, setting_args(spec.dataset_settings, cfg) if cfg is not None else {})


def user_dataset(spec: WorkloadSpec, args: dict[str, Any]):
    """The user's dataset built with ``args`` (its settings' values, ``setting_args``)."""
    made = instantiate(spec.dataset, **args)
    return made() if callable(made) and not hasattr(made, "__getitem__") else made
