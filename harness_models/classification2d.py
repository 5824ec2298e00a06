"""2D classification networks from torchvision."""

from __future__ import annotations

import torchvision.models  # noqa: F401 - the warm launcher imports this module once, before any run forks
from torch import nn


def resnet50(num_classes: int = 1000, width: float = 1.0) -> nn.Module:
    """torchvision ResNet-50, randomly initialised (weights are never downloaded)."""
    from torchvision.models import resnet50 as tv_resnet50

    return tv_resnet50(weights=None, num_classes=num_classes, width_per_group=max(8, int(round(64 * width))))


def checkpoint_units_2d() -> tuple[type[nn.Module], ...]:
    from torchvision.models.resnet import Bottleneck

    return (Bottleneck,)
