"""A training step with two losses, as a user's own training would have it: a 2D network with a segmentation head
and a classification head, a dataset of dicts, and a step function that returns both losses (the harness sums a
mapping of losses, as torchvision's detection models return them). Plain PyTorch, nothing of the harness.

Measured with its config file (``examples/conf/workload/two_losses.yaml``)::

    python -m harness run --config-dir examples/conf workload=two_losses
    python -m harness sweep --config-dir examples/conf workload=two_losses +ladder=precision
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import Dataset


class TwoHeadNet(nn.Module):
    """A small encoder with two heads: per-pixel classes ([N, classes, H, W]) and an image class ([N, labels])."""

    def __init__(self, in_channels: int = 1, classes: int = 3, labels: int = 4, channels: int = 16):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv2d(in_channels, channels, 3, padding=1), nn.GroupNorm(4, channels), nn.ReLU(),
            nn.Conv2d(channels, channels, 3, padding=1), nn.GroupNorm(4, channels), nn.ReLU(),
        )
        self.segment = nn.Conv2d(channels, classes, 1)
        self.classify = nn.Linear(channels, labels)

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.encoder(image)
        return self.segment(features), self.classify(features.mean(dim=(2, 3)))


class ImagesWithMasks(Dataset):
    """Random images with a mask and an image label, each item a dict: ``{"image", "mask", "label"}``."""

    def __init__(self, size: list[int] | tuple[int, ...] = (32, 32), classes: int = 3, labels: int = 4,
                 items: int = 64, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.images = torch.randn(items, 1, *size, generator=g)
        self.masks = torch.randint(0, classes, (items, *size), generator=g)
        self.labels = torch.randint(0, labels, (items,), generator=g)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"image": self.images[index], "mask": self.masks[index], "label": self.labels[index]}


def step(model: nn.Module, batch: dict[str, torch.Tensor], aux_weight: float = 0.5) -> dict[str, torch.Tensor]:
    """The training step: both heads' losses, by name (the harness sums them, and steps on the sum)."""
    masks, labels = model(batch["image"])
    return {"segmentation": F.cross_entropy(masks, batch["mask"]),
            "classification": aux_weight * F.cross_entropy(labels, batch["label"])}
