"""Did-you-mean errors for names the user types (workloads, ladders, knob values, commands)."""

from __future__ import annotations

import difflib
from typing import Iterable


def unknown_choice(what: str, value: object, choices: Iterable[str]) -> ValueError:
    """A ValueError naming the bad value, the closest valid choices and all of them."""
    options = sorted(str(c) for c in choices)
    close = difflib.get_close_matches(str(value), options, n=3, cutoff=0.5)
    hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return ValueError(f"unknown {what} {value!r}.{hint} Valid choices: {', '.join(options)}")


def check_choice(what: str, value: object, choices: Iterable[str]) -> None:
    """:func:`unknown_choice` raised when ``value`` is not one of ``choices``."""
    choices = list(choices)
    if value not in choices:
        raise unknown_choice(what, value, choices)
