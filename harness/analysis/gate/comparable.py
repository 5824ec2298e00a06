"""What must be equal for two runs of a config to be compared: the hardware, and the host when the data decides.

``noise_model.hardware_label`` is the device's part: for CUDA the GPU's name and count, for a CPU its model and
core count. A config whose steps wait on data (``data_wait_frac``: the share of the step spent waiting for the
next batch) is decided by the host too, its CPU model and the CPUs the run may use (the loader's workers run
there), whatever the GPU: a data-bound config measured on another host, or with fewer CPUs, is not comparable.
The wait is material above ``DATA_BOUND_FRAC`` (10% of the step, the median over a config's runs on either side):
below it a slower host hides behind the GPU's work. No torch, no Hydra.
"""

from __future__ import annotations

import re

import pandas as pd

DATA_BOUND_FRAC = 0.10


def data_bound(*frames: pd.DataFrame) -> frozenset[str]:
    """The configs (config_hash) whose median data wait, over their runs in any of ``frames``, is material."""
    parts = [f[["config_hash", "data_wait_frac"]] for f in frames if len(f) and "data_wait_frac" in f]
    if not parts:
        return frozenset()
    waits = pd.concat(parts).dropna().groupby("config_hash")["data_wait_frac"].median()
    return frozenset(waits[waits > DATA_BOUND_FRAC].index)


def usable_cpus(row) -> str:
    """The CPUs the run could use: its affinity's count (``threads``), else the machine's CPU count."""
    found = re.search(r"affinity=([0-9,\-]+)", str(row.get("threads") or ""))
    if found:
        total = 0
        for part in found.group(1).split(","):
            low, _, high = part.partition("-")
            total += int(high or low) - int(low) + 1
        return str(total)
    count = row.get("cpu_count")
    return "?" if count is None or pd.isna(count) else str(int(count))


def host_label(row) -> str:
    """The host's part of the key of a data-bound config."""
    return f"; data-bound: host {row.get('cpu_model') or '?'}, {usable_cpus(row)} usable CPUs"
