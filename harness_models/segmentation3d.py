"""3D segmentation networks from MONAI, built from plain typed arguments, and a stand-in of the connectomics
framework's preloaded-cache loader (:class:`CachedVolumeCrops`)."""

from __future__ import annotations

import random

import monai.losses  # noqa: F401 - the warm launcher imports this module once, before any run forks
import monai.networks.nets  # noqa: F401 - the warm launcher imports this module once, before any run forks
import torch
from torch import nn
from torch.utils.data import Dataset

UNET_FILTERS = (32, 64, 128, 256, 512)
BASIC_UNET_FEATURES = (32, 32, 64, 128, 256, 32)
# How PyTorch Connectomics' ``monai_basic_unet3d`` builder pads its five ``filters`` to BasicUNet's six counts: the
# October 2025 builder (the config schema the connectomics guide's keys belong to: flat ``system.num_cpus``,
# ``data.use_preloaded_cache``, ``visualization.enabled``) appends the last filter doubled; from late November 2025 it
# repeats it. BasicUNet's sixth count is its full-resolution decoder level.
CONNECTOMICS_PADDING = ("double", "repeat")
MEDNEXT_SIZES = ("S", "B", "M", "L")


def scaled(channels: tuple[int, ...], width: float, multiple: int = 4) -> tuple[int, ...]:
    """Channel counts multiplied by ``width``, kept positive and divisible by ``multiple``."""
    return tuple(max(multiple, int(round(c * width / multiple)) * multiple) for c in channels)


def unet3d(in_channels: int, out_channels: int, width: float = 1.0, num_res_units: int = 2,
           depth: int | None = None) -> nn.Module:
    """MONAI ``UNet`` as in the connectomics guide: filters 32..512, 2 residual units per level; ``depth`` levels
    (None: all 5; the guide's "Shallower network" is 4: filters 32..256)."""
    from monai.networks.nets import UNet

    channels = scaled(UNET_FILTERS[: depth or len(UNET_FILTERS)], width)
    return UNet(
        spatial_dims=3,
        in_channels=in_channels,
        out_channels=out_channels,
        channels=channels,
        strides=(2,) * (len(channels) - 1),
        num_res_units=num_res_units,
    )


def basic_unet3d(in_channels: int, out_channels: int, width: float = 1.0,
                 features: tuple[int, ...] | list[int] | None = None) -> nn.Module:
    """MONAI ``BasicUNet`` (two convolutions per level, no residual units); ``features`` (six counts, None: MONAI's
    default 32, 32, 64, 128, 256, 32) scaled by ``width``."""
    from monai.networks.nets import BasicUNet

    return BasicUNet(
        spatial_dims=3,
        in_channels=in_channels,
        out_channels=out_channels,
        features=scaled(tuple(features) if features else BASIC_UNET_FEATURES, width),
    )


def connectomics_basic_unet_features(filters: tuple[int, ...] | list[int], padding: str = "double") -> tuple[int, ...]:
    """BasicUNet's six counts as the connectomics framework's ``monai_basic_unet3d`` builds them from ``filters``:
    padded to six from the last, doubled (``padding="double"``, the October 2025 builder) or repeated ("repeat")."""
    if padding not in CONNECTOMICS_PADDING:
        raise ValueError(f"padding={padding!r} is not one of {CONNECTOMICS_PADDING}")
    counts = [int(c) for c in filters]
    while len(counts) < 6:
        counts.append(counts[-1] * 2 if padding == "double" else counts[-1])
    return tuple(counts[:6])


def mednext(
    in_channels: int,
    out_channels: int,
    size: str = "S",
    kernel_size: int = 3,
    deep_supervision: bool = False,
    width: float = 1.0,
) -> nn.Module:
    """MONAI ``MedNeXt`` in the paper's S/B/M/L configurations (``init_filters`` scaled by ``width``)."""
    from monai.networks.nets.mednext import MedNeXt

    if size not in MEDNEXT_SIZES:
        raise ValueError(f"MedNeXt size {size!r} is not one of {MEDNEXT_SIZES}")
    return MedNeXt(
        spatial_dims=3,
        init_filters=max(4, int(round(32 * width))),
        in_channels=in_channels,
        out_channels=out_channels,
        kernel_size=kernel_size,
        deep_supervision=deep_supervision,
        use_residual_connection=True,
        norm_type="group",
        **_MEDNEXT_VARIANTS[size],
    )


# The paper's S/B/M/L settings, as in MONAI's create_mednext (which has no width argument).
_MEDNEXT_VARIANTS = {
    "S": dict(encoder_expansion_ratio=2, decoder_expansion_ratio=2, bottleneck_expansion_ratio=2,
              blocks_down=(2, 2, 2, 2), blocks_bottleneck=2, blocks_up=(2, 2, 2, 2)),
    "B": dict(encoder_expansion_ratio=(2, 3, 4, 4), decoder_expansion_ratio=(4, 4, 3, 2), bottleneck_expansion_ratio=4,
              blocks_down=(2, 2, 2, 2), blocks_bottleneck=2, blocks_up=(2, 2, 2, 2)),
    "M": dict(encoder_expansion_ratio=(2, 3, 4, 4), decoder_expansion_ratio=(4, 4, 3, 2), bottleneck_expansion_ratio=4,
              blocks_down=(3, 4, 4, 4), blocks_bottleneck=4, blocks_up=(4, 4, 4, 3)),
    "L": dict(encoder_expansion_ratio=(3, 4, 8, 8), decoder_expansion_ratio=(8, 8, 4, 3), bottleneck_expansion_ratio=8,
              blocks_down=(3, 4, 8, 8), blocks_bottleneck=8, blocks_up=(8, 8, 4, 3)),
}


def checkpoint_units_3d() -> tuple[type[nn.Module], ...]:
    """Module types whose activations are recomputed under activation checkpointing."""
    from monai.networks.blocks import ResidualUnit
    from monai.networks.blocks.mednext_block import MedNeXtBlock, MedNeXtDownBlock, MedNeXtUpBlock
    from monai.networks.nets.basic_unet import Down, TwoConv, UpCat

    return (ResidualUnit, TwoConv, Down, UpCat, MedNeXtBlock, MedNeXtDownBlock, MedNeXtUpBlock)


def dice_ce_loss(deep_supervision: bool = False) -> nn.Module:
    """MONAI DiceCE on one-hot labels; with deep supervision, a halving-weighted sum over scales."""
    from monai.losses import DiceCELoss

    base = DiceCELoss(to_onehot_y=True, softmax=True)
    return DeepSupervisionLoss(base) if deep_supervision else base


class DeepSupervisionLoss(nn.Module):
    """Weighted sum of a loss over the outputs of every scale (labels resized by nearest)."""

    def __init__(self, loss: nn.Module):
        super().__init__()
        self.loss = loss

    def forward(self, outputs, target: torch.Tensor) -> torch.Tensor:
        if isinstance(outputs, torch.Tensor):
            return self.loss(outputs, target)
        total = outputs[0].new_zeros(())
        for i, out in enumerate(outputs):
            y = target if out.shape[2:] == target.shape[2:] else nn.functional.interpolate(
                target.float(), size=out.shape[2:], mode="nearest"
            ).to(target.dtype)
            total = total + self.loss(out, y) * 0.5**i
        return total


class CachedVolumeCrops(Dataset):
    """A stand-in of the connectomics framework's preloaded cache (``use_preloaded_cache: true``: its
    ``CachedVolumeDataset``, October 2025): volumes held in RAM as (C, Z, Y, X) numpy arrays, each item a random crop
    by numpy slicing (a view, no copy), handed on as a dict ``{"image", "label"}`` with the label in the dtype the
    volume keeps (uint8), for the DataLoader's default collate to stack; no transforms (the guide's augmentation is
    off). The volumes are random (their values do not change a crop's cost), ``volume_scale`` times the patch a
    side, as the harness's own in-RAM volumes."""

    def __init__(self, patch_size=(112, 112, 112), length: int = 64, num_volumes: int = 4, volume_scale: float = 1.5,
                 seed: int = 0):
        import numpy as np

        self.patch_size, self.length = tuple(int(s) for s in patch_size), int(length)
        shape = tuple(int(s * volume_scale) for s in self.patch_size)
        rng = np.random.default_rng(seed)
        self.images = [rng.standard_normal((1, *shape), dtype=np.float32) for _ in range(num_volumes)]
        self.labels = [rng.integers(0, 2, (1, *shape), dtype=np.uint8) for _ in range(num_volumes)]

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict:
        # drawn from Python's random (which PyTorch seeds in each loader worker), not from the index: as it does
        volume = random.randint(0, len(self.images) - 1)
        image, label = self.images[volume], self.labels[volume]
        start = [random.randint(0, full - patch) for full, patch in zip(image.shape[1:], self.patch_size)]
        crop = (slice(None),) + tuple(slice(s, s + p) for s, p in zip(start, self.patch_size))
        return {"image": image[crop], "label": label[crop]}
