"""The command line: the only place Hydra is used.

``run`` and ``sweep`` take Hydra overrides (``key=value``); the analysis commands (``table``,
``plot``, ``compare``, ``report``, ``baseline``, ``check``) take ordinary flags, read the store
alone, and never import torch or Hydra.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Optional

from harness import config as config_mod

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
CONFIG_GROUPS = ("ladder", "data")  # Hydra groups: `data=disk` picks conf/data/disk.yaml

COMMANDS = {
    "run": ("measure one short training run in its own process and store it", None),
    "sweep": ("climb a ladder (+ladder=NAME), one rung per process, and print the speedup table", None),
    "diagnose": ("data-bound or compute-bound? loader alone, model alone, full step", None),
    "noise": ("calibrate this machine's noise: the same settings in N fresh processes (noise.runs=N)", None),
    "table": ("print a sweep's speedup table from the store", "harness.analysis.table"),
    "plot": ("draw a sweep's plots", "harness.analysis.plots"),
    "compare": ("compare two or more sweeps side by side", "harness.analysis.compare"),
    "report": ("write one self-contained HTML report of a sweep", "harness.analysis.report"),
    "baseline": ("save or list baselines for regression checks", "harness.analysis.regress"),
    "check": ("check a sweep against a baseline (exit 1 on regression)", "harness.analysis.regress"),
}

USAGE = "usage: python -m harness COMMAND [ARGS]\n\ncommands:\n" + "\n".join(
    f"  {name:<9} {text}" for name, (text, _) in COMMANDS.items()
) + "\n\n`python -m harness run --help` shows the settings; analysis commands take --help too."


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        from harness.registry import unknown_choice

        print(f"error: {unknown_choice('command', command, COMMANDS)}", file=sys.stderr)
        return 2
    if command == "run":
        return hydra_command(rest, multirun=False)
    if command == "diagnose":
        from harness import diagnose

        return hydra_command(rest, multirun=False, task=diagnose.task)
    if command == "noise":
        from harness import noise

        return noise.main(rest)
    if command == "sweep":
        from harness import sweep_cli

        return sweep_cli.main(rest)
    module = importlib.import_module(COMMANDS[command][1])
    return module.main(command, rest)


# ------------------------------------------------------------------------------------------
# Hydra edge


@dataclass
class HydraRoot(config_mod.RunConfig):
    """RunConfig plus the optional ladder node that ``+ladder=NAME`` adds."""

    ladder: Optional[Any] = None


_registered = False
_exit_code = 0


def register_schema() -> None:
    global _registered
    if not _registered:
        from hydra.core.config_store import ConfigStore

        ConfigStore.instance().store(name="base", node=HydraRoot)
        _registered = True


def override_key(override: str) -> str | None:
    """The setting an override names (None for Hydra's own and for flags)."""
    if override.startswith("-") or "=" not in override:
        return None
    key = override.split("=", 1)[0].lstrip("+~")
    if key.startswith("hydra") or key in CONFIG_GROUPS or key.startswith("ladder."):
        return None
    return key


def check_overrides(overrides: list[str]) -> None:
    """Unknown settings stop here, before Hydra or anything else runs, with did-you-mean."""
    for override in overrides:
        key = override_key(override)
        if key is not None:
            config_mod.check_key(key)


def hydra_command(overrides: list[str], multirun: bool, task=None) -> int:
    """Run a Hydra app over ``overrides`` and return the exit code its task left."""
    global _exit_code
    if not any(o in ("--help", "-h", "--hydra-help", "--cfg", "-c", "--info") for o in overrides):
        try:
            check_overrides(overrides)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    import hydra

    register_schema()
    _exit_code = 0
    task = task or run_task

    @hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
    def app(cfg) -> None:
        task(cfg)

    saved = sys.argv
    sys.argv = [f"{sys.argv[0]}"] + (["--multirun"] if multirun else []) + overrides
    try:
        app()
    except SystemExit as exc:  # Hydra exits on its own errors (bad override syntax, unknown group)
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    finally:
        sys.argv = saved
    return _exit_code


def set_exit_code(code: int) -> None:
    global _exit_code
    _exit_code = max(_exit_code, code)


def plain_settings(cfg) -> dict:
    """The composed Hydra config as a plain dict, without the ladder node."""
    from omegaconf import OmegaConf

    values = OmegaConf.to_container(cfg, resolve=True)
    values.pop("ladder", None)
    return values


def run_task(cfg) -> None:
    """`python -m harness run`: one isolated run, a summary, one stored record."""
    from harness import runner
    from harness.console import console, run_summary
    from harness.progress import RunProgress

    try:
        settings = config_mod.from_dict(plain_settings(cfg))
        machine = runner.Machine.detect()
        resolved = runner.resolve(settings, machine)
    except ValueError as exc:
        console.print(f"[red]error:[/] {exc}")
        set_exit_code(2)
        return
    if settings.size == "auto" or settings.device == "auto":
        console.print(f"device: {resolved.device}, size: {resolved.size}"
                      + ("  (no CUDA GPU here: running the small CPU size)" if resolved.device == "cpu" else ""))
    try:
        runner.prepare_data(resolved, console.print)
    except OSError as exc:
        console.print(f"[red]error:[/] {exc}")
        set_exit_code(2)
        return
    env, key = runner.environment(resolved.device)
    with RunProgress(console, f"{resolved.workload}") as progress:
        record = runner.run_and_store(resolved, env, key, progress.update)
    console.print(run_summary(record))
    console.print(f"stored in {resolved.results_dir}/runs/{record.run_id}.parquet")
    set_exit_code(0 if record.status == "ok" else 1)
