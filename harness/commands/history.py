"""``python -m harness history``: one HTML page of every config's throughput over commits and dates.

    python -m harness history [--results DIR] [--ladder L] [--workload W] --out site/
    python -m harness history --regressions [--threshold 0.05]      # the change points that dropped

Reads the store, the saved baselines, the runs of ``check --against`` and every check's verdict
(``harness.analysis.views.history``), and writes ``OUT/index.html``, self-contained
(``harness.analysis.views.history_page``).
Exit 2 on bad input. No torch, no Hydra.
"""

from __future__ import annotations

import argparse
import sys

from harness.analysis.views import changepoints, history, history_page
from harness.commands import common_args
from harness.fileio import write_text_atomic


def main(command: str, argv: list[str]) -> int:
    parser = common_args.parser(command, "write one HTML page of every config's throughput over commits and dates, "
                                         "with each check's verdict")
    common_args.add_results(parser)
    parser.add_argument("--ladder", help="only the configs of this ladder")
    parser.add_argument("--workload", help="only the configs of this workload")
    parser.add_argument("--out", help="folder to write index.html into (made if missing)")
    parser.add_argument("--regressions", action="store_true",
                        help="list every change point of a config's sweeps that dropped by more than --threshold, "
                             "with its commit range and the bisect command")
    parser.add_argument("--threshold", type=float, default=0.05, help="with --regressions: the drop that counts "
                                                                      "(default 0.05)")
    return common_args.run(parser, argv, run_history)


def run_history(args: argparse.Namespace) -> int:
    if not args.out and not args.regressions:
        raise ValueError("give --out FOLDER (the page, e.g. --out results/history) or --regressions (the list), "
                         "or both")
    if not 0 < args.threshold < 1:
        raise ValueError(f"--threshold {args.threshold:g}: a fraction between 0 and 1, such as 0.05")
    out = common_args.out_folder(args.out, "index.html", "results/history") if args.out else None
    found = history.collect(args.results, args.ladder, args.workload)
    for warning in found.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if not found.configs:
        raise ValueError(f"{args.results} holds no measured config to draw (run a sweep first)")
    if args.regressions:
        print_regressions(found, args.threshold)
    if out is None:
        return 0
    try:
        path = write_text_atomic(out / "index.html", history_page.page(found))
    except OSError as exc:  # the folder changed meanwhile
        raise ValueError(common_args.cannot_write(args.out, "index.html", exc, "results/history")) from None
    marks = sum(len(c.marks) for c in found.configs)
    print(f"wrote {path}: {len(found.configs)} config(s), {sum(len(c.points) for c in found.configs)} sessions, "
          f"{marks} verdicts")
    return 0


def print_regressions(found: history.History, threshold: float) -> None:
    """One line per change point that dropped by more than ``threshold``, then the command that bisects it; the
    undecided drops (within the wander of their config's sweeps) after them, each with why it has no command."""
    drops = [(c, s) for c in found.configs for s in c.steps if s.ratio < 1 - threshold]
    looked = sum(history.examined(c.points) for c in found.configs)
    decided = [(c, s) for c, s in drops if not s.undecided]
    undecided = [(c, s) for c, s in drops if s.undecided]
    print(f"{len(decided)} regression(s) among the change points of {looked} config(s) "
          f"(a drop of more than {threshold:.0%} between two sweeps)")
    if looked < len(found.configs):
        print(f"{len(found.configs) - looked} config(s) not examined: fewer than {changepoints.MIN_SESSIONS} quiet "
              "sweeps of them, too few to place a change point")
    for config, step in decided:
        _print_drop(found, config, step)
    if undecided:
        print(f"{len(undecided)} undecided drop(s) of more than {threshold:.0%}: within the wander of "
              "their config's sweeps, a step or a drift")
    for config, step in undecided:
        _print_drop(found, config, step)


def _print_drop(found: history.History, config: history.ConfigHistory, step: history.ChangePoint) -> None:
    before, after = config.points[step.before], config.points[step.after]
    kind = ("undecided, " if step.undecided else "") + (f"a slope of {step.steps} steps, " if step.slope else "")
    print(f"{config.title} [{config.config_hash[:10]}] on {config.hardware}: {kind}{step.ratio - 1:+.1%} between "
          f"{step.good or '?'} ({before.session}, {before.when[:10]}) and {step.bad or '?'} ({after.session}, "
          f"{after.when[:10]}); commits {step.good or '?'}..{step.bad or '?'}")
    print(f"  {history_page.no_bisect_why(step) or history_page.bisect_command(step, found.results_dir)}")
