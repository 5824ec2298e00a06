"""When the measured window closes: after ``measure.steps`` steps, or with ``steps=auto`` once the mean step time is
known to +-1% (or at its step or time cap). And, opt-in, when the warm-up ends: after ``measure.warmup_steps``
steps, or with ``warmup_steps=auto`` once the step time is steady (``WarmupRule``); either way, then, until the
batches the loader queued during its slowest step are eaten (``still_queued``).

The rule is asked after 10, 20, 40, ... measured steps (a handful of checks in all); in between, the loop's only
cost of it is one comparison of the step count and one of a clock it has already read.

On CUDA the host's step times are bimodal: a step only enqueues its work and returns at once, until the step that
reads the loss (every ``log_every_n_steps``) waits for the device to drain everything queued. Single steps say
little there; a block of steps that ends in such a drain is timed in full. So on CUDA the rule judges the mean
step time of the blocks between drains (at least ``MIN_BLOCKS`` of them), on a CPU the steps themselves.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.config import MeasureConfig

AUTO_FIRST_CHECK = 10  # measured steps before steps=auto first asks whether the mean is known
AUTO_REL_HALF_WIDTH = 0.01  # steps=auto stops once the mean step time's 95% interval is within +-1%
MIN_BLOCKS = 5  # blocks between drains that the rule wants before it judges them (CUDA)
# Student's t 97.5% quantiles for the few degrees of freedom of a handful of blocks (the expansion below is
# within 0.2% only from 9 on)
_T975_SMALL = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306}
WARMUP_BLOCK = 5  # warmup_steps=auto compares the median of the last 5 steps with that of the 5 before
WARMUP_TOLERANCE = 0.05  # ... and stops once they are within 5% of each other
WARMUP_MAX_STEPS = 200  # ... or at this many warm-up steps
WARMUP_MAX_S = 120.0  # ... or after this long warming up (once the least number of steps is done)
QUEUE_MAX_STEPS = 32  # the most steps of queued batches the warm-up eats (a longer queue: none, and the table's note)
QUEUE_DRY_SHARE = 0.2  # a warm-up step that waited this share of its time on data, and this many times the
QUEUE_DRY_RATIO = 3.0  # ... shortest wait since the slowest step (a queued batch's hand-over) plus
QUEUE_DRY_MIN_MS = 5.0  # ... this (a hand-over's jitter), found the loader's queue empty


@dataclass(frozen=True)
class StoppingRule:
    """The most measured steps, and for ``steps=auto`` its time cap and first check (``inf`` for a fixed count)."""

    steps: int
    auto: bool = False
    max_s: float = math.inf
    first_check: float = math.inf
    rel_half_width: float = AUTO_REL_HALF_WIDTH
    block: int = 1  # > 1: judge blocks of this many steps, each ending in a drain (the loss read)
    first_step: int = 0  # the first measured step's index (the warm-up's steps): where the blocks start

    def satisfied(self, step_ms: list[float]) -> bool:
        """Whether the mean step time is known well enough to close the window now."""
        if self.block <= 1:
            return mean_is_known(step_ms, self.rel_half_width)
        blocks = drain_blocks(step_ms, self.first_step, self.block)
        return mean_is_known(blocks, self.rel_half_width, least=MIN_BLOCKS)


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

    def done(self, warmup_ms: list[float]) -> bool:
        """Whether the warm-up may end after these steps (one after the other: their sum is its time so far)."""
        n = len(warmup_ms)
        if n >= self.max_steps:
            return True
        if n < self.min_steps:
            return False
        return sum(warmup_ms) >= 1000.0 * self.max_s or is_steady(warmup_ms, self.block, self.tolerance)


def is_steady(step_ms: list[float], block: int, tolerance: float) -> bool:
    """The median of the last ``block`` steps is within ``tolerance`` of the median of the ``block`` before them."""
    if len(step_ms) < 2 * block:
        return False
    last, before = statistics.median(step_ms[-block:]), statistics.median(step_ms[-2 * block:-block])
    return before > 0 and abs(last - before) <= tolerance * before


def still_queued(queued: int, accum: int, warmup_ms: list[float], warmup_wait_ms: list[float],
                 workers: int = 1, asked: int | None = None) -> bool:
    """Whether the loader may still hold batches its workers queued while the warm-up's slowest step ran (a compile,
    the first batch, an autotune): up to ``queued`` (workers x prefetch_factor) of them. A data-bound loop eats them
    at compute speed; a window opened on them measures neither its loader's pace nor its data wait. The slowest
    step is one of the first ``asked`` (the warm-up asked for; all when None): a slow step while the queue is eaten
    (an epoch's start, whose workers start again) does not start the count again.

    True until ``ceil(queued / accum)`` steps have run since that step, or until one of them waited on data
    ``QUEUE_DRY_SHARE`` of its time and clearly longer than the shortest wait since (a queued batch costs its
    hand-over only; one waited for costs the loader's pace: the queue ran dry). Missing a dry queue costs only a few
    more warm-up steps; a false one would open the window on the queue, so the test is strict. A dry step is the first
    batch of a wave when the workers run in step (they start together and take alike a batch, then hand over their
    batches together): the rest of that wave, ``workers - 1`` batches, is eaten too, so that the window opens at a
    wave's edge (in a loader whose workers drifted apart that costs a few steps at its pace). A compute-bound loop's
    queue never runs dry: it pays the full count, a few fast steps. A queue of more than ``QUEUE_MAX_STEPS`` steps
    (ResNet-50's 16-32 workers x prefetch 4-8) is not eaten: that many steps would cost as much as a window, and a
    part of them would not spare it; the table notes a window that opened on such a queue."""
    if queued <= 0 or not warmup_ms or len(warmup_ms) >= WARMUP_MAX_STEPS:
        return False
    accum = max(accum, 1)
    need = math.ceil(queued / accum)
    if need > QUEUE_MAX_STEPS:  # more than a window's worth: eating part of it would not spare the window
        return False
    slowest = max(range(min(len(warmup_ms), asked or len(warmup_ms))), key=warmup_ms.__getitem__)
    steps, waits = warmup_ms[slowest + 1:], warmup_wait_ms[slowest + 1:]
    served = min(waits, default=0.0)  # a batch from the queue: its hand-over's cost only
    dry = QUEUE_DRY_RATIO * served + QUEUE_DRY_MIN_MS
    dry_at = next((i for i, (t, w) in enumerate(zip(steps, waits)) if w >= QUEUE_DRY_SHARE * t and w >= dry), None)
    if dry_at is None:
        return len(steps) < need
    return len(steps) - 1 - dry_at < math.ceil((workers - 1) / accum)  # the rest of the dry step's wave


def warmup_rule_for(measure: MeasureConfig) -> WarmupRule | None:
    """The warm-up's rule where ``measure.warmup_steps=auto`` asks for one (None: a fixed number of steps)."""
    return WarmupRule() if measure.warmup_steps == "auto" else None


def rule_for(measure: MeasureConfig, device_type: str = "cpu", log_every: int = 1) -> StoppingRule:
    """The rule ``measure.*`` asks for, on a device of ``device_type`` whose loop reads the loss every
    ``log_every`` steps (its drains on CUDA)."""
    if measure.steps != "auto":
        return StoppingRule(steps=measure.steps)
    block = log_every if device_type == "cuda" and log_every > 1 else 1
    if block == 1:
        return StoppingRule(steps=measure.max_steps, auto=True, max_s=measure.max_s, first_check=AUTO_FIRST_CHECK)
    first_step = measure.warmup_steps if isinstance(measure.warmup_steps, int) else 0  # auto: once known
    # the first check once MIN_BLOCKS whole blocks can be there (the steps before the first drain are no block)
    first_check = (-first_step) % block + MIN_BLOCKS * block
    return StoppingRule(steps=measure.max_steps, auto=True, max_s=measure.max_s, first_check=first_check,
                        block=block, first_step=first_step)


def starting_at(rule: StoppingRule, first_step: int) -> StoppingRule:
    """``rule`` with the measured steps starting at step ``first_step``: where a warm-up of ``warmup_steps=auto``
    ended, known only then (the blocks between drains are counted from there)."""
    if rule.block <= 1:
        return rule
    return replace(rule, first_step=first_step,
                               first_check=(-first_step) % rule.block + MIN_BLOCKS * rule.block)


def drain_blocks(step_ms: list[float], first_step: int, block: int) -> list[float]:
    """The mean step time of each whole block of ``block`` measured steps that ends in a drain: step ``s`` drains
    when ``(s + 1) % block == 0``, and ``step_ms[i]`` is step ``first_step + i``. Steps before the first drain
    and after the last are in no block."""
    start = (-first_step) % block
    return [sum(step_ms[i:i + block]) / block for i in range(start, len(step_ms) - block + 1, block)]


def mean_is_known(step_ms: list[float], rel: float, least: int = AUTO_FIRST_CHECK) -> bool:
    """Whether the 95% t-interval of the mean step time is within +-rel of the mean (pyperf's calibration idea).

    Steps are not independent (a slow stretch of the machine spans several), so this is a stopping rule, not a
    claim about the run: the noise that matters between runs is handled by repeats (docs/statistics.md).
    """
    n = len(step_ms)
    if n < max(2, least):  # too few to tell
        return False
    mean = statistics.fmean(step_ms)
    half = t975(n - 1) * statistics.stdev(step_ms, mean) / math.sqrt(n)
    return mean > 0 and half <= rel * mean


def t975(df: int) -> float:
    """Student's t 97.5% quantile (a table below 9 degrees of freedom, then a Cornish-Fisher expansion around the
    normal's, within 0.2% from df=9 on), so that the child needs no scipy."""
    if df in _T975_SMALL:
        return _T975_SMALL[df]
    z = 1.959963984540054
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
