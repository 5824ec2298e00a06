"""What happens in a session, for whoever watches: the console, a progress bar, a log, a live page.

An event is told once to every listener (anything with ``on(event)``), in the order they were given; a listener
never changes what the session does. Kinds:

* ``started``: a turn's settings are resolved and it is about to be measured or copied (``cfg``, ``dropped``);
* ``progress``: the measuring child's progress (``info``, ``elapsed``), a few times a second at most;
* ``measured``, ``cached``, ``skipped``, ``not run``: how a turn ended (``outcome``);
* ``failed``: a turn could not even start (``error``); the session goes on with the next;
* ``busy``: a run of a busy machine, measured again (``text``);
* ``already``: a turn this session has a record of already (a resumed one), not run again;
* ``said``: a line of the policy's own (its plan); ``looked``: a look after a round (``text``);
* ``decided``: the policy ends the session (``text``: why, when it is more than the last look said).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Protocol

OUTCOMES = ("measured", "cached", "skipped", "not run")
KINDS = ("started", "progress", *OUTCOMES, "failed", "busy", "already", "said", "looked", "decided")


@dataclass(frozen=True)
class Event:
    kind: str
    turn: Any = None
    text: str = ""
    outcome: Any = None  # a turn's outcome (``runner.Outcome`` or a policy's own with .record and .how)
    cfg: Any = None  # the turn's resolved settings (started)
    dropped: frozenset[int] = frozenset()  # started: earlier turns whose changes this one does not build on
    info: dict | None = None  # progress: the child's marker
    elapsed: float = 0.0  # progress: seconds since the run started
    error: Exception | None = None  # failed

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown event kind {self.kind!r}; the kinds: {', '.join(KINDS)}")


class Listener(Protocol):
    def on(self, event: Event) -> None: ...


class Events:
    """The listeners of one session: ``emit`` tells each one every event."""

    def __init__(self, *listeners: Listener):
        self.listeners = [listener for listener in listeners if listener is not None]

    def emit(self, kind: str, turn: Any = None, **fields) -> Event:
        event = Event(kind, turn, **fields)
        for listener in self.listeners:
            listener.on(event)
        return event

    def say(self, text: str) -> None:
        self.emit("said", text=text)


@dataclass(frozen=True)
class Display:
    """How a run-by-run command (``climb``, ``fit``) shows itself (the command gives its rich console): ``say``
    prints one line of rich markup; ``progress(label)`` is the live status line around one run, its ``update`` the
    runner's progress callback."""

    say: Callable[[str], Any]
    progress: Callable[[str], ContextManager[Any]]
