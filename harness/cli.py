"""The command line: the only place Hydra is used.

``run`` and ``sweep`` take Hydra overrides (``key=value``); the analysis commands (``table``,
``plot``, ``compare``, ``report``, ``baseline``, ``check``) and ``store`` take ordinary flags, read the
store alone, and never import torch or Hydra.
"""

from __future__ import annotations

import importlib
import re
import signal
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
    "table": ("print a sweep's speedup table from the store", "harness.analysis.table"),
    "plot": ("draw a sweep's plots", "harness.analysis.plots"),
    "compare": ("compare two or more sweeps side by side", "harness.analysis.compare"),
    "report": ("write one self-contained HTML report of a sweep", "harness.analysis.report"),
    "baseline": ("save or list baselines for regression checks", "harness.analysis.regress"),
    "check": ("check a sweep against a baseline (exit 1 on regression)", "harness.analysis.regress"),
    "store": ("compact, inspect or verify the results store (compact | info | verify)", "harness.store_cli"),
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
    _quiet_store_warnings()
    if command in ("run", "diagnose", "sweep"):
        return _measuring_command(command, rest)
    module = importlib.import_module(COMMANDS[command][1])
    return module.main(command, rest)


def _measuring_command(command: str, rest: list[str]) -> int:
    """Commands that start measuring processes: an interruption kills them and says how to go on."""
    from harness import isolate

    previous = isolate.terminate_on_signals()
    try:
        if command == "run":
            return hydra_command(rest, multirun=False)
        if command == "diagnose":
            from harness import diagnose

            return hydra_command(rest, multirun=False, task=diagnose.task)
        from harness import sweep_cli

        return sweep_cli.main(rest)
    except (KeyboardInterrupt, isolate.Terminated) as exc:
        isolate.kill_live_children()
        signum = exc.signum if isinstance(exc, isolate.Terminated) else signal.SIGINT
        what = "sweep" if command == "sweep" else command
        print(f"\ninterrupted ({signal.Signals(signum).name}): the measuring process was stopped; every finished "
              f"measurement is stored. Run the same command to {'resume' if what == 'sweep' else 'measure again'}.",
              file=sys.stderr)
        return 128 + int(signum)
    finally:
        isolate.restore_signals(previous)


def _quiet_store_warnings() -> None:
    """An unreadable record in the store is one line on stderr, not a Python warning with source."""
    import warnings

    from harness.store import UnreadableRecord

    default = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, UnreadableRecord):
            print(f"warning: {message}", file=sys.stderr)
        else:
            default(message, category, filename, lineno, file, line)

    warnings.showwarning = show


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
            if not multirun:
                compose_settings(overrides)  # a bad value is one line here, not Hydra's error page
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


def compose_settings(overrides: list[str]):
    """The composed config (Hydra's compose API); ValueError with one line for a bad override."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    register_schema()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return compose(config_name="config", overrides=overrides)
    except (HydraException, OmegaConfBaseException) as exc:
        raise ValueError(hydra_error_text(exc)) from None


def hydra_error_text(exc: BaseException) -> str:
    """One line for a Hydra/OmegaConf error: the bad override and what was wrong with it."""
    causes = [exc]
    while causes[-1].__cause__ is not None and len(causes) < 5:
        causes.append(causes[-1].__cause__)
    head = str(exc).strip().splitlines()[0]
    missing = re.search(r"Could not find '(\w+)/([^']+)'", str(exc))
    if missing and (CONF_DIR / missing.group(1)).is_dir():
        group, name = missing.groups()
        choices = sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))
        return f"{group}={name} is not a choice; valid choices: {', '.join(choices)}"
    detail = next((str(c).strip().splitlines()[0] for c in causes[1:] if str(c).strip()), "")
    return f"{head}: {detail}" if detail and detail not in head else head


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
    from harness.store import check_writable
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
        check_writable(resolved.results_dir)
        runner.prepare_data(resolved, console.print)
    except (OSError, ValueError) as exc:
        console.print(f"[red]error:[/] {exc}")
        set_exit_code(2)
        return
    env, key = runner.environment(resolved.device)
    with RunProgress(console, f"{resolved.workload}") as progress:
        record = runner.run_and_store(resolved, env, key, progress.update)
    console.print(run_summary(record))
    path = Path(resolved.results_dir) / "runs" / f"{record.run_id}.parquet"
    if path.exists():
        console.print(f"stored in {path}")
    set_exit_code(0 if record.status == "ok" else 1)
