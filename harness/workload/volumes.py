"""Synthetic 3D volumes that look like segmentation data (numpy only, no torch)."""

from __future__ import annotations

import numpy as np


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
