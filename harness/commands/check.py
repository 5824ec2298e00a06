"""``python -m harness check``: check a sweep against a baseline; CI gates on the exit code.

    python -m harness check --baseline NAME|PATH [--sweep latest] [--results DIR]
                            [--threshold 0.05] [--threshold WORKLOAD=0.07] [--threshold ladder:NAME=0.1]
                            [--mem-threshold 0.10] [--format text|junit|json]

``check --against REF`` measures the working tree against a commit instead (``harness.commands.against``).

Exit codes (``harness.analysis.gate.answers``): 0 decided, nothing regressed; 1 something regressed
(throughput, memory, or a config that now fails); 2 bad input or nothing at all comparable; 5 a config measured
on a busy machine; 6 a config undecided. The decision is ``harness.analysis.gate.check``'s; the
baseline files are ``harness.analysis.gate.baseline``'s. No torch, no Hydra.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from pathlib import Path

from harness import config as config_mod
from harness.analysis.gate import baseline, check, verdicts
from harness.analysis.gate.check_formats import FORMATS, render_check
from harness.analysis.gate.thresholds import parse_thresholds
from harness.analysis.views import ci_formats, pr_comment
from harness.commands import common_args
from harness.store import new_id
from harness.commands import against
from harness.commands import bisect as bisect_cmd
from harness.commands import export as export_cmd

THRESHOLD_FORM = "[WORKLOAD=|ladder:NAME=]FRACTION"


def main(command: str, argv: list[str]) -> int:
    if any(arg == "--against" or arg.startswith("--against=") for arg in argv):
        return against.main(command, argv, on_regression=bisect_culprit)
    parser = common_args.parser(command, "check a sweep against a baseline: exit 0 decided and nothing regressed, "
                                         "1 regression, 2 bad input or nothing comparable, 5 machine busy, "
                                         "6 undecided (or measure the working tree against a commit, adding rounds "
                                         "while undecided: check --against REF --help)")
    parser.add_argument("--baseline", required=True,
                        help="baseline name (in results/baselines) or path to a .parquet")
    common_args.add_sweep(parser)
    common_args.add_results(parser)
    parser.add_argument("--threshold", action="append", metavar=THRESHOLD_FORM,
                        help="throughput drop that counts (default 0.05); repeat for per-workload or per-ladder values")
    parser.add_argument("--mem-threshold", action="append", metavar=THRESHOLD_FORM,
                        help="peak memory growth that counts (default 0.10); same forms as --threshold")
    common_args.add_format(parser, FORMATS + ci_formats.FORMATS, "text",
                           "text (default), junit, json, md (the pull request's comment), bmf (Bencher), gab "
                           "(github-action-benchmark), pytorch-oss (PyTorch's benchmark database)")
    common_args.add_summary(parser)
    common_args.add_export(parser)
    common_args.exit_codes_epilog(parser)
    return common_args.run(parser, argv, run_check)


def run_check(args: argparse.Namespace) -> int:
    """Print the check in the format asked; its exit code (a BadInput is exit 2, through common_args)."""
    config_mod.check_export(args.export, "--export")
    thresholds = parse_thresholds(args.threshold, 0.05, "--threshold")
    mem_thresholds = parse_thresholds(args.mem_threshold, 0.10, "--mem-threshold")
    path = baseline.baseline_path(args.baseline, args.results)
    result = check.check_sweep(baseline.load_baseline(path), path, args.results, args.sweep, thresholds,
                               mem_thresholds)
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    commands = reproduce(args, result)
    history = args.history_url or str(Path(args.results) / "history" / "index.html")
    print(render(result, args.format, commands, history))
    if result.error():
        print(f"error: {result.error()}", file=sys.stderr)
    common_args.write_summaries(render(result, "md", commands, history), args.summary)
    _keep_verdict(args, result)
    return result.exit_code


def render(result: check.CheckResult, fmt: str, commands: list[list[str]], history: str) -> str:
    """The check in ``fmt``: the pull request's comment (md), a CI dashboard's JSON, or ``render_check``'s."""
    if fmt == "md":
        return pr_comment.baseline_comment(result, commands, history)
    if fmt in ci_formats.FORMATS:
        return ci_formats.render(ci_formats.check_figures(result), fmt)
    return render_check(result, fmt, commands, history)


def reproduce(args: argparse.Namespace, result: check.CheckResult) -> list[list[str]]:
    """The command lines that check this sweep again and draw the history page."""
    line = ["python", "-m", "harness", "check", "--baseline", args.baseline, "--sweep", result.sweep_id,
            "--results", args.results]
    for flag, values in (("--threshold", args.threshold), ("--mem-threshold", args.mem_threshold)):
        for value in values or []:
            line += [flag, value]
    return [line, ["python", "-m", "harness", "history", "--results", args.results, "--out",
                   str(Path(args.results) / "history")]]


def _keep_verdict(args: argparse.Namespace, result: check.CheckResult) -> str:
    """The decision handed to its sinks: kept for the history page, then exported (``--export``); a results folder
    that refuses it costs a warning, not the gate. Its id ("" when it was not kept)."""
    document = json.loads(render_check(result, "json")) | {"kind": "baseline", "checked_sweep": result.sweep_id}
    verdict = verdicts.Verdict(new_id(f"baseline-{result.baseline_path.stem}-"), document)
    return verdicts.hand_out(verdict, verdicts.VerdictStore(args.results),
                             *export_cmd.after_check(args.export, args.results))


def bisect_culprit(result, args: argparse.Namespace, minutes_left: float) -> str:
    """``check --against REF --bisect`` after a decided regression: ``bisect REF HEAD`` with the check's sweep,
    rounds, thresholds and settings, within the minutes left of its budget; its answer in one line (the first slow
    commit, or the range it narrowed to and why it stopped)."""
    if minutes_left < bisect_cmd.MIN_CHECK_MIN:
        return f"not run: {max(minutes_left, 0):.1f} min of the budget left (a larger --budget-min leaves room)"
    argv = [result.ref_commit, "HEAD", "--results", args.results, "--sweep", result.sweep_id, "--rounds",
            str(args.rounds), "--max-rounds", str(args.max_rounds), "--budget-min", f"{minutes_left:.2f}"]
    for value in args.threshold or []:
        argv += ["--threshold", value]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):  # each check it makes prints its own report: the answer is the last lines
        code = bisect_cmd.main("bisect", argv + list(args.overrides))
    lines = [line for line in out.getvalue().splitlines() if line.startswith(("first bad commit:", "bisect stopped:",
                                                                              "(last good"))]
    return " ".join(lines) or f"bisect ended with exit {code} (its reasons are on stderr)"
