"""A seeded simulation of the warm-up's queue rule (``harness.run.child.stopping.still_queued``): a DataLoader's workers
making batches in order (batch i by worker i % W, sent once batch i - queued is taken), a loop whose first step is
slow (a compile) while the workers fill their queue, then a window. It measures how far the window's throughput is
from the loop's steady pace, with the rule and without it."""

from __future__ import annotations

import math
import random

from harness.run.child.stopping import still_queued


class InOrderLoader:
    """One DataLoader iterator's workers making batches in order: batch i by worker i % W, sent once batch
    i - queued is taken (the first ``queued`` are sent when the iterator opens), each taking ``batch_ms`` (lognormal,
    10%). A fresh iterator's workers start ``start_ms`` after it opens, one after another ``stagger_ms`` apart (a
    restart; 0 and 0 for workers kept alive). Times are the loop's clock (ms)."""

    def __init__(self, rng: random.Random, workers: int, prefetch: int, batch_ms: float, opened: float = 0.0,
                 start_ms: float = 0.0, stagger_ms: float = 0.0):
        self.rng, self.workers, self.batch_ms, self.opened = rng, workers, batch_ms, opened
        self.queued = workers * prefetch
        self.done: dict[int, float] = {}
        self.sent: dict[int, float] = {}
        self.free = [opened + start_ms + w * stagger_ms for w in range(workers)]  # when each worker can take work

    def ready(self, i: int) -> float:
        if i not in self.done:
            w = i % self.workers
            self.done[i] = max(self.sent.get(i, self.opened), self.free[w]) + self.batch_ms * self.rng.lognormvariate(
                0, 0.1)
            self.free[w] = self.done[i]
        return self.done[i]

    def step(self, k: int, t: float, compute_ms: float) -> tuple[float, float]:
        """The loop takes batch ``k`` at ``t`` and computes on it: (its wait, the whole step's time)."""
        wait = max(0.0, self.ready(k) - t) + self.rng.lognormvariate(math.log(0.5), 0.6)  # + a batch's hand-over
        self.sent[k + self.queued] = t + wait  # taking batch k sends the loader's next index
        return wait, wait + compute_ms * self.rng.lognormvariate(0, 0.05)


def _window_over_steady(rng: random.Random, workers: int, prefetch: int, compute_ms: float, batch_ms: float,
                        first_ms: float, window: int, rule: bool) -> float:
    loader = InOrderLoader(rng, workers, prefetch, batch_ms)
    warm, waits, t, k = [], [], 0.0, 0
    while k == 0 or (rule and still_queued(loader.queued, 1, warm, waits, workers, asked=1)):
        wait, took = loader.step(k, t, compute_ms)
        took += first_ms if k == 0 else 0.0  # a slow first step (a compile) while the workers fill their queue
        warm.append(took)
        waits.append(wait)
        t, k = t + took, k + 1
    opened = t
    for i in range(k, k + window):
        t += loader.step(i, t, compute_ms)[1]
    return (window / (t - opened)) / min(workers / batch_ms, 1 / (compute_ms + 0.5))


def _off_by_10pct(bound: str, rule: bool, waves: int, trials: int = 300) -> float:
    rng = random.Random(7)
    off = 0
    for _ in range(trials):
        workers, prefetch, compute = rng.choice([2, 4, 8]), rng.choice([2, 4]), rng.uniform(2.0, 20.0)
        per_batch = compute * (rng.uniform(1.5, 5.0) if bound == "data" else rng.uniform(0.2, 0.7))
        ratio = _window_over_steady(rng, workers, prefetch, compute, per_batch * workers, rng.uniform(500, 5000),
                                    waves * workers, rule)
        off += abs(ratio - 1) > 0.1
    return off / trials


def test_eating_the_queue_brings_a_data_bound_window_to_the_loaders_pace():
    # windows of 16 waves of the workers: without the rule most open on the queue and overstate the pace by >10%
    assert _off_by_10pct("data", rule=False, waves=16) >= 0.4
    assert _off_by_10pct("data", rule=True, waves=16) <= 0.06
    # in-step workers hand over a wave at a time: a window of 4 waves still carries up to a wave's error (the
    # table's note asks for at least 2); the rule halves how often it is off
    assert _off_by_10pct("data", rule=True, waves=4) <= 0.6 < _off_by_10pct("data", rule=False, waves=4)


def test_a_compute_bound_window_is_at_its_pace_with_the_rule_or_without():
    assert _off_by_10pct("compute", rule=True, waves=4) <= 0.01
    assert _off_by_10pct("compute", rule=False, waves=4) <= 0.01
