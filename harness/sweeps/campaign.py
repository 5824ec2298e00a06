"""A campaign (``sweep -m``): many sweeps launched as one Hydra multirun, one sweep per combination of values.

Plain Python: Hydra's own parsing of the values stays at the edge (``harness.commands.hydra_edge``); here the
combinations are formed, each job's sweep id is fixed, the launcher is judged, and the ladders a results
folder holds are put where Hydra's config search finds them.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Iterable

from harness.fileio import write_text_atomic
from harness.config import ladder as ladder_mod

# Hydra's default launcher (one job after another, in this process), as the _target_ its config composes to; it is
# recognised by its class name alone, so nothing depends on the module Hydra keeps it in
BASIC_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"
CLUSTER_LAUNCHERS = ("SlurmLauncher",)  # one job per node: timings of different jobs do not share a machine
CAMPAIGN_LADDERS = ".campaign-ladders"  # <results_dir>/.campaign-ladders/ladder/NAME.yaml: Hydra's view of ladders/
SWEEP_FUNCTIONS = ("range(", "choice(", "interval(", "glob(")


def expand(alternatives: Iterable[tuple[str, list[str]]]) -> list[list[str]]:
    """The jobs of a multirun, as Hydra's basic sweeper forms them: ``alternatives`` is each override's key and
    its values as overrides (``["a=1", "a=2"]``); a key given twice keeps its first place and its last values;
    the jobs are the cartesian product, the first key outermost."""
    by_key: dict[str, list[str]] = {}
    for key, values in alternatives:
        by_key[key] = list(values)
    return [list(job) for job in itertools.product(*by_key.values())]


def gives_several_values(value: str) -> bool:
    """A Hydra sweep (``a,b`` or ``range(...)``/``choice(...)``) rather than one value (lists are fine)."""
    depth = 0
    for ch in value:
        depth += ch in "[({"
        depth -= ch in "])}"
        if ch == "," and depth == 0:
            return True
    return value.startswith(SWEEP_FUNCTIONS)


def job_sweep_id(ladder: str, campaign_id: str, job: int) -> str:
    """A campaign job's sweep id: fixed by the campaign and the job number, so a requeued job resumes it."""
    return f"{ladder}-{campaign_id}-j{job}"


def launcher_warning(target: str) -> str:
    """What to tell the user about where the launcher runs the sweeps ("" for the default)."""
    if target.rsplit(".", 1)[-1] == BASIC_LAUNCHER.rsplit(".", 1)[-1]:
        return ""
    if target.endswith(CLUSTER_LAUNCHERS):
        return ("each sweep runs as its own cluster job; ask for whole nodes (exclusive) so that no other job "
                "shares the machine a sweep measures on")
    return (f"WARNING: launcher {target.rsplit('.', 1)[-1]} runs sweeps AT THE SAME TIME on this machine: their "
            "timings overlap and one sweep's numbers are not comparable with another's (nor with a quiet "
            "machine's). Use the default launcher to measure; use this one only to test the plumbing.")


def results_ladder_roots(ladders: Iterable[tuple[ladder_mod.Ladder, str]]) -> list[Path]:
    """For the campaign's ladders (each with its sweep's results folder) that live in a results folder
    (``climb`` wrote them), a config root Hydra can search: its config group is ``ladder/``, the results
    folder's is ``ladders/``, so the files are copied into ``<results_dir>/.campaign-ladders/ladder/`` (a copy,
    not a link: a launcher may run the jobs elsewhere). OSError when they cannot be written."""
    roots: list[Path] = []
    for ladder, results_dir in ladders:
        path = Path(ladder.path) if ladder.path else None
        results = Path(results_dir)
        if path is None or path.parent.resolve() != (results / ladder_mod.USER_LADDERS).resolve():
            continue
        root = results / CAMPAIGN_LADDERS
        (root / "ladder").mkdir(parents=True, exist_ok=True)
        write_text_atomic(root / "ladder" / path.name, path.read_text())
        if root not in roots:
            roots.append(root)
    return roots
