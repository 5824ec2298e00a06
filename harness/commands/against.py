"""``python -m harness check --against REF``: the working tree against a commit, measured now, side by side.

    python -m harness check --against REF [--sweep ID|latest] [--rounds 6] [--results DIR]
                            [--threshold 0.05] [--format text|junit|json] [key=value ...]

Every config of the sweep is measured again with REF's code and with the working tree's, interleaved, in
fresh processes (``harness.sweeps.against``), and judged round by round (``harness.analysis.gate.paired``).
Exit codes: 0 nothing regressed, 1 something regressed, 2 bad input (an unknown REF, sweep or setting),
a run that could not start, or a machine too busy to trust (the busy configs are named).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness import config as config_mod
from harness.analysis.gate import paired, verdicts
from harness.analysis.gate.thresholds import parse_thresholds
from harness.analysis.gate.paired_formats import FORMATS, render, to_json
from harness.commands import common_args, hydra_edge
from harness.store import load_runs, new_id
from harness.sweeps import against, replay, worktree

DEFAULT_ROUNDS = 6  # even: each config runs REF first in half its rounds (``against.order``)


def main(command: str, argv: list[str]) -> int:
    parser = common_args.parser(command, "measure the working tree against commit REF now, config by config, "
                                         "interleaved: exit 0 ok, 1 regression, 2 bad input or machine busy")
    parser.add_argument("--against", required=True, metavar="REF",
                        help="a commit, branch or tag of the repository of the current folder (e.g. HEAD~1, main)")
    common_args.add_sweep(parser)
    common_args.add_results(parser)
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS,
                        help=f"runs of each side per config (default {DEFAULT_ROUNDS}; at least 2)")
    parser.add_argument("--threshold", action="append", metavar="[WORKLOAD=|ladder:NAME=]FRACTION",
                        help="throughput drop that counts (default 0.05); repeat for per-workload or per-ladder values")
    common_args.add_format(parser, FORMATS, "text", "text (default), junit or json")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="settings for every run of both sides")
    return common_args.run(parser, argv, run_against)


def run_against(args: argparse.Namespace) -> int:
    """Check, measure, decide, print; the exit code."""
    thresholds = parse_thresholds(args.threshold, 0.05, "--threshold")
    if args.rounds < 2:
        raise ValueError(f"--rounds {args.rounds}: a paired check needs 2 or more rounds (6 recommended: an even number balances each config's sides)")
    hydra_edge.check_overrides(args.overrides)
    plan, warnings = prepare(args)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    work = plan.trees[against.WORK]
    print(f"check --against {args.against}: {len(plan.replays)} config(s) x {args.rounds} rounds x 2 sides, "
          f"REF {plan.trees[against.REF].commit[:12]} in {plan.trees[against.REF].root}", file=sys.stderr)
    if work.dirty:
        print(f"note: the working tree has uncommitted changes to tracked files; they are measured as they are "
              f"(recorded as {work.commit[:12]}-dirty)", file=sys.stderr)
    try:  # an interrupt ends in harness.cli, as every measuring command's does
        against.measure(plan, _show)
    except against.RunFailed as exc:
        return common_args.refuse(exc)
    result = decide(plan, args, thresholds, warnings)
    print(render(result, args.format))
    if result.error():
        print(f"error: {result.error()}", file=sys.stderr)
    try:
        verdicts.save_verdict(args.results, plan.check_id, to_json(result))
    except OSError as exc:
        print(f"warning: the verdict was not kept for the history page ({exc})", file=sys.stderr)
    return result.exit_code


def prepare(args: argparse.Namespace) -> tuple[against.AgainstPlan, list[str]]:
    """Everything checked before the first run: the repository, REF, the sweep, its configs and every setting of
    them; then REF's tree. The check is the one the same command left unfinished, if there is one (it resumes)."""
    here = Path.cwd().resolve()
    root = worktree.repo_root(here)
    commit = worktree.resolve_commit(root, args.against)
    results = Path(args.results).resolve()
    records = load_runs(results, sweep=args.sweep)
    if records.empty:
        raise ValueError(f"sweep {args.sweep!r} has no records in {results}")
    replays, warnings = replay.replay(records, list(args.overrides))
    work = worktree.working_tree(root)
    sweep_id = str(records["sweep_id"].iloc[0])
    key = against.check_key(commit, work, worktree.git(["diff", "HEAD"], root) if work.dirty else "", sweep_id,
                            args.rounds, here.relative_to(root), list(args.overrides))
    finished = {str(d.get("check_id")) for d in verdicts.load_verdicts(results)[0]}
    resumed = against.unfinished_check(results, key, finished.__contains__)
    check_id = resumed or new_id("against-")
    plan = against.AgainstPlan(check_id=check_id, trees={}, subfolder=here.relative_to(root), replays=replays,
                               rounds=args.rounds, checks_store=verdicts.checks_dir(results),
                               scratch=against.plan_scratch(results, check_id), sweep_id=sweep_id)
    against.write_workload_files(plan)
    for item in replays:  # a bad setting stops here, in one line, before any tree is made or run
        composed = hydra_edge.compose_settings(against.with_search_path(list(item.overrides), plan.extra_search))
        config_mod.validate(config_mod.from_dict(hydra_edge.plain_settings(composed)))
    plan.trees = {against.WORK: work, against.REF: worktree.ref_tree(root, commit, results)}
    against.keep_plan(plan, key)
    if resumed:
        stored = len(against.stored_turns(plan))
        print(f"resuming check {check_id}: {stored} of {2 * args.rounds * len(replays)} runs are stored; "
              "measuring the rest", file=sys.stderr)
    return plan, warnings


def decide(plan: against.AgainstPlan, args: argparse.Namespace, thresholds, warnings: list[str]) -> paired.PairedResult:
    """The paired analysis of the check's records, as stored."""
    frame = load_runs(plan.checks_store, where={"sweep_id": plan.check_id})
    return paired.PairedResult(rows=paired.analyse(frame, thresholds), check_id=plan.check_id,
                               sweep_id=plan.sweep_id, ref=args.against,
                               ref_commit=plan.trees[against.REF].commit,
                               work_commit=plan.trees[against.WORK].label, rounds=args.rounds, thresholds=thresholds,
                               warnings=warnings)


def _show(i: int, n: int, turn: against.Turn, record) -> None:
    where = f"[{i}/{n}] round {turn.round_ + 1}, rung {turn.replay.rung} ({turn.replay.change or 'baseline'}), " \
            f"{against.side_name(turn.side)}"
    if record is None:
        print(f"{where}: measuring", file=sys.stderr, flush=True)
        return
    speed = f"{record.samples_per_s:.2f} samples/s" if record.samples_per_s else "-"
    busy = f", other processes {record.other_cpu_pct:.0f}% of the CPUs" if record.other_cpu_pct is not None else ""
    print(f"{where}: {record.status}, {speed}{busy}", file=sys.stderr, flush=True)
