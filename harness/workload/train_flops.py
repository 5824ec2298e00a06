"""A training sample's FLOPs counted two ways, on the meta device (no compute): model FLOPs, the plain model's
forward and backward (MLPerf's rule for utilisation: recomputation excluded; the record's ``flops_per_sample``,
its ``mfu``), and hardware FLOPs, the model as the run trains it, activation checkpointing's recomputation included
(``hardware_flops_per_sample``, ``mfu_hardware``). A language model's sample is one sequence of token ids.
"""

from __future__ import annotations

import torch

from harness.workload import lm_knobs
from harness.workload.build import build_model, checkpoint_unit_types
from harness.workload.flops import count_train_flops
from harness.workload.knobs import apply_activation_checkpointing


def sample_shape(cfg, workload) -> tuple[tuple[int, ...], torch.dtype]:
    """One sample as the model takes it: token ids [1, length] (synthetic: tokens), else [1, C, *patch] floats."""
    if workload.synthetic == "tokens":
        return (1, int(cfg.data.patch_size[-1])), torch.long
    return (1, workload.in_channels, *cfg.data.patch_size), torch.float32


def model_flops(cfg, workload) -> float | None:
    """Model FLOPs of one sample (None when the model cannot run on meta tensors: never a guess)."""
    if cfg.measure.mode == "loader":
        return None
    shape, dtype = sample_shape(cfg, workload)
    try:
        return count_train_flops(lambda: build_model(cfg), shape, dtype=dtype)
    except Exception:
        return None


def hardware_flops(cfg, workload, model: float | None) -> float | None:
    """Hardware FLOPs of one sample: ``model`` where nothing is recomputed; with activation checkpointing, counted
    on the checkpointed model (its policy's recomputation in the backward)."""
    if model is None or not cfg.activation_checkpointing:
        return model
    def checkpointed():
        built = build_model(cfg)
        apply_activation_checkpointing(built, checkpoint_unit_types(workload),
                                       **lm_knobs.checkpoint_kwargs(cfg.lm.checkpoint_policy))
        return built

    shape, dtype = sample_shape(cfg, workload)
    try:
        return count_train_flops(checkpointed, shape, dtype=dtype)
    except Exception:
        return None
