"""When the measured window closes: after ``measure.steps`` steps, or with ``steps=auto`` once the mean step time is
known to +-1% (or at its step or time cap).

The rule is asked after 10, 20, 40, ... measured steps (a handful of checks in all); in between, the loop's only
cost of it is one comparison of the step count and one of a clock it has already read.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.config import MeasureConfig

AUTO_FIRST_CHECK = 10  # measured steps before steps=auto first asks whether the mean is known
AUTO_REL_HALF_WIDTH = 0.01  # steps=auto stops once the mean step time's 95% interval is within +-1%


@dataclass(frozen=True)
class StoppingRule:
    """The most measured steps, and for ``steps=auto`` its time cap and first check (``inf`` for a fixed count)."""

    steps: int
    auto: bool = False
    max_s: float = math.inf
    first_check: float = math.inf
    rel_half_width: float = AUTO_REL_HALF_WIDTH

    def satisfied(self, step_ms: list[float]) -> bool:
        """Whether the mean step time is known well enough to close the window now."""
        return mean_is_known(step_ms, self.rel_half_width)


def rule_for(measure: MeasureConfig) -> StoppingRule:
    """The rule ``measure.*`` asks for."""
    if measure.steps != "auto":
        return StoppingRule(steps=measure.steps)
    return StoppingRule(steps=measure.max_steps, auto=True, max_s=measure.max_s, first_check=AUTO_FIRST_CHECK)


def mean_is_known(step_ms: list[float], rel: float) -> bool:
    """Whether the 95% t-interval of the mean step time is within +-rel of the mean (pyperf's calibration idea).

    Steps are not independent (a slow stretch of the machine spans several), so this is a stopping rule, not a
    claim about the run: the noise that matters between runs is handled by repeats (docs/statistics.md).
    """
    n = len(step_ms)
    if n < AUTO_FIRST_CHECK:  # too few to tell (and t975 is exact enough from 9 degrees of freedom on)
        return False
    mean = statistics.fmean(step_ms)
    half = t975(n - 1) * statistics.stdev(step_ms, mean) / math.sqrt(n)
    return mean > 0 and half <= rel * mean


def t975(df: int) -> float:
    """Student's t 97.5% quantile (Cornish-Fisher expansion around the normal's: within 0.2% from df=9 on), so
    that the child needs no scipy."""
    z = 1.959963984540054
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
