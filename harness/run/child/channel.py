"""A measuring child's progress channel to its parent: a socket pair, the child's end handed over at its start
(``HARNESS_PROGRESS_FD``). The child writes one JSON line per progress marker (a phase change, never a step); the
parent blocks on its end and wakes at a marker instead of polling a file. At the measured window's opening the child
waits (a moment) for the parent's word back that it has taken the marker, so that the parent's work for it is done
before the first measured step.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat

CHANNEL_ENV = "HARNESS_PROGRESS_FD"  # the child's end of its progress channel
ACK_TIMEOUT_S = 5.0  # the longest the window's opening waits for the parent's word (a parent that is gone: none)


class Markers:
    """The parent's end of a child's progress channel (a socket pair): the child's markers, one JSON line each, and
    the parent's word back when it has taken the window's opening."""

    def __init__(self, mine: socket.socket, theirs: socket.socket | None = None):
        self.sock, self.theirs = mine, theirs
        self.sock.setblocking(False)
        self.eof = False
        self._buffer = b""

    @classmethod
    def open(cls) -> Markers | None:
        try:
            return cls(*socket.socketpair())
        except (AttributeError, OSError):
            return None

    @property
    def child_fd(self) -> int:
        return self.theirs.fileno()

    @property
    def fd(self) -> int | None:
        return None if self.eof else self.sock.fileno()

    def started(self) -> None:
        """The child has its end: ours of it goes, so that the channel ends with the child's processes."""
        if self.theirs is not None:
            self.theirs.close()

    def read(self) -> list[dict]:
        """The markers that arrived since the last read, in order."""
        while not self.eof:
            try:
                data = self.sock.recv(1 << 16)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                data = b""
            if not data:
                self.eof = True
                break
            self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        found = []
        for line in lines:
            with contextlib.suppress(ValueError):
                found.append(json.loads(line))
        return found

    def ack(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.send(b"!")

    def close(self) -> None:
        for sock in (self.sock, self.theirs):
            if sock is not None:
                sock.close()


def child_end() -> socket.socket | None:
    """The progress channel the parent handed over (None without one). Taken out of the environment and closed on
    exec, so that nothing this process starts writes to it."""
    fd = os.environ.pop(CHANNEL_ENV, "")
    if not fd.isdigit():
        return None
    try:
        if not stat.S_ISSOCK(os.fstat(int(fd)).st_mode):
            return None
        os.set_inheritable(int(fd), False)
        return socket.socket(fileno=int(fd))
    except OSError:
        return None


def tell(channel: socket.socket, payload: dict, wait: bool) -> None:
    """A marker down the channel; with ``wait``, until the parent says it has taken it (or has gone)."""
    try:
        channel.sendall(json.dumps(payload, default=str).encode() + b"\n")
        if wait:
            channel.settimeout(ACK_TIMEOUT_S)
            channel.recv(1)
    except OSError:  # a parent gone, or slower than the timeout: the run goes on without it
        pass
    finally:
        channel.settimeout(None)
