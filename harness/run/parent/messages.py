"""The warm launcher's messages between the parent (``harness.run.parent.launcher``) and the zygote
(``harness.run.parent.zygote``): one JSON object a packet of their ``SOCK_SEQPACKET`` socket, with the file
descriptors it hands over beside it (a run's progress channel one way, its pidfd the other)."""

from __future__ import annotations

import array
import json
import os
import socket

MAX_MESSAGE = 1 << 20


def send(sock: socket.socket, message: dict, fds: list[int] | tuple = ()) -> None:
    """One message (and the file descriptors it hands over)."""
    data = json.dumps(message).encode()
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.send(data)


def receive(sock: socket.socket, flags: int = 0) -> tuple[dict | None, list[int]]:
    """The next message and its file descriptors; (None, []) once the other end has closed. With
    ``socket.MSG_DONTWAIT``, BlockingIOError when none is there (``socket.recv_fds`` drops its flags before 3.12)."""
    data, ancillary, _, _ = sock.recvmsg(MAX_MESSAGE, socket.CMSG_LEN(4 * array.array("i").itemsize), flags)
    fds = array.array("i")
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
    if not data:
        for fd in fds:
            os.close(fd)
        return None, []
    return json.loads(data), list(fds)
