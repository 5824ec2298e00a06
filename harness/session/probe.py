"""The search for the largest size that fits, one probe at a time: double from the smallest size until one runs out
of memory or passes the bound, then bisect between the largest size that ran and the smallest that did not. Each
size is one call of ``try_size`` (a fresh process: ``fit``'s sizes, ``climb``'s largest batch); O(log n) calls for
a boundary at n.

Plain Python: no torch, no Hydra, no store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

OK, OOM = "ok", "oom"
AXIS = "batch_size"  # the setting the search varies
DEFAULT_MAX = {"cpu": 8, "cuda": 1024}  # fit.max unset: a CPU runs to a small bound (no allocator to run out of)


@dataclass
class Search:
    """What the search found: each size tried with its status, in the order tried, and why it stopped."""

    tried: list[tuple[int, str]] = field(default_factory=list)
    stopped: str = ""

    @property
    def fits(self) -> list[int]:
        """The sizes that ran ``ok``, smallest first."""
        return sorted(size for size, status in self.tried if status == OK)

    @property
    def largest(self) -> int | None:
        return max(self.fits, default=None)

    @property
    def smallest_oom(self) -> int | None:
        return min((size for size, status in self.tried if status == OOM), default=None)


class Probe:
    """The search as a plan of probes, one at a time: ``next()`` is the size to try next (None once the search has
    stopped), ``tell(status)`` its answer. A status other than ok or oom (an error, a timeout, a skip) ends the
    search: it says nothing about memory. ``label(size)``: a size in words (``batch_size=8``); ``top``: the bound in
    words (``fit.max=8``)."""

    def __init__(self, low: int, high: int, label: Callable[[int], str] | None = None, top: str = ""):
        self.low, self.high = low, high
        self.label = label or (lambda size: f"{AXIS}={size}")
        self.top = top or f"fit.max={high}"
        self.found = Search()
        self.fits: int | None = None
        self.oom: int | None = None
        self.pending: int | None = low

    def next(self) -> int | None:
        return self.pending

    def tell(self, status: str) -> None:
        """The answer for the size ``next()`` gave: doubling until the first out-of-memory (or the bound itself,
        if the doubling passed over it), then bisecting the gap below it."""
        size, doubling = self.pending, self.oom is None
        self.found.tried.append((size, status))
        if status not in (OK, OOM):
            return self._stop(f"{self.label(size)} ended {status}: the search stops (it says nothing about memory)")
        if status == OK:
            self.fits = size
        else:
            self.oom = size
        if doubling and status == OK:
            if size == self.high:
                return self._stop(f"every size up to {self.top} fits")
            self.pending = min(2 * size, self.high)
        elif self.fits is None:
            self._stop(f"the smallest size, {self.label(self.low)}, ran out of memory")
        elif self.oom - self.fits > 1:
            self.pending = (self.fits + self.oom) // 2
        else:
            self._stop(f"{self.label(self.fits)} fits and {self.label(self.oom)} runs out of memory")

    def _stop(self, why: str) -> None:
        self.found.stopped, self.pending = why, None


def search(try_size: Callable[[int], str], low: int, high: int, label: Callable[[int], str] | None = None,
           top: str = "") -> Search:
    """The largest size in ``low..high`` that ``try_size`` runs ``ok`` (:class:`Probe`'s sizes, each tried in turn:
    doubling from ``low``, then bisecting the gap below the first out-of-memory)."""
    probe = Probe(low, high, label, top)
    while (size := probe.next()) is not None:
        probe.tell(try_size(size))
    return probe.found
