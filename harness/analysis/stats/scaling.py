"""Scaling efficiency E(N) = X(N) / (N x X(1)) with its band, from the sweep's rung x round model.

X(N) over X(1) is one contrast of the model (``blocks.contrast``: the log ratio of the two rungs' effects, rounds
taken out, its t band); N is a constant, the rung's ranks over the reference rung's, so E(N)'s band is that
contrast's band divided by N and holds the true efficiency exactly as often as the contrast's holds the true ratio
(``tests/test_statistics_sim.py`` checks it on simulated sweeps). The band describes the rung: it decides nothing,
so it is a 95% band, never a look's wider level.
"""

from __future__ import annotations

import numpy as np

from harness.analysis.stats import blocks

LEVEL = 0.05


def efficiency(model: blocks.BlockFit, new: int, old: int, n: float,
               alpha: float = LEVEL) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """E(N) of rung ``new`` over the reference rung ``old`` at ``n`` times its ranks, per trial: (estimate, low,
    high); None when the model does not connect the two rungs."""
    c = blocks.contrast(model, new, old)
    if c is None:
        return None
    low, high = c.bounds(alpha)
    return np.exp(c.diff) / n, low / n, high / n
