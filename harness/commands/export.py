"""``python -m harness export``: a sweep's or a check's decided figures where a team already looks.

    python -m harness export --to tb|mlflow|wandb DEST [--results DIR] [--sweep ID|latest|all]
                             [--campaign ID|latest] [--check ID|latest|all] [--experiment NAME]

DEST is a folder for ``tb`` and ``wandb``, a tracking URI for ``mlflow`` (``http://HOST:PORT``). With none of
``--sweep``, ``--campaign`` and ``--check`` the newest sweep is exported. What is exported is decided summaries
(``harness.export.figures``), not a stream of steps; the writers are ``harness.export.to_*``, each importing its
tracker's library only here. No Hydra.
"""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys
from dataclasses import dataclass

from harness.analysis.views.rows import SweepTable
from harness.commands import common_args
from harness.export import figures
from harness.registry import unknown_choice

TARGETS = {"tb": "harness.export.to_tb", "mlflow": "harness.export.to_mlflow", "wandb": "harness.export.to_wandb"}


def main(command: str, argv: list[str]) -> int:
    parser = common_args.parser(command, "export a sweep's or a check's decided figures to TensorBoard, MLflow or "
                                         "Weights & Biases (docs/export.md)")
    parser.add_argument("--to", required=True, type=_target, metavar="{" + ",".join(TARGETS) + "}",
                        help="tb: TensorBoard event files; mlflow: runs on a tracking server; wandb: offline runs")
    parser.add_argument("dest", metavar="DEST",
                        help="a folder (tb, wandb) or a tracking URI (mlflow: http://HOST:PORT)")
    common_args.add_results(parser)
    parser.add_argument("--sweep", default=None, help="sweep id, 'latest' (the default when nothing else is named) or "
                                                      "'all' (every sweep of the store)")
    parser.add_argument("--campaign", default=None, help="campaign id or 'latest': each of its sweeps")
    parser.add_argument("--check", default=None, help="a kept check verdict's id, 'latest' or 'all'")
    parser.add_argument("--experiment", default="harness", help="MLflow experiment / W&B project (default harness)")
    return common_args.run(parser, argv, export)


def _target(value: str) -> str:
    if value not in TARGETS:
        raise argparse.ArgumentTypeError(str(unknown_choice("--to", value, TARGETS)))
    return value


def export(args: argparse.Namespace) -> int:
    """Check the target, read the figures, write them; a line per group on stdout."""
    writer = importlib.import_module(TARGETS[args.to])
    if args.to == "mlflow":
        writer.check_uri(args.dest)  # before anything is read
    named = (args.sweep, args.campaign, args.check)
    sweep = "latest" if named == (None, None, None) else args.sweep
    groups = figures.groups(args.results, sweep, args.check, args.campaign)
    if not groups:  # `--sweep all` / `--check all` of a store without any: said, not a silent success
        print(f"nothing to export: the store in {args.results} holds no sweep or kept check verdict that "
              f"{_named(args)} names")
        return 0
    lines = writer.export(groups, args.dest, args.experiment)
    for line in lines:
        print(line)
    return 0


def _named(args: argparse.Namespace) -> str:
    """The flags that chose what to export, as typed."""
    return " ".join(f"--{k} {v}" for k, v in (("sweep", args.sweep), ("campaign", args.campaign),
                                              ("check", args.check)) if v is not None)


@dataclass(frozen=True)
class AfterCheck:
    """``check --export TARGET:DEST`` as a sink of the check's verdict (``verdicts.hand_out``)."""

    spec: str
    results_dir: str

    def put(self, verdict) -> None:
        export_after(self.spec, self.results_dir, check=verdict.check_id)


def after_check(spec: str | None, results_dir: str) -> list[AfterCheck]:
    """The verdict sinks of ``check --export`` (none without it)."""
    return [AfterCheck(spec, results_dir)] if spec else []


def export_after(spec: str, results_dir: str, sweep: str | None = None, check: str | None = None,
                 table: SweepTable | None = None) -> None:
    """``sweep.export`` / ``check --export``: the sweep or check just finished (``table``: the sweep's, as printed),
    exported to ``TARGET:DEST``. Its
    lines go to stderr (stdout holds the command's own report); a failure is a warning, never a changed exit code:
    the measurements are stored, and ``python -m harness export`` (printed) exports them again."""
    target, _, dest = spec.partition(":")
    again = ["python", "-m", "harness", "export", "--to", target, dest, "--results", str(results_dir)]
    again += ["--sweep", sweep] if sweep else ["--check", str(check)]
    try:
        writer = importlib.import_module(TARGETS[target])
        found = ([figures.sweep_group(str(results_dir), table.sweep_id, table)] if table is not None
                 else figures.groups(str(results_dir), sweep, check))
        for line in writer.export(found, dest, "harness"):
            print(f"export: {line}", file=sys.stderr)
    except Exception as exc:  # a tracker's own errors (a server down, a library missing) never cost the measurement
        print(f"warning: not exported to {spec} ({type(exc).__name__}: {exc}); the results are stored: "
              f"{shlex.join(again)}", file=sys.stderr)
