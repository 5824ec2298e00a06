"""A fit run again resumes: the sizes its search decided, and the sweep that measures the sizes that fit, are kept
in ``<results_dir>/fits/<key>.json`` (the key: the start settings, the environment and the search's bounds), so
that a fit stopped by Ctrl-C or a crash, run again, tries no size twice and continues its sweep where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.fileio import write_text_atomic

FOLDER = "fits"


@dataclass
class FitState:
    """What a fit has done so far: its search's id, each size tried with its status and run id, its sweep's id."""

    key: str
    fit_id: str
    tried: dict[str, list[str]] = field(default_factory=dict)  # size -> [status, run id]
    sweep_id: str = ""
    ladder: str = ""

    def status(self, size: int) -> str | None:
        entry = self.tried.get(str(size))
        return entry[0] if entry else None


def fit_key(config_hash: str, env_key: str, low: int, high: int, axis: str = "batch") -> str:
    """The fit's identity: the same start, environment, bounds and axis (a batch fit's key as before axes)."""
    parts = [config_hash, env_key, low, high] + ([axis] if axis != "batch" else [])
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def _path(results_dir: str, key: str) -> Path:
    return Path(results_dir) / FOLDER / f"{key}.json"


def load(results_dir: str, key: str) -> FitState | None:
    """The state an earlier run of this fit left, or None (never run here, or a file that does not read)."""
    try:
        return FitState(**json.loads(_path(results_dir, key).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def save(results_dir: str, state: FitState) -> None:
    """Write the state (after every size and when the sweep starts); a failure only warns: the runs are stored."""
    try:
        path = _path(results_dir, state.key)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(asdict(state), indent=1))
    except OSError as exc:
        print(f"warning: the fit's progress was not saved ({exc}); a re-run would try its sizes again",
              file=sys.stderr)
