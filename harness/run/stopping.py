"""When the measured window closes: after ``measure.steps`` steps, or with ``steps=auto`` once the mean step time is
known to +-1% (or at its step or time cap). And, opt-in, when the warm-up ends: after ``measure.warmup_steps``
steps, or with ``warmup_steps=auto`` once the step time is steady (``WarmupRule``).

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
WARMUP_BLOCK = 5  # warmup_steps=auto compares the median of the last 5 steps with that of the 5 before
WARMUP_TOLERANCE = 0.05  # ... and stops once they are within 5% of each other
WARMUP_MAX_STEPS = 200  # ... or at this many warm-up steps
WARMUP_MAX_S = 120.0  # ... or after this long warming up (once the least number of steps is done)


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


@dataclass(frozen=True)
class WarmupRule:
    """``warmup_steps=auto``: warm up until the median of the last ``block`` steps is within ``tolerance`` of the
    median of the ``block`` before them (the first step, which holds compilation and first touches, is never in a
    compared block: at least ``2 * block + 1`` steps, more than any size's fixed warm-up), or at a step or time cap.
    The step times are noisy on a shared machine, so steady is judged on medians, never on one step."""

    block: int = WARMUP_BLOCK
    tolerance: float = WARMUP_TOLERANCE
    max_steps: int = WARMUP_MAX_STEPS
    max_s: float = WARMUP_MAX_S

    @property
    def min_steps(self) -> int:
        return 2 * self.block + 1

    def done(self, warmup_ms: list[float], elapsed_s: float) -> bool:
        """Whether the warm-up may end after these steps (``elapsed_s``: since it began)."""
        n = len(warmup_ms)
        if n >= self.max_steps:
            return True
        if n < self.min_steps:
            return False
        return elapsed_s >= self.max_s or is_steady(warmup_ms, self.block, self.tolerance)


def is_steady(step_ms: list[float], block: int, tolerance: float) -> bool:
    """The median of the last ``block`` steps is within ``tolerance`` of the median of the ``block`` before them."""
    if len(step_ms) < 2 * block:
        return False
    last, before = statistics.median(step_ms[-block:]), statistics.median(step_ms[-2 * block:-block])
    return before > 0 and abs(last - before) <= tolerance * before


def warmup_rule_for(measure: MeasureConfig) -> WarmupRule | None:
    """The warm-up's rule where ``measure.warmup_steps=auto`` asks for one (None: a fixed number of steps)."""
    return WarmupRule() if measure.warmup_steps == "auto" else None


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
