"""Synthetic data that looks like each workload's field, served through a real DataLoader.

3D: a few volumes held in RAM (the connectomics guide's preloaded cache), each with labelled
ellipsoid "structures" on a noisy background; every item is a random crop (+ flip) of one.
2D: uint8 images held in RAM with class labels; every item is a random crop + flip, converted
to float and normalised as torchvision's ImageNet pipeline does.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


def make_volume(shape: tuple[int, ...], rng: np.random.Generator, n_structures: int = 12):
    """A float32 image and an int64 label map with ``n_structures`` labelled ellipsoids."""
    grids = np.meshgrid(*[np.arange(s, dtype=np.float32) for s in shape], indexing="ij")
    label = np.zeros(shape, dtype=np.int64)
    for _ in range(n_structures):
        centre = [rng.uniform(0, s) for s in shape]
        radii = [rng.uniform(s / 16, s / 6) for s in shape]
        dist = sum(((g - c) / r) ** 2 for g, c, r in zip(grids, centre, radii))
        label[dist <= 1.0] = 1
    image = label.astype(np.float32) * 0.8 + rng.normal(0.0, 0.3, size=shape).astype(np.float32)
    return image, label


class RandomCropVolumes(Dataset):
    """Random patches (image [1, D, H, W], label [1, D, H, W]) cropped from in-RAM volumes."""

    def __init__(self, patch_size, length: int, num_volumes: int = 4, seed: int = 0):
        self.patch_size = tuple(patch_size)
        self.length = length
        rng = np.random.default_rng(seed)
        volume_shape = tuple(int(s * 1.5) for s in self.patch_size)
        pairs = [make_volume(volume_shape, rng) for _ in range(num_volumes)]
        self.images = [torch.from_numpy(img)[None] for img, _ in pairs]
        self.labels = [torch.from_numpy(lbl)[None] for _, lbl in pairs]
        self.seed = seed

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        v = int(torch.randint(len(self.images), (1,), generator=g))
        image, label = self.images[v], self.labels[v]
        slices = [slice(None)]
        for full, patch in zip(image.shape[1:], self.patch_size):
            start = int(torch.randint(full - patch + 1, (1,), generator=g))
            slices.append(slice(start, start + patch))
        x, y = image[tuple(slices)], label[tuple(slices)]
        if bool(torch.rand((), generator=g) < 0.5):
            x, y = x.flip(-1), y.flip(-1)
        return x.contiguous(), y.contiguous()


class RandomCropImages(Dataset):
    """ImageNet-like samples: random crop + flip of in-RAM uint8 images, normalised to float."""

    MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
    STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)

    def __init__(self, image_size, length: int, num_images: int = 64, num_classes: int = 1000, seed: int = 0):
        self.image_size = tuple(image_size)
        self.length = length
        g = torch.Generator().manual_seed(seed)
        stored = tuple(int(s * 8 / 7) for s in self.image_size)  # 224 crops from 256 images
        self.images = torch.randint(0, 256, (num_images, 3, *stored), dtype=torch.uint8, generator=g)
        self.labels = torch.randint(0, num_classes, (num_images,), generator=g)
        self.seed = seed

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        i = int(torch.randint(len(self.images), (1,), generator=g))
        img = self.images[i]
        top = int(torch.randint(img.shape[1] - self.image_size[0] + 1, (1,), generator=g))
        left = int(torch.randint(img.shape[2] - self.image_size[1] + 1, (1,), generator=g))
        crop = img[:, top : top + self.image_size[0], left : left + self.image_size[1]]
        if bool(torch.rand((), generator=g) < 0.5):
            crop = crop.flip(-1)
        x = (crop.float() / 255.0 - self.MEAN) / self.STD
        return x, self.labels[i]


def build_dataset(cfg, workload) -> Dataset:
    samples_per_epoch = cfg.batch_size * cfg.accumulate_grad_batches * cfg.data.epoch_steps
    if workload.spatial_dims == 3:
        return RandomCropVolumes(cfg.data.patch_size, samples_per_epoch, cfg.data.num_volumes, cfg.seed)
    return RandomCropImages(cfg.data.patch_size, samples_per_epoch, 16 * cfg.data.num_volumes, workload.num_classes, cfg.seed)


def build_loader(cfg, dataset: Dataset) -> DataLoader:
    """The DataLoader with every loader knob applied as given (validated beforehand)."""
    kwargs = dict(
        batch_size=cfg.batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=cfg.data.num_workers,
        pin_memory=bool(cfg.data.pin_memory),
        persistent_workers=bool(cfg.data.persistent_workers),
        generator=torch.Generator().manual_seed(cfg.seed),
    )
    if cfg.data.prefetch_factor is not None:
        kwargs["prefetch_factor"] = cfg.data.prefetch_factor
    return DataLoader(dataset, **kwargs)


def endless(loader: DataLoader):
    """Batches forever, starting a new epoch (and, without persistent workers, new workers) as needed."""
    while True:
        yield from loader
