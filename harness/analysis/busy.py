"""When a run's machine was too busy to trust its throughput (no torch).

A run measured while other processes used the CPUs says more about them than about the code: a gate must
neither pass nor fail on it. The sign is the record's ``other_cpu_pct`` (CPU used by processes outside the
measuring process's tree during the measured window) above ``stats.BUSY_PCT`` (10% of the CPUs), the
threshold the table and the ``noise`` command use.
"""

from __future__ import annotations

import math

from harness.analysis.stats import BUSY_PCT


def busy_reason(record) -> str | None:
    """Why this run's machine was too busy to trust, or None when nothing says so. ``record``: a RunRecord, a
    dict or a pandas row (a missing or empty ``other_cpu_pct`` counts as unknown, never as busy)."""
    get = getattr(record, "get", None)
    value = get("other_cpu_pct") if callable(get) else getattr(record, "other_cpu_pct", None)
    try:
        other = float(value)
    except (TypeError, ValueError):
        return None
    if math.isfinite(other) and other > BUSY_PCT:
        return f"other processes used {other:.0f}% of the CPUs"
    return None
