"""The E(N) column: scaling efficiency per rung that adds devices or nodes, with its 95% band.

E(N) = X(N) / (N x X(1)), X the global samples/s. The reference X(1) is the last earlier rung that ran ok on one
unit: one device for a rung that changes ``devices``; one node of the same devices for a rung that changes
``nodes`` (its ranks over its nodes). N is the rung's ranks over the reference's. The estimate and band are the rung
x round model's (``harness.analysis.stats.scaling``); without a model connecting the two rungs, the ratio of their
samples/s and no band.
"""

from __future__ import annotations

import math
from dataclasses import replace

from harness.analysis.stats import scaling
from harness.analysis.views.rows import RungRow


def unit_ranks(change: str, world_size: int) -> int | None:
    """The ranks of the unit E(N) counts for a rung changing ``change``: 1 (a device), or one node's ranks."""
    key, _, value = change.partition("=")
    if key == "devices":
        return 1
    if key == "nodes" and value.strip().isdigit() and int(value) > 0 and world_size % int(value) == 0:
        return world_size // int(value)
    return None


def efficiency(rows: list[RungRow], judgement) -> list[RungRow]:
    """The rows, those that add devices or nodes with ``scaling_efficiency`` and ``scaling_band`` (1.0 is perfect
    scaling); ``judgement``: the sweep's (``sweepstats.Judgement``), None for none."""
    out = []
    for row in rows:
        unit = unit_ranks(row.change, row.world_size) if row.samples_per_s is not None else None
        base = next((r for r in reversed(out) if r.samples_per_s is not None and r.world_size == unit), None)
        if base is not None and row.world_size > base.world_size:
            row = _with_efficiency(row, base, judgement)
        out.append(row)
    return out


def _with_efficiency(row: RungRow, base: RungRow, judgement) -> RungRow:
    n = row.world_size / base.world_size
    found = scaling.efficiency(judgement.model, row.rung, base.rung, n) if judgement is not None else None
    if found is None:
        return replace(row, scaling_efficiency=row.samples_per_s / (n * base.samples_per_s))
    value, low, high = (float(x[0]) for x in found)
    band = (low, high) if math.isfinite(low) and math.isfinite(high) else None
    return replace(row, scaling_efficiency=value, scaling_band=band)
