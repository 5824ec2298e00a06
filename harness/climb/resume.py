"""A climb run again resumes: its steps and runs come from the store, and its budget is what is left of it.

The time a climb spent is kept in ``<results_dir>/climbs/<key>.json``, the key naming the climb (its resolved
start settings, the environment, and the ``climb.*`` settings other than the budget), so that a climb stopped by
Ctrl-C, a crash or its budget, then run again, neither starts its budget clock anew nor says nothing of what it
took from the store. ``climb.budget_min`` is the whole climb's: a larger one on a re-run goes on from there.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.fileio import write_text_atomic
from harness.store import load_runs

FOLDER = "climbs"


@dataclass
class ClimbState:
    """What earlier runs of one climb left: their ids, the seconds they spent, the steps they decided."""

    key: str
    climb_ids: list[str] = field(default_factory=list)
    spent_s: float = 0.0
    steps: int = 0
    stopped: str = ""  # why the last run ended ("" when it was interrupted)


def climb_key(config_hash: str, env_key: str, repeats: int, min_effect: float, knobs) -> str:
    """The climb's identity: the same start, environment and search, whatever its budget."""
    blob = json.dumps([config_hash, env_key, repeats, min_effect, sorted(knobs) if knobs else None])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _path(results_dir: str, key: str) -> Path:
    return Path(results_dir) / FOLDER / f"{key}.json"


def load(results_dir: str, key: str) -> ClimbState | None:
    """The state earlier runs of this climb left, or None (never run here, or a file that does not read)."""
    try:
        return ClimbState(**json.loads(_path(results_dir, key).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def describe(state: ClimbState, results_dir: str, budget_s: float) -> str:
    """The line a resumed climb starts with: what its earlier runs (``state``) measured into ``results_dir``."""
    runs = _measured_runs(results_dir, state.climb_ids)
    left = budget_s - state.spent_s
    ended = f"stopped: {state.stopped}" if state.stopped else "interrupted"
    text = (f"resuming climb {state.climb_ids[-1]} ({ended}): its {state.steps} decided step(s) and the {runs} run(s) "
            f"it measured are taken from the store (marked cached, none measured again; a step it left part-measured "
            f"is measured again whole); it used "
            f"{state.spent_s / 60:.1f} of the {budget_s / 60:g} min budget")
    if left <= 0:
        return text + ", nothing is left: raise climb.budget_min (the whole climb's) to go on"
    return text + f", {left / 60:.1f} min are left"


def _measured_runs(results_dir: str, climb_ids: list[str]) -> int:
    """Runs the earlier climbs measured (not copies of runs before them, not knobs skipped at once)."""
    frame = load_runs(results_dir, columns=["status", "cached_from"], where={"sweep_id": climb_ids})
    return int(((frame["cached_from"].fillna("") == "") & (frame["status"] != "skipped")).sum())


class Tracker:
    """Keeps the state file of a running climb up to date: after every step and when it ends, however it ends."""

    def __init__(self, results_dir: str, key: str, earlier: ClimbState | None, climb_id: str, started: float):
        self.results_dir, self.started = results_dir, started
        self.state = ClimbState(key=key, climb_ids=[*(earlier.climb_ids if earlier else []), climb_id],
                                spent_s=earlier.spent_s if earlier else 0.0)
        self.earlier_s = self.state.spent_s
        self.earlier_steps = earlier.steps if earlier else 0  # a run cut short of replaying them leaves them stored
        self.steps = 0

    def spent(self) -> float:
        """Seconds this climb has spent, earlier runs included."""
        return self.earlier_s + time.monotonic() - self.started

    def step(self, decided: bool) -> None:
        """After a step: ``decided`` unless the budget left it not run."""
        self.steps += decided
        self.save()

    def save(self, stopped: str = "") -> None:
        self.state.spent_s, self.state.steps = self.spent(), max(self.steps, self.earlier_steps)
        self.state.stopped = stopped
        try:
            path = _path(self.results_dir, self.state.key)
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(path, json.dumps(asdict(self.state), indent=1))
        except OSError as exc:  # the runs are stored; only the budget of a later re-run would start anew
            print(f"warning: the climb's spent time was not saved ({exc}); a re-run would start its budget anew",
                  file=sys.stderr)
