"""The ``fit.*`` settings: the bounds of the search for the largest size that fits (``harness.session.probe``),
checked before anything runs. Plain Python: no torch, no Hydra, no store."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from harness.fit.axes import AXES
from harness.registry import check_choice
from harness.session.probe import AXIS



@dataclass
class FitConfig:
    """The ``fit.*`` settings of ``python -m harness fit``."""

    min: int = 1  # the first size tried
    max: Optional[int] = None  # the largest size tried (None: DEFAULT_MAX for the device)
    axis: str = "batch"  # what the search varies: batch (batch_size) or patch (data.patch_size, harness.fit.axes)


def check(options: FitConfig) -> None:
    """ValueError naming the bad ``fit.*`` value and what would be valid."""
    check_choice("fit.axis", options.axis, AXES)
    what = AXIS if options.axis == "batch" else "side of the patch in voxels"
    for name in ("min", "max"):
        value = getattr(options, name)
        if value is None and name == "max":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"fit.{name}={value!r} must be a whole number >= 1 (a {what})")
    if options.max is not None and options.max < options.min:
        raise ValueError(f"fit.max={options.max} is below fit.min={options.min}: the search runs from fit.min up to "
                         "fit.max")
