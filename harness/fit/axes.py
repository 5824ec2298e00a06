"""What a fit varies (``fit.axis``): the batch, or a 3D workload's patch. The search counts in whole steps ``k``
(``harness.session.probe``); an axis turns a step into the setting's value, its words and the units in one sample.

The patch's rule: ``data.patch_size`` at step k is ``k x STEP x (p / gcd(p))``, ``p`` the start's own patch and
STEP the least common multiple of the workload's ``patch_multiple`` (the side a model with N stride-2 levels needs
each side divisible by: 2^N, 16 for unet3d and mednext) and 8 (a finer step costs search runs for a few % of
memory). The start's aspect is kept, every side is a valid multiple, and no side is below ``min_side``. ``fit.min``
and ``fit.max`` are the patch's smallest side in voxels, rounded to the steps (up and down). Plain Python.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from harness.session.probe import DEFAULT_MAX

AXES = ("batch", "patch", "sequence")
PATCH_KEY = "data.patch_size"
PATCH_STEP = 8  # the patch's sides move by at least this many voxels
SEQUENCE_STEP = 64  # a language model's sequence moves by this many tokens (attention kernels' tile)
DEFAULT_PATCH_MAX = {"cpu": 2, "cuda": 4}  # fit.max unset on the patch axis: this many times the start's side


@dataclass(frozen=True)
class Axis:
    """One axis of a fit: ``key`` set to ``value(k)`` at step k."""

    name: str  # "batch", "patch" or "sequence"
    key: str
    unit_shape: tuple[int, ...] = ()  # the patch: p / gcd(p)
    step: int = 1  # the patch: voxels a step on the shape's smallest unit
    unit: str = "samples"  # what ``units(k)`` counts (voxels for a patch)

    def value(self, k: int) -> Any:
        return k if self.name == "batch" else [k * self.step * u for u in self.unit_shape]

    def label(self, k: int) -> str:
        value = self.value(k)
        return f"{self.key}={value}" if self.name == "batch" else f"{self.key}=[{','.join(map(str, value))}]"

    def units(self, k: int) -> int:
        """Units of one sample at step k: the patch's voxels, the sequence's tokens (1 a sample on the batch axis)."""
        return math.prod(self.value(k)) if self.name != "batch" else 1

    def side(self, k: int) -> int:
        """The number ``fit.min``/``fit.max`` bound: the batch, or the patch's smallest side."""
        return k if self.name == "batch" else min(self.value(k))


BATCH = Axis("batch", "batch_size")


def patch_axis(workload: str, patch: Sequence[int], spatial_dims: int, patch_multiple: int) -> Axis:
    """The patch axis of a workload whose start patch is ``patch``; ValueError for a workload with no 3D patch."""
    if spatial_dims != 3 or not patch:
        raise ValueError(f"fit.axis=patch needs a workload with a 3D patch (data.patch_size); workload {workload!r} "
                         f"has none ({spatial_dims}D samples): valid fit.axis for it: batch")
    g = math.gcd(*patch)
    return Axis("patch", PATCH_KEY, tuple(s // g for s in patch), math.lcm(patch_multiple, PATCH_STEP), "voxels")


def sequence_axis(workload: str, sequence: Sequence[int], synthetic: str) -> Axis:
    """The sequence axis of a language model (token batches) whose start sequence is ``sequence`` ([length]): the
    length in steps of SEQUENCE_STEP tokens, the batch kept; ValueError for a workload of no token sequence."""
    if synthetic != "tokens" or len(sequence) != 1:
        raise ValueError(f"fit.axis=sequence needs a language model on token batches (synthetic: tokens); workload "
                         f"{workload!r} has synthetic: {synthetic}: valid fit.axis for it: batch")
    return Axis("sequence", PATCH_KEY, (1,), SEQUENCE_STEP, "tokens")


def patch_steps(axis: Axis, start_k_side: int, min_side: int, fit_min: int, fit_max: Optional[int],
                device: str) -> tuple[int, int]:
    """The search's first and last step on the patch axis: ``fit.min`` (and ``min_side``) rounded up, ``fit.max``
    (unset: DEFAULT_PATCH_MAX times the start's smallest side, ``start_k_side``) rounded down."""
    smallest = axis.step * min(axis.unit_shape)  # the smallest side's growth a step
    top = fit_max if fit_max is not None else DEFAULT_PATCH_MAX.get(device, 2) * start_k_side
    low = max(1, -(-max(fit_min, min_side) // smallest))
    high = top // smallest
    if high < low:
        raise ValueError(f"fit.max={top} leaves no patch to try: the smallest side moves in steps of {smallest} "
                         f"voxels from {low * smallest} ({axis.label(low)}); give fit.max >= {low * smallest}")
    return low, high


def axis_range(start, options) -> tuple[Axis, int, int]:
    """The axis the fit varies and its first and last step, for ``start`` (the resolved settings) under ``options``
    (the ``fit.*`` settings; ValueError: a workload with no patch, a bound that leaves no patch)."""
    if options.axis == "batch":
        return BATCH, options.min, bound(options, start.device)
    spec, patch = start.workload, list(start.data.patch_size or [])
    axis = sequence_axis(spec.name, patch, spec.synthetic) if options.axis == "sequence" else \
        patch_axis(spec.name, patch, spec.spatial_dims, spec.patch_multiple)
    return (axis, *patch_steps(axis, min(patch), spec.min_side, options.min, options.max, start.device))


def bound(options, device: str) -> int:
    """The largest size the search tries on ``device``."""
    return options.max if options.max is not None else DEFAULT_MAX.get(device, DEFAULT_MAX["cpu"])
