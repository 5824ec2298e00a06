"""The harness's public Python API: what a user's script may import (the GPU campaign's scripts/gpu_*.py do, and
import nothing else of the harness; tests/test_api.py checks it). Everything else under harness/ is internal and
may change from one commit to the next; these functions keep their names and meaning.

Importing it loads neither torch nor Hydra. Commands run as a user runs them: :func:`run_command` is
``python -m harness ARGS`` in this process. Where no command does what a script needs (measuring chosen rungs of a
ladder for chosen rounds into one sweep, a part at a time), :func:`open_sweep` does it through the very path
``harness sweep`` takes: the same settings, cache, failed-rung rules and warm launcher.

    ladders and workloads  ladder_dir, load_ladder, workload, QUEUE_MAX_STEPS
    this checkout          git_state, code_fingerprint
    the store              runs_dir, load_runs, load_run_files, load_table, band_text, claim_verdict
    measuring              run_command, open_sweep (-> Sweep.measure, yielding Turn)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from harness import cli
from harness import config as config_mod
from harness.analysis.stats import speedup
from harness.analysis.views import table as table_view
from harness.analysis.views.rows import SweepTable
from harness.config import ladder as ladder_mod
from harness.config import workload as workload_mod
from harness.run.child.stopping import QUEUE_MAX_STEPS as _QUEUE_MAX_STEPS
from harness.run.parent import fingerprint, launcher, runner
from harness.store import RunRecord, read, write
from harness.sweeps import rungs as sweep_mod
from harness.workload import datasets

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["QUEUE_MAX_STEPS", "Sweep", "Turn", "band_text", "claim_verdict", "code_fingerprint", "git_state",
           "ladder_dir", "load_ladder", "load_run_files", "load_runs", "load_table", "open_sweep", "run_command",
           "runs_dir", "workload"]

QUEUE_MAX_STEPS: int = _QUEUE_MAX_STEPS
"""The most steps of batches queued by the loader that a run's warm-up eats before it measures (a longer queue is
not eaten: the table says so)."""


# ------------------------------------------------------------------------------------------
# ladders and workloads


def ladder_dir() -> Path:
    """The folder of the shipped ladders (``conf/ladder/``, one ``NAME.yaml`` each); its parent holds the shipped
    workloads (``workload/NAME.yaml``)."""
    return ladder_mod.LADDER_DIR


def load_ladder(name: str, results_dir: str = "results") -> ladder_mod.Ladder:
    """The ladder ``+ladder=NAME`` runs, checked (ValueError naming the folders searched for an unknown one): its
    ``rungs``, ``settings(rung, size)``, ``total_claim``, ``stop_on_oom`` ..."""
    return ladder_mod.load(name, results_dir)


def workload(name: str) -> workload_mod.WorkloadSpec:
    """The shipped workload ``name`` as its file composes it (a fresh copy): its ``sizes`` (``sizes["full"]``:
    batch size, steps, input shape or sequence), ``axes`` (``["channel", "sequence"]`` for a language model),
    ``spatial_dims`` ... (ValueError, with did-you-mean, for an unknown name)."""
    return workload_mod.builtin(name)


# ------------------------------------------------------------------------------------------
# this checkout


def git_state(repo: Path | None = None) -> tuple[str, bool | None]:
    """The commit checked out at ``repo`` (default: the harness's own) and whether tracked files differ from it;
    ``("", None)`` where git or the repository is missing."""
    return fingerprint.git_state(repo)


def code_fingerprint(root: Path | None = None) -> str:
    """A hash (16 hex) of the measured code as it is on disk, committed or not: what every record's
    ``code_fingerprint`` holds, so records of one code join one comparison."""
    return fingerprint.code_fingerprint(root) if root else fingerprint.code_fingerprint()


# ------------------------------------------------------------------------------------------
# the store


def runs_dir(results_dir: str | Path) -> Path:
    """The folder of a results folder's loose record files (one ``*.parquet`` a run)."""
    return write.runs_dir(results_dir)


def load_runs(results_dir: str | Path, columns: Iterable[str] | None = None,
              where: dict[str, Any] | None = None) -> pd.DataFrame:
    """The records of a results folder as a pandas DataFrame, one row a run (``columns`` alone; ``where``: column ->
    value or list of values, filtered as they are read). ValueError when there is no such folder."""
    return read.load_runs(results_dir, columns=list(columns) if columns is not None else None, where=where)


def load_run_files(paths: Iterable[str | Path]) -> pd.DataFrame:
    """The records of these record files as a pandas DataFrame (columns an older file lacks come back empty)."""
    return read.load_parquet_files([str(p) for p in paths])


def load_table(results_dir: str | Path, sweep: str = "latest") -> SweepTable:
    """One sweep's table as ``python -m harness table`` builds it (its ``rows``: each rung's ``x_baseline``,
    ``x_previous``, ``built_on`` ...). ValueError for a missing folder or sweep."""
    return table_view.load_table(str(results_dir), sweep)


def band_text(ratio: speedup.Ratio | None) -> str:
    """A speedup and its band as the table writes it: ``1.07x [0.83-1.37]`` (``-`` for None)."""
    return speedup.band_text(ratio)


def claim_verdict(ratio: speedup.Ratio, claim_low: float, claim_high: float) -> str:
    """The table's verdict on a speedup against a claimed range: confirms, inconclusive, falls short, exceeds..."""
    return speedup.verdict(ratio, claim_low, claim_high)


# ------------------------------------------------------------------------------------------
# measuring


def run_command(argv: list[str]) -> int:
    """``python -m harness ARGV`` in this process; its exit code."""
    return cli.main(list(argv))


@dataclass(frozen=True)
class Turn:
    """One rung of one round of a :class:`Sweep`: ``how`` it went (measured, cached, skipped, not run; kept: the
    caller's ``keep`` said the sweep has it), its record (None when nothing ran) and why not."""

    rung: int
    round: int
    how: str
    record: RunRecord | None = None
    message: str = ""


@dataclass(frozen=True)
class Sweep:
    """A sweep measured a part at a time (see :func:`open_sweep`)."""

    _context: sweep_mod.SweepContext

    @property
    def ladder(self) -> ladder_mod.Ladder:
        return self._context.ladder

    @property
    def sweep_id(self) -> str:
        return self._context.sweep_id

    @property
    def results_dir(self) -> str:
        return self._context.results_dir

    def measure(self, turns: list[tuple[int, int]],
                keep: Callable[[int, int], bool] | None = None) -> Iterator[Turn]:
        """Measure (rung, round) ``turns`` in order, each as a rung of ``harness sweep``: its datasets built before
        anything is timed, every run forked from one warm launcher, a rung copied from the store where a sweep
        would copy it. A turn ``keep(rung, round)`` says the sweep has is not measured again."""
        machine = runner.Machine.detect()
        for index in dict.fromkeys(index for index, _ in turns):  # datasets before anything is timed
            datasets.prepare(sweep_mod.rung_config(self._context, index, machine))
        with launcher.warm():  # the launch path `harness sweep` takes: each run forked from one warm process
            for index, round_ in turns:
                if keep is not None and keep(index, round_):
                    yield Turn(index, round_, "kept")
                    continue
                outcome = sweep_mod.run_rung(self._context, index, round_, machine)
                yield Turn(index, round_, outcome.how, outcome.record, outcome.message)


def open_sweep(ladder_name: str, sweep_id: str, overrides: Iterable[str] = (), rounds: int = 1) -> Sweep:
    """The sweep ``sweep_id`` of ladder ``ladder_name`` with the settings ``key=value`` (YAML values, as on the
    command line) over the defaults, planned for ``rounds`` rounds: parts measured in separate commands (each on a
    fresh machine) make one sweep once their records are in one results folder. ValueError naming a bad setting,
    or an override of what the ladder varies."""
    cfg = config_mod.RunConfig()
    keys = set()
    for item in overrides:
        key, _, value = item.partition("=")
        config_mod.set_key(cfg, key, yaml.safe_load(value) if value else value)
        keys.add(key)
    lad = ladder_mod.load(ladder_name, cfg.results_dir)
    clash = sweep_mod.conflicts(lad, keys)
    if clash:
        raise ValueError(f"{clash} is what ladder {ladder_name!r} varies; remove the override")
    return Sweep(sweep_mod.SweepContext(sweep_id=sweep_id, ladder=lad, settings=config_mod.to_dict(cfg),
                                        user_keys=frozenset(keys), repeats=rounds))
