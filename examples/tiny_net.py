"""A small 3D segmentation network, as a user's own model would be: plain PyTorch, nothing of the harness.

Measured with its config file (``examples/conf/workload/tiny_net.yaml``)::

    python -m harness run --config-dir examples/conf workload=tiny_net
    python -m harness sweep --config-dir examples/conf workload=tiny_net +ladder=precision
"""

from __future__ import annotations

from torch import nn


class Block(nn.Module):
    """Convolution, normalisation, activation, with a residual connection: the unit activation checkpointing
    recomputes (``checkpoint_units`` in the config file)."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv3d(channels, channels, kernel_size=3, padding=1)
        self.norm = nn.GroupNorm(4, channels)
        self.act = nn.ReLU()

    def forward(self, x):
        return x + self.act(self.norm(self.conv(x)))


class TinySegNet(nn.Module):
    """Stem, ``depth`` residual blocks, a 1x1x1 head: [N, in_channels, D, H, W] -> [N, num_classes, D, H, W]."""

    def __init__(self, in_channels: int = 1, num_classes: int = 3, channels: int = 16, depth: int = 2):
        super().__init__()
        self.stem = nn.Conv3d(in_channels, channels, kernel_size=3, padding=1)
        self.blocks = nn.Sequential(*[Block(channels) for _ in range(depth)])
        self.head = nn.Conv3d(channels, num_classes, kernel_size=1)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)))
