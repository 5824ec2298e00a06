"""A torchvision detection model with list-of-dict targets, as a user's own detection training has it: a tiny Faster
R-CNN built from its parts (no weights: a small convolutional backbone, one feature map), a dataset of images with
a varying number of boxes each, a collate function that keeps the lists (images and target dicts cannot be stacked),
and a step that returns the model's dict of losses (the harness sums it).

Measured with its config file (``examples/conf/workload/detection.yaml``)::

    python -m harness run --config-dir examples/conf workload=detection
    python -m harness sweep --config-dir examples/conf workload=detection +ladder=precision
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import Dataset
from torchvision.models.detection import FasterRCNN
from torchvision.models.detection.anchor_utils import AnchorGenerator
from torchvision.ops import MultiScaleRoIAlign


def tiny_faster_rcnn(num_classes: int = 3, image_size=(64, 64), channels: int = 32) -> FasterRCNN:
    """Faster R-CNN over a 3-convolution backbone (stride 8), randomly initialised: no download, no weights. The
    model's own transform resizes images to ``image_size`` (its min_size and max_size), as torchvision's do."""
    min_size, max_size = min(image_size), max(image_size)
    backbone = nn.Sequential(
        nn.Conv2d(3, channels, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(channels, channels, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(channels, channels, 3, stride=2, padding=1), nn.ReLU(),
    )
    backbone.out_channels = channels
    anchors = AnchorGenerator(sizes=((16, 32, 64),), aspect_ratios=((0.5, 1.0, 2.0),))
    roi_pool = MultiScaleRoIAlign(featmap_names=["0"], output_size=7, sampling_ratio=2)
    return FasterRCNN(backbone, num_classes=num_classes, rpn_anchor_generator=anchors, box_roi_pool=roi_pool,
                      min_size=min_size, max_size=max_size, rpn_batch_size_per_image=64, box_batch_size_per_image=64)


class RandomBoxes(Dataset):
    """Random RGB images ([3, H, W] float in [0, 1]) with 1 to ``max_boxes`` boxes each: ``(image, {"boxes": [n, 4]
    float (x1, y1, x2, y2), "labels": [n] int64})``, torchvision's detection format."""

    def __init__(self, size=(64, 64), num_classes: int = 3, max_boxes: int = 4, items: int = 32, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        h, w = size
        self.images = torch.rand(items, 3, h, w, generator=g)
        self.targets = []
        for _ in range(items):
            n = int(torch.randint(1, max_boxes + 1, (1,), generator=g))
            corner = torch.rand(n, 2, generator=g) * torch.tensor([w * 0.6, h * 0.6])
            extent = 8 + torch.rand(n, 2, generator=g) * torch.tensor([w * 0.3, h * 0.3])
            boxes = torch.cat([corner, corner + extent], dim=1)
            self.targets.append({"boxes": boxes, "labels": torch.randint(1, num_classes, (n,), generator=g)})

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int):
        return self.images[index], self.targets[index]


def collate(items):
    """A batch as detection models take it: (a list of images, a list of target dicts)."""
    images, targets = zip(*items)
    return list(images), list(targets)


def step(model: nn.Module, batch) -> dict[str, torch.Tensor]:
    """The training step: the model's losses (classifier, box regression, objectness, RPN box regression)."""
    images, targets = batch
    return model(images, targets)
