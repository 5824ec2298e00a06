"""``python -m harness bisect GOOD BAD``: the first commit of GOOD..BAD that made a config slower.

    python -m harness bisect GOOD BAD [--results DIR] [--sweep ID|latest] [--budget-min 120] [--rounds 4]
                                 [--max-rounds 12] [--threshold 0.05] [key=value ...]

Each commit it tries is checked against GOOD as ``check --against GOOD`` would from that commit's worktree
(``<results>/.against/<sha>``), with the configs of the sweep (``--sweep``, as ``check`` chooses them); the logic is
``harness.sweeps.bisect``. Exit codes: 0 the first bad commit named; 2 bad input, or BAD does not regress
against GOOD; 5 a check found the machine busy; 6 a check undecided or the budget spent (the range it narrowed
to is said). The command that reproduces each check is in its own output.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from harness.commands import against as against_cmd
from harness.commands import common_args
from harness.sweeps import bisect as bisect_mod
from harness.sweeps import worktree

DEFAULT_BUDGET_MIN = 120.0
MIN_CHECK_MIN = 1.0  # no check starts with less budget than this


def main(command: str, argv: list[str]) -> int:
    parser = common_args.parser(command, "find the first commit of GOOD..BAD that made a config slower, by paired "
                                         "checks against GOOD: exit 0 named, 2 bad input or nothing to bisect, "
                                         "5 busy, 6 undecided or budget spent")
    parser.add_argument("good", metavar="GOOD", help="a commit known to be fast (e.g. a tag, a sha)")
    parser.add_argument("bad", metavar="BAD", help="a later commit known to be slow (e.g. HEAD)")
    common_args.add_results(parser)
    common_args.add_sweep(parser)
    parser.add_argument("--budget-min", type=float, default=DEFAULT_BUDGET_MIN,
                        help=f"minutes for the whole bisection (default {DEFAULT_BUDGET_MIN:g}); each check gets "
                             "what is left")
    parser.add_argument("--rounds", type=int, default=against_cmd.DEFAULT_ROUNDS, help="as check --against's")
    parser.add_argument("--max-rounds", type=int, default=against_cmd.DEFAULT_MAX_ROUNDS, help="as check --against's")
    parser.add_argument("--threshold", action="append", metavar="[WORKLOAD=|ladder:NAME=]FRACTION",
                        help="throughput drop that counts (default 0.05)")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="settings for every run of every check")
    common_args.exit_codes_epilog(parser)
    return common_args.run(parser, argv, run_bisect, intermixed=True)  # settings anywhere, as the usage shows them


def run_bisect(args: argparse.Namespace) -> int:
    if not args.budget_min > 0:
        raise ValueError(f"--budget-min {args.budget_min:g}: a positive number of minutes, such as 120")
    root = worktree.repo_root(Path.cwd().resolve())
    good, bad = (_commit(root, name, given) for name, given in (("GOOD", args.good), ("BAD", args.bad)))
    commits = bisect_mod.commits_between(root, good, bad)
    results = Path(args.results).resolve()
    started = time.monotonic()
    print(f"bisect: {len(commits)} commit(s) after {good[:12]} up to {bad[:12]}; BAD first, then at most "
          f"{max(len(commits) - 1, 0).bit_length()} more checks against GOOD; budget {args.budget_min:g} min",
          file=sys.stderr)

    def left_min() -> float:
        return args.budget_min - (time.monotonic() - started) / 60

    def check(commit: str) -> int:
        print(f"bisect: checking {commit[:12]} against GOOD {good[:12]} ({left_min():.1f} min left)",
              file=sys.stderr, flush=True)
        code = check_commit(root, commit, good, results, args, left_min())
        print(f"bisect: {commit[:12]}: {bisect_mod.WORDS.get(code, f'exit {code}')} (exit {code})", file=sys.stderr)
        return code

    found = bisect_mod.bisect(good, commits, check, lambda: left_min() >= MIN_CHECK_MIN)
    return report(root, found)


def _commit(root: Path, name: str, given: str) -> str:
    try:
        return worktree.resolve_commit(root, given)
    except worktree.GitError as exc:
        raise ValueError(f"{name} {given!r}: {str(exc).split(': ', 1)[-1]}") from None


def check_commit(root: Path, commit: str, good: str, results: Path, args: argparse.Namespace,
                 budget_min: float) -> int:
    """``check --against GOOD`` from ``commit``'s worktree, in this process; its exit code."""
    tree = worktree.ref_tree(root, commit, results)
    argv = ["--against", good, "--results", str(results), "--sweep", args.sweep, "--rounds", str(args.rounds),
            "--max-rounds", str(args.max_rounds), "--budget-min", f"{max(budget_min, MIN_CHECK_MIN):g}"]
    for value in args.threshold or []:
        argv += ["--threshold", value]
    here = Path.cwd()
    os.chdir(tree.root)
    try:
        return against_cmd.main("check", argv + list(args.overrides))
    finally:
        os.chdir(here)


def report(root: Path, found: bisect_mod.Bisection) -> int:
    """The answer on stdout; the exit code."""
    tried = ", ".join(f"{c[:12]} {bisect_mod.WORDS.get(code, code)}" for c, code in found.checks)
    if found.first_bad:
        subject = worktree.git(["log", "-1", "--format=%s", found.first_bad], root)
        print(f"first bad commit: {found.first_bad} {subject}\n(last good {found.good[:12]}; checks: {tried})")
        return 0
    print(f"bisect stopped: {found.stopped}; the first bad commit is in {found.good[:12]}..{found.bad[:12]} "
          f"(checks: {tried or 'none'})")
    codes = [code for _, code in found.checks]
    if codes and codes[-1] in (2, 5):
        return codes[-1]
    return 2 if "nothing to bisect" in found.stopped else 6
