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


def search(try_size: Callable[[int], str], low: int, high: int, label: Callable[[int], str] | None = None,
           top: str = "") -> Search:
    """The largest size in ``low..high`` that ``try_size`` runs ``ok``: doubling from ``low`` (then ``high`` itself
    if the doubling passed over it), then bisecting the gap below the first out-of-memory. A status other than
    ok or oom (an error, a timeout, a skip) ends the search: it says nothing about memory. ``label(size)``: a
    size in words (``batch_size=8``); ``top``: the bound in words (``fit.max=8``)."""
    found = Search()
    label = label or (lambda size: f"{AXIS}={size}")
    top = top or f"fit.max={high}"

    def attempt(size: int) -> str:
        status = try_size(size)
        found.tried.append((size, status))
        return status

    size, fits, oom = low, None, None
    while oom is None:
        status = attempt(size)
        if status == OK:
            fits = size
            if size == high:
                found.stopped = f"every size up to {top} fits"
                return found
            size = min(2 * size, high)
        elif status == OOM:
            oom = size
        else:
            found.stopped = f"{label(size)} ended {status}: the search stops (it says nothing about memory)"
            return found
    if fits is None:
        found.stopped = f"the smallest size, {label(low)}, ran out of memory"
        return found
    while oom - fits > 1:
        mid = (fits + oom) // 2
        status = attempt(mid)
        if status == OK:
            fits = mid
        elif status == OOM:
            oom = mid
        else:
            found.stopped = f"{label(mid)} ended {status}: the search stops (it says nothing about memory)"
            return found
    found.stopped = f"{label(fits)} fits and {label(oom)} runs out of memory"
    return found
