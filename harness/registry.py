"""Name registries with "did you mean" errors (workloads, ladders, knob values)."""

from __future__ import annotations

import difflib
from typing import Generic, Iterable, TypeVar

T = TypeVar("T")


def unknown_choice(what: str, value: object, choices: Iterable[str]) -> ValueError:
    """A ValueError naming the bad value, the closest valid choices and all of them."""
    options = sorted(str(c) for c in choices)
    close = difflib.get_close_matches(str(value), options, n=3, cutoff=0.5)
    hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return ValueError(f"unknown {what} {value!r}.{hint} Valid choices: {', '.join(options)}")


def check_choice(what: str, value: object, choices: Iterable[str]) -> None:
    choices = list(choices)
    if value not in choices:
        raise unknown_choice(what, value, choices)


class Registry(Generic[T]):
    """Items by name; ``get`` of a missing name raises a did-you-mean ValueError."""

    def __init__(self, what: str):
        self.what = what
        self._items: dict[str, T] = {}

    def register(self, name: str, item: T) -> T:
        if name in self._items:
            raise ValueError(f"{self.what} {name!r} is registered twice")
        self._items[name] = item
        return item

    def get(self, name: str) -> T:
        if name not in self._items:
            raise unknown_choice(self.what, name, self._items)
        return self._items[name]

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: str) -> bool:
        return name in self._items
