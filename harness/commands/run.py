"""``python -m harness run [key=value ...]``: one isolated run, a summary, one stored record.

Exit code (``harness.commands.exit_codes``): 0 ok, 1 the run failed, 2 bad input, 3 the record is not in
results_dir, 4 skipped (the setting cannot act here: nothing was measured).
"""

from __future__ import annotations

import os
from pathlib import Path

from harness import config as config_mod
from harness.commands import exit_codes, hydra_edge
from harness.run.parent import env as env_mod, launcher, rendezvous, runner
from harness.commands.console import console, refuse, run_summary
from harness.commands.progress import RunProgress
from harness.store import check_writable
from harness.workload import datasets, preflight
from harness.names import display_name
from harness.shell import settings_only


MULTIRUN_FLAGS = ("-m", "--multirun")


def main(command: str, argv: list[str]) -> int:
    """``-m``: through Hydra's launcher (a run of ``nodes`` >= 2 on SLURM: one job whose tasks are the nodes). One
    run of settings only (``key=value``): the warm launcher starts at once and imports torch and the measuring modules
    while this process composes the settings, then imports the run's workload and forks the run (``launched_by``
    fork): the two processes' starts overlap instead of adding up."""
    multirun = any(a in MULTIRUN_FLAGS for a in argv)
    with launcher.warm() as session:
        if settings_only(argv):  # started already where ``harness.cli`` ran this command (before importing it)
            session.begin(None, early=True)
        return hydra_edge.hydra_app([a for a in argv if a not in MULTIRUN_FLAGS], task, multirun=multirun)


def task(cfg) -> int:
    try:
        settings = config_mod.from_dict(hydra_edge.plain_settings(cfg))
        resolved = runner.resolve(settings, runner.Machine.detect())
        check_writable(resolved.results_dir, "`python -m harness run`")
        preflight.check_model_builds(resolved)
        meet = rendezvous.of(resolved, os.environ)
    except (OSError, ValueError) as exc:
        return refuse(exc)
    if meet is not None:
        console.print(meet.describe() + (": this node measures its ranks; node 0 stores the run's record"
                                         if meet.node_rank else ""))
    if settings.size == "auto" or settings.device == "auto":
        console.print(f"device: {resolved.device}, size: {resolved.size}"
                      + ("  (no CUDA GPU here: running the small CPU size)" if resolved.device == "cpu" else ""))
    session = launcher.active()
    if session is not None:  # the launcher imports the run's workload while this process goes on
        session.one_run = True  # (several devices or nodes: torch's launcher starts the ranks, as before)
        session.begin(config_mod.to_dict(resolved) if resolved.devices == 1 and resolved.nodes == 1 else None)
    try:
        datasets.prepare(resolved, console.print)
    except (OSError, ValueError) as exc:
        return refuse(exc)
    env, key = env_mod.environment(resolved.device)
    with RunProgress(console, display_name(resolved.workload.name, resolved.workload.model_node)) as progress:
        record = runner.run_and_store(resolved, env, key, progress.update)
    console.print(run_summary(record))
    path = Path(resolved.results_dir) / "runs" / f"{record.run_id}.parquet"
    if path.exists():
        console.print(f"stored in {path}")
    elif meet is not None and meet.node_rank:
        console.print(f"not stored here: node 0 ({meet.master_addr}) stores the record")
    return {"ok": exit_codes.OK, "skipped": exit_codes.SKIPPED}.get(record.status, exit_codes.FAILED)
