"""The reference workloads: a registry of what to train, at which size, measured in which unit.

This module is imported by the parent process to resolve settings, so it never imports torch at
module level; model builders in ``models/`` are imported only by the measuring child.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from harness.registry import Registry


@dataclass(frozen=True)
class SizePreset:
    """Defaults a size fills in for settings left unset. ``width`` multiplies the model's channels."""

    batch_size: int
    patch_size: tuple[int, ...]
    warmup_steps: int
    steps: int
    epoch_steps: int
    width: float


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    spatial_dims: int
    in_channels: int
    num_classes: int
    unit: str  # what `units_per_s` counts: "voxels" or "images"
    loss: str
    optimizer: str
    patch_multiple: int  # every spatial size must be a multiple of this (downsampling depth)
    sizes: dict[str, SizePreset]
    build: Callable[[Any], Any]  # (ResolvedConfig) -> (model, loss_fn, checkpoint module types)
    deep_supervision: bool = False
    mednext_options: bool = False
    min_side: int = 1  # smallest spatial side the network accepts

    def units_per_sample(self, patch_size: tuple[int, ...]) -> int:
        if self.unit == "images":
            return 1
        n = 1
        for s in patch_size:
            n *= s
        return n


WORKLOADS: Registry[Workload] = Registry("workload")


def _build_unet3d(cfg):
    from models import segmentation3d as seg

    model = seg.unet3d(1, 2, width=cfg.effective_width)
    return model, seg.dice_ce_loss(False), seg.checkpoint_units_3d()


def _build_basic_unet3d(cfg):
    from models import segmentation3d as seg

    model = seg.basic_unet3d(1, 2, width=cfg.effective_width)
    return model, seg.dice_ce_loss(False), seg.checkpoint_units_3d()


def _build_mednext(cfg):
    from models import segmentation3d as seg

    model = seg.mednext(
        1,
        2,
        size=cfg.model.mednext_size,
        kernel_size=cfg.model.kernel_size,
        deep_supervision=cfg.model.deep_supervision,
        width=cfg.effective_width,
    )
    return model, seg.dice_ce_loss(cfg.model.deep_supervision), seg.checkpoint_units_3d()


def _build_resnet50(cfg):
    from torch import nn

    from models import classification2d as cls

    model = cls.resnet50(num_classes=1000, width=cfg.model.width)
    return model, nn.CrossEntropyLoss(), cls.checkpoint_units_2d()


# Full sizes follow the guides: the connectomics UNet (patch 112^3, batch 4), ImageNet ResNet-50
# (224x224, batch 256). Smoke sizes keep a step well under a second on a 2-core CPU.
_SEG_SIZES = {
    "full": SizePreset(batch_size=4, patch_size=(112, 112, 112), warmup_steps=10, steps=50, epoch_steps=250, width=1.0),
    "smoke": SizePreset(batch_size=2, patch_size=(32, 32, 32), warmup_steps=3, steps=20, epoch_steps=10, width=0.25),
}

WORKLOADS.register(
    "unet3d",
    Workload(
        name="unet3d",
        description="MONAI UNet 3D, filters 32-512, 2 residual units, DiceCE, Adam",
        spatial_dims=3, in_channels=1, num_classes=2, unit="voxels", loss="DiceCE", optimizer="Adam",
        patch_multiple=16, min_side=32, sizes=_SEG_SIZES, build=_build_unet3d,
    ),
)
WORKLOADS.register(
    "basic_unet3d",
    Workload(
        name="basic_unet3d",
        description="MONAI BasicUNet 3D, features 32-256, DiceCE, Adam (any patch size >= 16: it pads skips)",
        spatial_dims=3, in_channels=1, num_classes=2, unit="voxels", loss="DiceCE", optimizer="Adam",
        patch_multiple=1, min_side=16, sizes=_SEG_SIZES, build=_build_basic_unet3d,
    ),
)
WORKLOADS.register(
    "mednext",
    Workload(
        name="mednext",
        description="MONAI MedNeXt 3D (S/B/M/L, kernel 3 or 5), DiceCE (+deep supervision), AdamW",
        spatial_dims=3, in_channels=1, num_classes=2, unit="voxels", loss="DiceCE", optimizer="AdamW",
        patch_multiple=16, min_side=32,
        sizes={
            "full": SizePreset(batch_size=2, patch_size=(128, 128, 128), warmup_steps=10, steps=50, epoch_steps=250, width=1.0),
            "smoke": SizePreset(batch_size=2, patch_size=(32, 32, 32), warmup_steps=3, steps=20, epoch_steps=10, width=0.25),
        },
        build=_build_mednext, deep_supervision=True, mednext_options=True,
    ),
)
WORKLOADS.register(
    "resnet50",
    Workload(
        name="resnet50",
        description="torchvision ResNet-50, 1000 classes, cross-entropy, SGD with momentum",
        spatial_dims=2, in_channels=3, num_classes=1000, unit="images", loss="CrossEntropy", optimizer="SGD",
        patch_multiple=32,
        sizes={
            "full": SizePreset(batch_size=256, patch_size=(224, 224), warmup_steps=10, steps=50, epoch_steps=250, width=1.0),
            "smoke": SizePreset(batch_size=4, patch_size=(64, 64), warmup_steps=3, steps=20, epoch_steps=10, width=1.0),
        },
        build=_build_resnet50,
    ),
)
