"""A LightningModule for 3D segmentation, as the connectomics guide's framework (PyTorch Lightning) would hold it: a
small residual 3D network, ``training_step`` with a Dice + cross-entropy loss and ``self.log``, ``configure_optimizers``
with a scheduler, ``train_dataloader`` over random volumes, and ``validation_step`` (logging a Dice score) with its
``val_dataloader`` (for ``val.every_n_steps=N``). The harness measures it without a Trainer:
``pip install -e '.[lightning]'`` installs Lightning.

Measured with its config file (``examples/conf/workload/lightning_seg3d.yaml``)::

    python -m harness run --config-dir examples/conf workload=lightning_seg3d
    python -m harness sweep --config-dir examples/conf workload=lightning_seg3d +ladder=precision
    python -m harness run --config-dir examples/conf workload=lightning_seg3d val.every_n_steps=5 devices=2
"""

from __future__ import annotations

import lightning as L
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset


class Block(nn.Module):
    """Convolution, normalisation, activation, with a residual connection."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv3d(channels, channels, kernel_size=3, padding=1)
        self.norm = nn.GroupNorm(4, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.relu(self.norm(self.conv(x)))


class RandomVolumes(Dataset):
    """Random one-channel patches of ``patch`` sides with a class per voxel: (image [1, D, H, W], label [D, H, W])."""

    def __init__(self, patch=(16, 16, 16), classes: int = 3, items: int = 32, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.images = torch.randn(items, 1, *patch, generator=g)
        self.labels = torch.randint(0, classes, (items, *patch), generator=g)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.images[index], self.labels[index]


class SegModule(L.LightningModule):
    """Stem, residual 3D blocks, a 1x1x1 head; Dice + cross-entropy; AdamW with cosine annealing."""

    def __init__(self, classes: int = 3, channels: int = 16, depth: int = 2, patch=(16, 16, 16), lr: float = 1e-3,
                 batch_size: int = 2):
        super().__init__()
        self.save_hyperparameters()
        self.stem = nn.Conv3d(1, channels, kernel_size=3, padding=1)
        self.blocks = nn.Sequential(*[Block(channels) for _ in range(depth)])
        self.head = nn.Conv3d(channels, classes, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)))

    def training_step(self, batch, batch_idx):
        image, label = batch
        logits = self(image)
        ce = F.cross_entropy(logits, label)
        probs = logits.float().softmax(dim=1)
        onehot = F.one_hot(label, self.hparams.classes).permute(0, 4, 1, 2, 3).to(probs.dtype)
        dice = 1 - (2 * (probs * onehot).sum() + 1) / (probs.sum() + onehot.sum() + 1)
        loss = ce + dice
        self.log("train/loss", loss)  # without a Trainer (as the harness measures it) this returns at once
        return loss

    def validation_step(self, batch, batch_idx):
        image, label = batch
        predicted = F.one_hot(self(image).argmax(dim=1), self.hparams.classes)
        truth = F.one_hot(label, self.hparams.classes)
        dice = (2 * (predicted * truth).sum() + 1) / (predicted.sum() + truth.sum() + 1)
        self.log("val/dice", dice)  # logged, nothing returned: Lightning's usual validation step

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=1000)
        return {"optimizer": optimizer, "lr_scheduler": scheduler}

    def train_dataloader(self):
        dataset = RandomVolumes(self.hparams.patch, self.hparams.classes)
        return DataLoader(dataset, batch_size=self.hparams.batch_size, shuffle=True)

    def val_dataloader(self):
        dataset = RandomVolumes(self.hparams.patch, self.hparams.classes, items=8, seed=1)
        return DataLoader(dataset, batch_size=self.hparams.batch_size)
