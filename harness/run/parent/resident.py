"""The launcher's library pages, carried into each run it forks: a fork copies the page table of memory written to,
not of a library's pages only read, so a forked run's resident memory would lack what the launcher's imports touched
(a fresh process that imported the same has them). ``file_pages`` lists them in the launcher; ``populate`` maps
them in the fork.
"""

from __future__ import annotations

import ctypes
import errno
import os

MADV_POPULATE_READ = 22


def file_pages() -> list[tuple[int, int]]:
    """The runs of pages of this process's file mappings (its libraries) that are in its page table: (address,
    bytes). A fork copies the page table of memory written to, not of a library's pages only read, so the fork's
    resident memory would lack what the imports touched: a fresh process that imported the same has them."""
    import numpy as np

    page = os.sysconf("SC_PAGE_SIZE")
    found: list[tuple[int, int]] = []
    try:
        with open("/proc/self/maps") as maps, open("/proc/self/pagemap", "rb") as pagemap:
            for line in maps:
                fields = line.split()
                if len(fields) < 6 or fields[4] == "0" or not fields[1].startswith("r"):
                    continue  # anonymous (copied by the fork), or not readable
                start, end = (int(x, 16) for x in fields[0].split("-"))
                pagemap.seek(start // page * 8)
                entries = np.frombuffer(pagemap.read((end - start) // page * 8), dtype=np.uint64)
                present = np.flatnonzero((entries >> np.uint64(63)) & np.uint64(1))
                if present.size:
                    breaks = np.flatnonzero(np.diff(present) != 1) + 1
                    for run in np.split(present, breaks):
                        found.append((start + int(run[0]) * page, int(run.size) * page))
    except (OSError, ValueError):
        return []
    return found


def populate(runs: list[tuple[int, int]]) -> None:
    """In the fork: map the library pages the zygote had (``file_pages``), as a fresh process's imports
    would have (``MADV_POPULATE_READ``, Linux 5.14; without it, left as they are)."""
    if not runs:
        return
    madvise = ctypes.CDLL(None, use_errno=True).madvise
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    for address, length in runs:
        if madvise(address, length, MADV_POPULATE_READ) != 0 and ctypes.get_errno() == errno.EINVAL:
            return  # an older kernel
