"""The command line: a dispatch table from command names to the modules that run them.

``run``, ``sweep``, ``diagnose``, ``noise``, ``climb`` and ``fit`` take Hydra overrides (``key=value``, composed in
``harness.commands.hydra_edge``); the analysis commands (``table``, ``plot``, ``compare``, ``report``,
``profile``, ``baseline``, ``check``, ``history``) and ``store`` take ordinary flags (the shared ones in
``harness.commands.common_args``), read the store alone through plain functions of ``harness.analysis``, and
never import torch or Hydra. ``check --against REF`` is the exception: it measures, each run a fresh
``python -m harness run`` in REF's tree or the working tree (``harness.commands.against``).
Every command module is in ``harness.commands`` and has ``main(command, argv) -> exit code``.
"""

from __future__ import annotations

import contextlib
import importlib
import signal
import sys
from typing import Iterator

from harness.commands import exit_codes
from harness.registry import unknown_choice
from harness.shell import given_key, settings_only

COMMANDS = {
    "run": ("measure one short training run in its own process and store it", "harness.commands.run"),
    "sweep": ("climb a ladder (+ladder=NAME), one rung per process; -m: a campaign of sweeps",
              "harness.commands.sweep"),
    "diagnose": ("data-bound or compute-bound? loader alone, model alone, full step", "harness.commands.diagnose"),
    "noise": ("calibrate this machine's noise: the same settings in N fresh processes (noise.runs=N)",
              "harness.commands.noise"),
    "climb": ("find the fastest settings here: one knob at a time, kept only when faster beyond noise",
              "harness.commands.climb"),
    "fit": ("the largest batch that fits (double, then bisect, each size a fresh process) and the speed at each size",
            "harness.commands.fit"),
    "table": ("print a sweep's speedup table from the store", "harness.commands.table"),
    "plot": ("draw a sweep's plots", "harness.commands.plot"),
    "compare": ("compare two or more sweeps side by side", "harness.commands.compare"),
    "report": ("write one self-contained HTML report of a sweep", "harness.commands.report"),
    "profile": ("why a rung is slow: its profile, or what changed between two (sweeps run with profile.enabled=true)",
                "harness.commands.profile"),
    "baseline": ("save or list baselines for regression checks", "harness.commands.baseline"),
    "check": ("check a sweep against a baseline, or the working tree against a commit (--against REF); "
              "exit 1 on regression", "harness.commands.check"),
    "export": ("put a sweep's or a check's decided figures in TensorBoard, MLflow or W&B (--to tb|mlflow|wandb DEST)",
               "harness.commands.export"),
    "history": ("write one HTML page of every config's throughput over commits and dates, with each gate's verdict",
                "harness.commands.history"),
    "bisect": ("find the first commit of GOOD..BAD that made a config slower, by paired checks",
               "harness.commands.bisect"),
    "machine": ("is this machine fit to measure? CPU governor and boost, other load, GPU persistence and clocks",
                "harness.commands.machine"),
    "store": ("compact, inspect, verify or import into the results store (compact | info | verify | import)",
              "harness.commands.store"),
    "guides": ("write docs/guides.md, the guides' map, from the ladders and the records (--check: exit 1 if it "
               "differs)", "harness.commands.guides"),
    "init": ("start your repository's own configs: harness-conf/ with a workload and a ladder to edit",
             "harness.commands.init"),
}

MEASURING = ("run", "sweep", "diagnose", "noise", "climb", "fit")  # start measuring processes (and check --against)

USAGE = "usage: python -m harness COMMAND [ARGS]\n\ncommands:\n" + "\n".join(
    f"  {name:<9} {text}" for name, (text, _) in COMMANDS.items()
) + "\n\n`python -m harness run --help` shows the settings; analysis commands take --help too.\n\n"
HELP_FLAGS = ("-h", "--help")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in (*HELP_FLAGS, "help"):
        print(USAGE + exit_codes.help_text())
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"error: {unknown_choice('command', command, COMMANDS)}", file=sys.stderr)
        return 2
    misplaced = misplaced_setting(command, rest)
    if misplaced:
        print(f"error: {misplaced}", file=sys.stderr)
        return 2
    with _launcher_first(command, rest):
        _quiet_store_warnings()
        module = importlib.import_module(COMMANDS[command][1])
        if command in MEASURING or (command == "check" and measures_against(rest)):
            return _measuring_command(module, command, rest)
        return module.main(command, rest)


@contextlib.contextmanager
def _launcher_first(command: str, argv: list[str]) -> Iterator[None]:
    """A single ``run`` of settings only (``key=value``): its warm launcher started before this process imports
    the command, the store and the settings' schema (0.3 s of CPU time on a 2-core CPU), which it then does
    beside the launcher's imports instead of before them; the command's own ``launcher.warm()`` finds this session
    (``harness.commands.run``). Any other command, or a ``run`` with flags (Hydra reads them first): nothing."""
    if command != "run" or not settings_only(argv):
        yield
        return
    from harness.run.parent import launcher  # psutil (no torch, no store): only a `run` of settings starts it here

    with launcher.warm() as session:
        session.begin(None, early=True)
        yield


def measures_against(argv: list[str]) -> bool:
    """Whether ``check``'s arguments ask for ``--against REF``: then it measures, as the measuring commands do."""
    return any(arg == "--against" or arg.startswith("--against=") for arg in argv)


OWN_SETTINGS = ("climb", "fit")  # commands whose own settings (climb.*, fit.*) no other command takes
LADDER_FREE = ("run", "noise", "climb", "fit")  # measuring commands that take no +ladder=NAME (sweep, diagnose do)


def misplaced_setting(command: str, argv: list[str]) -> str:
    """The error for a ``climb.*`` or ``fit.*`` setting given to another command, or a ladder given to a command
    that takes none (either would be ignored without a word), or ""."""
    for arg in argv:
        key = given_key(arg)
        if key == "ladder" and command in LADDER_FREE:
            return (f"{arg!r}: `{command}` takes no ladder; a ladder is measured by `python -m harness sweep "
                    f"+ladder=NAME` (its baseline alone: `python -m harness diagnose +ladder=NAME`)")
        owner = next((c for c in OWN_SETTINGS if key == c or key.startswith(c + ".")), command)
        if owner != command:
            return (f"{arg!r} is a setting of `python -m harness {owner}`; `{command}` does not take it "
                    "(settings of every measuring command: `python -m harness run --help`)")
    return ""


def _measuring_command(module, command: str, rest: list[str]) -> int:
    """Commands that start measuring processes: an interruption kills them and says how to go on
    (``harness.run.parent.lifetime``: the rule every one of them follows)."""
    from harness.run.parent import isolate, lifetime  # psutil, pyarrow: not for `python -m harness --help`
    from harness.store import write  # pyarrow: `python -m harness --help` needs no store

    previous = lifetime.terminate_on_signals()
    kept_before = len(write.KEPT_ELSEWHERE)  # main() may run several commands in one process (the tests do)
    salvaged_before = len(isolate.KEPT_AT_INTERRUPT)
    try:
        code = module.main(command, rest)
        if any(a in HELP_FLAGS for a in rest):
            print("\n" + exit_codes.help_text())
        return _kept_elsewhere(code, write.KEPT_ELSEWHERE[kept_before:])
    except (KeyboardInterrupt, lifetime.Terminated) as exc:
        lifetime.kill_live_children()
        signum = lifetime.signal_of(exc)
        resumes = command in ("sweep", "climb", "fit", "check")
        salvaged = "".join(f"; {line}" for line in isolate.KEPT_AT_INTERRUPT[salvaged_before:])
        print(f"\ninterrupted ({signal.Signals(signum).name}): the measuring process was stopped; every finished "
              f"measurement is stored{salvaged}. Run the same command to {'resume' if resumes else 'measure again'}.",
              file=sys.stderr)
        _kept_elsewhere(0, write.KEPT_ELSEWHERE[kept_before:])
        return exit_codes.INTERRUPTED + int(signum)
    finally:
        lifetime.restore_signals(previous)


def _kept_elsewhere(code: int, kept: list[str]) -> int:
    """``code``, or NOT_STORED when records of this command did not reach its results folder (``kept``: the commands
    that put them back), said on stderr after everything else."""
    if not kept:
        return code
    print(f"error: {len(kept)} record(s) did not reach the results folder (exit {exit_codes.NOT_STORED}); once there "
          f"is room, put them back: {'; '.join(kept)}", file=sys.stderr)
    return exit_codes.NOT_STORED


def _quiet_store_warnings() -> None:
    """An unreadable record in the store, or a setting that runs but not as it might here, is one line on stderr,
    not a Python warning with source."""
    import warnings

    from harness.config import SettingWarning  # yaml and the schema: `python -m harness --help` needs neither
    from harness.store import UnreadableRecord  # pyarrow: `python -m harness --help` needs no store

    default = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, (UnreadableRecord, SettingWarning)):
            print(f"warning: {message}", file=sys.stderr)
        else:
            default(message, category, filename, lineno, file, line)

    warnings.showwarning = show
