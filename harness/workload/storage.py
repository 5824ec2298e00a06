"""A storage throughput ceiling shared by every reader of a run: the loader workers of each rank, and the ranks of a
run on one host, as a shared file system's limit is shared by every client reading from it
(``data.storage_items_per_s``).

Each read reserves the next free slot of one schedule, spaced ``1 / items_per_s`` apart, and waits for it: under the
ceiling a read waits for nothing; at it, readers queue and together read ``items_per_s`` items a second, however many
there are. The schedule is one 8-byte number (the time the next slot is free, ``time.monotonic``, which every process
of a host shares) in a small file, read and written under an exclusive ``flock``. The file is opened for each read,
so the lock works alike in forked and spawned loader workers (an inherited descriptor would share one lock); the
object holds only the file's path and the rate, so it pickles into workers of either kind. No torch.
"""

from __future__ import annotations

import fcntl
import os
import struct
import tempfile
import time
from dataclasses import dataclass

from harness import lifeline

SLOT = struct.Struct("d")
FILE_NAME = "storage-ceiling"
STALE_S = 3600.0  # a slot this far ahead is no queue's (a file left by an earlier boot's process): started afresh


@dataclass(frozen=True)
class SharedCeiling:
    """At most ``items_per_s`` reads a second among every process that reads through ``path``."""

    path: str
    items_per_s: float

    def reserve(self) -> float:
        """The monotonic time this read's slot starts: now if the schedule is free, else the next free slot."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # released when the descriptor closes
            raw = os.pread(fd, SLOT.size, 0)
            free = SLOT.unpack(raw)[0] if len(raw) == SLOT.size else 0.0
            now = time.monotonic()
            slot = now if free > now + STALE_S else max(now, free)
            os.pwrite(fd, SLOT.pack(slot + 1.0 / self.items_per_s), 0)
        finally:
            os.close(fd)
        return slot

    def wait(self) -> float:
        """Reserve a slot and sleep until it starts; the seconds waited (0 under the ceiling)."""
        wait_s = self.reserve() - time.monotonic()
        if wait_s > 0:
            time.sleep(wait_s)
        return max(wait_s, 0.0)


def run_ceiling(items_per_s: float) -> SharedCeiling:
    """The ceiling of this run: one file for all its ranks on this host (torch's launcher gives them one run id),
    else for this process and its loader workers. Its folder holds the id of the process it belongs to, so the next
    start removes it once that process is gone (``harness.run.parent.isolate.clean_stale_jobs``)."""
    run_id = os.environ.get("TORCHELASTIC_RUN_ID")
    owner = os.getppid() if run_id else os.getpid()  # under the launcher: its agent, which outlives every rank
    folder = os.path.join(tempfile.gettempdir(), f"{lifeline.METRICS_PREFIX}storage-{run_id or owner}")
    os.makedirs(folder, exist_ok=True)
    owner_file = os.path.join(folder, lifeline.OWNER_FILE)
    if not os.path.exists(owner_file):
        with open(owner_file, "w") as out:
            out.write(str(owner))
    return SharedCeiling(os.path.join(folder, FILE_NAME), float(items_per_s))
