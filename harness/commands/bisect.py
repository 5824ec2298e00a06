"""``python -m harness bisect GOOD BAD``: the first commit of GOOD..BAD that made a config slower.

    python -m harness bisect GOOD BAD [--results DIR] [--sweep ID|latest] [--budget-min 120] [--rounds 4]
                                 [--max-rounds 16] [--threshold 0.05] [key=value ...]

Each commit it tries is checked against GOOD as ``check --against GOOD`` would from that commit's worktree
(``<results>/.against/<sha>``): BAD with the configs of the sweep (``--sweep``, as ``check`` chooses them), every
later commit with only the configs BAD regressed on, at their half steps (``--rung N --threshold rung:N=F``); the
logic is ``harness.sweeps.bisect``. Exit codes: 0 the first bad commit named; 2 bad input, or BAD does not regress
against GOOD; 5 a check found the machine busy; 6 a check undecided or the budget spent (the range it narrowed
to is said). The command that reproduces each check is in its own output.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from harness.analysis.gate.paired_formats import band_text
from harness.commands import against as against_cmd
from harness.commands import common_args
from harness.sweeps import bisect as bisect_mod
from harness.store import load_runs
from harness.sweeps import worktree

DEFAULT_BUDGET_MIN = 120.0
MIN_CHECK_MIN = 1.0  # no check starts with less budget than this
DEFAULT_MAX_ROUNDS = 16  # a step adds rounds while undecided, up to these and its share of the budget


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
                             "its share of what is left, by its runs a round")
    parser.add_argument("--rounds", type=int, default=against_cmd.DEFAULT_ROUNDS, help="as check --against's")
    parser.add_argument("--max-rounds", type=int, default=DEFAULT_MAX_ROUNDS,
                        help=f"the most rounds of one check (default {DEFAULT_MAX_ROUNDS}); its share of the budget "
                             "may allow fewer")
    parser.add_argument("--threshold", action="append", metavar="[WORKLOAD=|ladder:NAME=]FRACTION",
                        help="throughput drop that counts (default 0.05)")
    parser.add_argument("overrides", nargs="*", default=[], metavar="key=value",
                        help="settings for every run of every check")
    common_args.exit_codes_epilog(parser)
    return common_args.run(parser, argv, run_bisect, intermixed=True)  # settings anywhere, as the usage shows them


def run_bisect(args: argparse.Namespace) -> int:
    if not args.budget_min > 0:
        raise ValueError(f"--budget-min {args.budget_min:g}: a positive number of minutes, such as 120")
    root = worktree.repo_root(Path.cwd().resolve())
    good, bad = (_commit(root, name, given) for name, given in (("GOOD", args.good), ("BAD", args.bad)))
    commits = bisect_mod.commits_between(root, good, bad)
    results = Path(args.results).resolve()
    configs, halvings = sweep_configs(results, args.sweep), []
    started = time.monotonic()
    print(f"bisect: {len(commits)} commit(s) after {good[:12]} up to {bad[:12]}; BAD first, then at most "
          f"{max(len(commits) - 1, 0).bit_length()} more checks against GOOD; budget {args.budget_min:g} min",
          file=sys.stderr)

    def left_min() -> float:
        return args.budget_min - (time.monotonic() - started) / 60

    def check(commit: str, question: bisect_mod.Question | None) -> bisect_mod.Answer:
        asked = len(question) if question else configs
        later = bisect_mod.steps_after(-1, len(commits) - 1) - len(halvings) - (question is not None)
        budget = bisect_mod.step_budget_s(60 * left_min(), asked, later, len(question) if question else 1) / 60
        what = ("every config at the threshold" if question is None else "nearer BAD or GOOD? "
                + ", ".join(f"rung {r} at the half step -{t:.1%}" for r, t in question.items()))
        if question is not None:
            halvings.append(commit)
        print(f"bisect: checking {commit[:12]} against GOOD {good[:12]}: {what} ({budget:.1f} of "
              f"{left_min():.1f} min left)", file=sys.stderr, flush=True)
        kept: list = []
        code = check_commit(root, commit, good, results, args, budget, question, kept)
        answer = to_answer(code, kept, question)
        shown = bisect_mod.SKIPPED if question and answer.untestable else code
        words = (bisect_mod.STEP_WORDS if question else bisect_mod.WORDS).get(shown, bisect_mod.WORDS.get(code))
        said = f"; {answer.band}" if answer.band else ""
        print(f"bisect: {commit[:12]}: {words or f'exit {code}'} (exit {code}){said}", file=sys.stderr)
        return answer

    found = bisect_mod.bisect(good, commits, check, lambda: left_min() >= MIN_CHECK_MIN)
    return report(root, found)


def _commit(root: Path, name: str, given: str) -> str:
    try:
        return worktree.resolve_commit(root, given)
    except worktree.GitError as exc:
        raise ValueError(f"{name} {given!r}: {str(exc).split(': ', 1)[-1]}") from None


def sweep_configs(results: Path, sweep: str) -> int:
    """How many configs the sweep has (1 when its records cannot be read: the check says why); ValueError naming a
    results folder or a sweep that is not there, before any commit is checked out."""
    try:
        return max(int(load_runs(results, columns=["rung"], sweep=sweep)["rung"].nunique()), 1)
    except (OSError, KeyError):
        return 1


def to_answer(code: int, kept: list, question: bisect_mod.Question | None) -> bisect_mod.Answer:
    """A check's exit code and result as bisection's answer: the ratios of the configs it called regressed by their
    speed, the configs regressed only by failing to run (no speed verdict: a step skips on those alone), and the
    band of each config asked (BAD's: of those it regressed on, else every one)."""
    if not kept:
        return bisect_mod.Answer(code)
    rows = kept[-1].rows
    regressed = {r.rung: r.ratio for r in rows if r.status == "regressed" and r.ratio is not None and r.level}
    failed = tuple(r.rung for r in rows if r.status == "regressed" and not r.level)
    shown = [r for r in rows if r.status == "regressed"] if regressed and not question else rows
    words = {"regressed": "nearer BAD", "unchanged": "nearer GOOD", "improved": "nearer GOOD"} if question else {}
    band = "; ".join(f"rung {r.rung} {words.get(r.status, r.status)}" + (f" {r.ratio:.3f}x, band {band_text(r)}"
                                                                       if r.ratio is not None else "") for r in shown)
    return bisect_mod.Answer(code, regressed, band, failed)


def check_commit(root: Path, commit: str, good: str, results: Path, args: argparse.Namespace,
                 budget_min: float, question: bisect_mod.Question | None = None, kept: list | None = None) -> int:
    """``check --against GOOD`` from ``commit``'s worktree, in this process, asking ``question`` (the configs and
    their half steps; None: every config at the user's thresholds); its exit code (its result appended to
    ``kept``)."""
    tree = worktree.ref_tree(root, commit, results)
    argv = ["--against", good, "--results", str(results), "--sweep", args.sweep, "--rounds", str(args.rounds),
            "--max-rounds", str(args.max_rounds), "--budget-min", f"{max(budget_min, MIN_CHECK_MIN):g}"]
    for value in args.threshold or []:
        argv += ["--threshold", value]
    for rung, threshold in (question or {}).items():
        argv += ["--rung", str(rung), "--threshold", f"rung:{rung}={threshold:.6f}"]
    here = Path.cwd()
    os.chdir(tree.root)
    try:
        return against_cmd.main("check", argv + list(args.overrides), kept=kept)
    finally:
        os.chdir(here)


def report(root: Path, found: bisect_mod.Bisection) -> int:
    """The answer on stdout; the exit code."""
    tried = ", ".join(f"{c[:12]} {(bisect_mod.STEP_WORDS if i else bisect_mod.WORDS).get(code, code)}"
                      for i, (c, code) in enumerate(found.checks))
    if found.first_bad:
        subject = worktree.git(["log", "-1", "--format=%s", found.first_bad], root)
        band = found.bands.get(found.first_bad, "")
        print(f"first bad commit: {found.first_bad} {subject}\n" + (f"against GOOD: {band}\n" if band else "")
              + f"(last good {found.good[:12]}; checks: {tried})")
        return 0
    print(f"bisect stopped: {found.stopped}; the first bad commit is in {found.good[:12]}..{found.bad[:12]} "
          f"(checks: {tried or 'none'})")
    codes = [code for _, code in found.checks]
    if codes and codes[-1] in (2, 5):
        return codes[-1]
    return 2 if "nothing to bisect" in found.stopped else 6
