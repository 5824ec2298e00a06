"""Synthetic data made once per sweep and shared by its runs: the first run that needs a data set makes it and
leaves it as ``.npy`` files in the sweep's temporary folder; later runs map those files (copy-on-write: a run may
write to its arrays, never to the files) instead of generating them again.

Only inside a sweep (the parent sets ``HARNESS_SHARED_DATA`` to the folder, ``harness.run.parent.launcher``); elsewhere
every run makes its own, as before. The arrays are byte for byte what the run would have made itself: the key names
everything they depend on, and a run that finds no complete set makes it. The pages are read once on load, so that
a run's steps find them resident as they would find arrays it had made (no page fault inside the window).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

ENV = "HARNESS_SHARED_DATA"
PAGE = 4096


def once(kind: str, key: dict, make: Callable[[], Sequence]) -> list:
    """What ``make`` returns (a sequence of numpy arrays, or of tuples of them: ``[(image, label), ...]``), made
    once per sweep. ``kind`` and ``key`` must name everything the arrays depend on (shapes, counts, seed, ...): two
    calls with the same ones get the same arrays."""
    folder = os.environ.get(ENV, "")
    if not folder or not Path(folder).is_dir():
        return list(make())
    blob = json.dumps({"kind": kind, **key}, sort_keys=True, default=str)
    where = Path(folder) / f"{kind}-{hashlib.sha256(blob.encode()).hexdigest()[:16]}"
    if (where / "done").exists():
        try:
            layout = json.loads((where / "layout.json").read_text())
            return _grouped([_mapped(path) for path in sorted(where.glob("*.npy"))], layout)
        except (OSError, ValueError):  # a set damaged since: made again below
            pass
    made = list(make())
    _keep(made, where, blob)
    return made


def _grouped(flat: list[np.ndarray], layout: list[int]) -> list:
    """The flat arrays back in their groups (``layout``: a group's size, or -1 for a lone array)."""
    out, i = [], 0
    for size in layout:
        if size < 0:
            out.append(flat[i])
            i += 1
        else:
            out.append(tuple(flat[i:i + size]))
            i += size
    if i != len(flat):
        raise ValueError(f"{len(flat)} arrays stored for a layout of {i}")
    return out


def _mapped(path: Path) -> np.ndarray:
    array = np.load(path, mmap_mode="c")
    if array.size:
        int(array.reshape(-1).view(np.uint8)[::PAGE].sum())  # every page read in now: resident, as a made array is
    return np.asarray(array)


def _keep(made: list, where: Path, blob: str) -> None:
    """Write the set beside its final place and move it there whole (a run killed while writing leaves no half
    set); a full disk only means that the next run makes its own."""
    tmp = None
    try:
        tmp = Path(tempfile.mkdtemp(prefix=".making-", dir=where.parent))
        flat = [a for item in made for a in (item if isinstance(item, (tuple, list)) else (item,))]
        layout = [len(item) if isinstance(item, (tuple, list)) else -1 for item in made]
        for i, array in enumerate(flat):
            np.save(tmp / f"{i:04d}.npy", np.ascontiguousarray(array), allow_pickle=False)
        (tmp / "layout.json").write_text(json.dumps(layout))
        (tmp / "key.json").write_text(blob)
        (tmp / "done").write_text("")
        os.rename(tmp, where)
    except OSError:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
