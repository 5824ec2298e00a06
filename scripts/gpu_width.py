"""The GPU plan's model of a rung's width and memory (``scripts/gpu_parts.py`` estimates with it): how a rung's
compute scales with ``model.width`` and ``model.features``, and whether its activations are likely over the card."""

from __future__ import annotations

from math import prod

from harness import api

CARD_GIB = 80  # the lent card's memory (an H100's; an H200 has more): a rung's activations over it end `oom`
BASIC_UNET_FEATURES = (32, 32, 64, 128, 256, 32)  # MONAI's own (harness_models/segmentation3d.py: torch not loaded)


def width_scale(settings: dict) -> float:
    """A rung's compute over its workload's own (model.width 1, its own features), from a stated model: a conv's FLOPs
    are c_in x c_out a voxel, and a level k stride-2 levels down has 8^-k of the voxels. With ``model.features``
    (BasicUNet's six counts) each convolution is counted (:func:`basic_unet_macs`: 220x MONAI's own for the
    October 2025 builder's 32..1024, where the FLOP counter says 218x); otherwise every channel count scales with
    ``model.width``, so the compute with its square."""
    width = float(settings.get("model.width") or 1.0)
    features = settings.get("model.features")
    if not features:
        return width ** 2
    return basic_unet_macs([c * width for c in features]) / basic_unet_macs(BASIC_UNET_FEATURES)


def basic_unet_macs(f: list[float] | tuple[float, ...]) -> float:
    """Multiply-adds a full-resolution voxel of BasicUNet with features f0..f5 (f5: the full-resolution decoder's):
    each level's two convolutions (c_in x c_out + c x c), 8^-k of the voxels at level k."""
    down = sum((([1] + list(f))[k] * f[k] + f[k] ** 2) / 8 ** k for k in range(5))
    up = sum(3 * f[k] ** 2 / 8 ** k for k in (1, 2, 3))  # concatenated skip (2c -> c), then c -> c
    return down + up + (f[1] + f[0]) * f[5] + f[5] ** 2


def activation_gib(settings: dict) -> float:
    """A lower bound on a BasicUNet rung's activations, in GiB: the full-resolution decoder's (``model.features``'
    last count) alone, about six tensors of its channels kept for the backward pass, 4 bytes a value in FP32 and 2
    under mixed precision (0 without features)."""
    features = settings.get("model.features")
    if not features:
        return 0.0
    preset = _full_preset(settings.get("workload", "unet3d"))
    voxels = prod(settings.get("data.patch_size") or preset.input_shape[1:])
    batch = int(settings.get("batch_size") or preset.batch_size)
    size = 4 if str(settings.get("precision", "32")) == "32" else 2
    return 6 * features[-1] * float(settings.get("model.width") or 1.0) * voxels * batch * size / 2 ** 30


def over_card(settings: dict) -> str:
    """Why a rung likely runs out of memory on the card (``memory.limit_gb``, else the lent one's), or ""."""
    card = float(settings.get("memory.limit_gb") or CARD_GIB)
    need = activation_gib(settings)
    return f"likely over the {card:g} GiB card (>= {need:.0f} GiB of full-resolution activations)" if need > card \
        else ""


def _full_preset(name: str):
    return api.workload(name).sizes["full"]
