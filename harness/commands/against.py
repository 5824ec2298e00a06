"""``python -m harness check --against REF``: the working tree against a commit, measured now, side by side.

    python -m harness check --against REF [--sweep ID|latest] [--results DIR] [--rounds 4] [--max-rounds 12]
                            [--budget-min 30] [--threshold 0.05] [--format text|junit|json|md]
                            [--summary FILE] [--history-url URL] [key=value ...] [check.budget_min=M]

Every config of the sweep is measured again with REF's code and with the working tree's, interleaved, in
fresh processes (``harness.sweeps.against``), and judged round by round (``harness.analysis.gate.paired``):
``--rounds`` rounds, then a look every second round; rounds are added while a config is undecided, up to
``--max-rounds`` and the ``--budget-min`` (``harness.commands.against_rounds``; the looks' error control:
``harness.analysis.gate.looks``). Exit codes (``harness.analysis.gate.answers``): 0 decided, nothing regressed;
1 regressed; 2 bad input, a run that could not start, nothing comparable; 5 busy; 6 undecided at the budget.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from harness import config as config_mod
from harness import shell
from harness.analysis.gate import answers, looks, paired, verdicts
from harness.analysis.gate.thresholds import parse_thresholds
from harness.analysis.stats import noise_model
from harness.analysis.stats.busy import busy_reason
from harness.analysis.gate.paired_formats import FORMATS, render, to_json
from harness.analysis.views import ci_formats, pr_comment
from harness.commands import against_rounds, common_args, hydra_edge
from harness.commands import export as export_cmd
from harness.commands.machine import warn_if_unfit
from harness.store import load_runs, new_id
from harness.sweeps import against, lock, replay, worktree

DEFAULT_ROUNDS = 4  # before the first look; even: each config runs REF first in half its rounds (``against.order``)
DEFAULT_MAX_ROUNDS = 12
DEFAULT_BUDGET_MIN = 30.0
BUDGET_KEY = "check.budget_min"


def main(command: str, argv: list[str], on_regression=None, kept: list | None = None) -> int:
    """``on_regression(result, args, minutes_left) -> line``: what ``--bisect`` runs after a decided regression
    (``harness.commands.check`` gives ``bisect``; None: ``--bisect`` is refused); ``kept`` (bisect's): the check's
    ``PairedResult`` is appended to it."""
    parser = common_args.parser(command, "measure the working tree against commit REF now, config by config, "
                                         "interleaved, adding rounds while undecided: exit 0 decided and nothing "
                                         "regressed, 1 regressed, 2 bad input, 5 machine busy, 6 undecided")
    parser.add_argument("--against", required=True, metavar="REF",
                        help="a commit, branch or tag of the repository of the current folder (e.g. HEAD~1, main)")
    common_args.add_sweep(parser)
    common_args.add_results(parser)
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS,
                        help=f"rounds before the first look (default {DEFAULT_ROUNDS}; at least 2); then a look "
                             "every second round")
    parser.add_argument("--max-rounds", type=int, default=DEFAULT_MAX_ROUNDS,
                        help=f"the most rounds, while a config is undecided (default {DEFAULT_MAX_ROUNDS}); equal to "
                             "--rounds: a fixed number of rounds")
    parser.add_argument("--budget-min", type=float, default=None,
                        help=f"no round starts that would end after these minutes (default {DEFAULT_BUDGET_MIN:g}; "
                             f"also {BUDGET_KEY}=M)")
    parser.add_argument("--threshold", action="append", metavar="[WORKLOAD=|ladder:NAME=|rung:N=]FRACTION",
                        help="throughput drop that counts (default 0.05); repeat for per-workload, per-ladder or "
                             "per-config values")
    parser.add_argument("--rung", action="append", type=int, metavar="N",
                        help="only this config of the sweep (repeat for more; default every config)")
    common_args.add_format(parser, FORMATS + ci_formats.FORMATS, "text",
                           "text (default), junit, json, md (the pull request's comment), bmf, gab or pytorch-oss")
    common_args.add_summary(parser)
    common_args.add_export(parser)
    parser.add_argument("--bisect", action="store_true",
                        help="on a decided regression, bisect REF..HEAD within what is left of the budget and name "
                             "the first slow commit (python -m harness bisect; with `check` only)")
    parser.add_argument("overrides", nargs="*", default=[], metavar="key=value",
                        help="settings for every run of both sides")
    parser.set_defaults(on_regression=on_regression)
    return common_args.run(parser, argv, lambda args: run_against(args, kept))


def budget_minutes(args: argparse.Namespace) -> float:
    """``--budget-min`` or ``check.budget_min=M`` (taken out of the runs' settings); ValueError naming the value."""
    given = [o for o in args.overrides if o.split("=", 1)[0] == BUDGET_KEY]
    args.overrides = [o for o in args.overrides if o not in given]
    text = given[-1].split("=", 1)[1] if given else args.budget_min
    try:
        minutes = DEFAULT_BUDGET_MIN if text is None else float(text)
    except ValueError:
        raise ValueError(f"{BUDGET_KEY}={text!r}: a number of minutes, such as 30") from None
    if not minutes > 0:
        raise ValueError(f"--budget-min {minutes:g}: a positive number of minutes, such as 30")
    return minutes


def check_rounds(args: argparse.Namespace) -> None:
    if args.rounds < 2:
        raise ValueError(f"--rounds {args.rounds}: a paired check needs 2 or more rounds (4 recommended: an even "
                         "number balances each config's sides)")
    if args.max_rounds < args.rounds:
        raise ValueError(f"--max-rounds {args.max_rounds}: at least --rounds ({args.rounds}); equal to it for a "
                         "fixed number of rounds")


def run_against(args: argparse.Namespace, kept: list | None = None) -> int:
    """Check, measure round by round until decided, decide, print; the exit code."""
    started = time.monotonic()
    thresholds = parse_thresholds(args.threshold, 0.05, "--threshold")
    check_rounds(args)
    budget = budget_minutes(args)
    config_mod.check_export(args.export, "--export")
    if args.bisect and args.on_regression is None:
        raise ValueError("--bisect: only `python -m harness check --against REF --bisect` bisects after a regression")
    hydra_edge.check_overrides(args.overrides)
    # one measuring command at a time on a store: a second check (or sweep) is refused naming the first's PID
    held = lock.acquire(args.results, "check --against") if Path(args.results).is_dir() else ""
    try:
        return measure_and_report(args, thresholds, budget, started, kept)
    finally:
        lock.release(held)


def measure_and_report(args: argparse.Namespace, thresholds, budget: float, started: float,
                       kept: list | None = None) -> int:
    """Plan the check, measure it round by round until decided, print the result; the exit code (``started``: when
    the command started, for what is left of the budget to a bisection; ``kept``: see :func:`main`)."""
    plan, warnings = prepare(args)
    stored_s, gaps = against_rounds.estimate_run_s(_stored_runs(plan, args.results))
    clock = against_rounds.Clock(len(plan.replays), args.rounds, args.max_rounds, 60 * budget, stored_s)
    work = plan.trees[against.WORK]
    print(f"check --against {args.against}: REF {plan.trees[against.REF].commit[:12]} in "
          f"{plan.trees[against.REF].root}", file=sys.stderr)
    print(clock.plan_line(gaps), file=sys.stderr)
    cv, source = sweep_cv(args.results, plan.sweep_id)
    power = clock.power_line(cv, min(thresholds.by_rung.values(), default=thresholds.default), source)
    if power:
        print(f"plan: {power}", file=sys.stderr)
    warn_if_unfit()
    if work.dirty:
        print(f"note: the working tree has uncommitted changes to tracked files; they are measured as they are "
              f"(recorded as {work.commit[:12]}-dirty)", file=sys.stderr)
    lookout = Lookout(plan, args, thresholds, warnings, clock)
    try:  # an interrupt ends in harness.cli, as every measuring command's does
        with against_rounds.Progress(clock) as progress:
            lookout.progress = progress
            rounds = against.measure(plan, lookout.show, lookout.go_on)
    except against.RunFailed as exc:
        return common_args.refuse(exc)
    result = lookout.decide(rounds, lookout.stopped or ("decided" if rounds < args.max_rounds else ""))
    if kept is not None:
        kept.append(result)
    culprit = ""
    if args.bisect and result.exit_code == answers.REGRESSED:
        culprit = args.on_regression(result, args, budget - (time.monotonic() - started) / 60)
    return report(result, args, plan.check_id, culprit)


def report(result: paired.PairedResult, args: argparse.Namespace, check_id: str, culprit: str = "") -> int:
    """Print the result (and what ``--bisect`` found), write the summary, keep the verdict; the exit code."""
    found = f"\n\nBisect (REF..HEAD, within the check's budget): {culprit}\n" if culprit else ""
    text = args.format in ("text", "md")  # JSON and XML stay documents: the bisection goes to stderr there
    print(render_any(result, args.format) + (found if text else ""))
    if found and not text:
        print(found.strip(), file=sys.stderr)
    if result.error():
        print(f"error: {result.error()}", file=sys.stderr)
    common_args.write_summaries(render_any(result, "md") + found, args.summary)
    verdicts.hand_out(verdicts.Verdict(check_id, to_json(result)), verdicts.VerdictStore(args.results),
                      *export_cmd.after_check(args.export, args.results))
    return result.exit_code


def render_any(result: paired.PairedResult, fmt: str) -> str:
    """The check in ``fmt``: the pull request's comment (md), a CI dashboard's JSON, or ``render``'s."""
    if fmt == "md":
        return pr_comment.paired_comment(result)
    if fmt in ci_formats.FORMATS:
        return ci_formats.render(ci_formats.check_figures(result), fmt)
    return render(result, fmt)


class Lookout:
    """Shows each run, times it, and looks after the rounds the check looks at: another round, or stop."""

    def __init__(self, plan, args, thresholds, warnings, clock: against_rounds.Clock):
        self.plan, self.args, self.thresholds, self.warnings, self.clock = plan, args, thresholds, warnings, clock
        self.stopped = ""
        self.progress = None
        self.horizon = 0  # the looks' last round, fixed at the first look (``Clock.horizon``)
        self.first_busy: list[str | None] = []  # each run of the first round: why it was busy (None: it counts)
        self.planned = looks.look_rounds(args.rounds, args.max_rounds)

    def fix_horizon(self) -> int:
        """The rounds the looks spend the error over, fixed once the first look's rounds have run."""
        if not self.horizon:
            self.horizon = self.clock.horizon()
            self.planned = looks.look_rounds(self.args.rounds, self.horizon)
            if self.horizon < self.args.max_rounds:
                self.progress.say(f"looks: the error is spent over the {self.horizon} rounds the budget allows at "
                                  f"~{self.clock.per_run_s():.0f} s a run (--max-rounds {self.args.max_rounds})")
        return self.horizon

    def show(self, i: int, n: int, turn: against.Turn, record) -> None:
        where = (f"round {turn.round_ + 1}, rung {turn.replay.rung} ({turn.replay.change or 'baseline'}), "
                 f"{against.side_name(turn.side)}")
        if record is None:
            self.clock.started_run()
            self.progress.run(i - 1, where, None)
            return
        self.clock.ended_run()
        if turn.round_ == 0:
            self.first_busy.append(busy_reason(record) if record.status == "ok" else None)
        speed = f"{record.samples_per_s:.2f} samples/s" if record.samples_per_s else "-"
        busy = (f", other processes {record.other_cpu_pct:.0f}% of the CPUs"
                if record.other_cpu_pct is not None else "")
        self.progress.run(i, where, f"{record.status}, {speed}{busy}")

    def go_on(self, done: int) -> bool:
        """Before round ``done + 1``: look if ``done`` is a look's round; False to stop."""
        if done == 1 and len(self.first_busy) == self.clock.runs_per_round and all(self.first_busy):
            self.stopped = f"every run of the first round was busy ({self.first_busy[0]})"
            self.progress.say(f"stop: {self.stopped}: no run can count, so no more are made")
            return False
        if done >= self.args.rounds:
            self.fix_horizon()
        if done in self.planned:
            result = self.decide(done, "")
            open_ = result.undecided_rows
            self.progress.say(f"look after round {done}: {len(result.rows) - len(open_)} of {len(result.rows)} "
                              f"config(s) decided" + (f"; undecided: {'; '.join(r.name for r in open_)}" if open_
                                                      else "; stop"))
            if not open_:
                self.stopped = "decided"
                return False
            if done >= self.horizon:
                self.stopped = f"the {self.horizon} rounds the budget allows are done"
                self.progress.say(f"stop: {self.stopped}")
                return False
            self.progress.more_rounds(next((r for r in self.planned if r > done), self.horizon))
        refusal = self.clock.refusal(done)
        if refusal:
            self.stopped = refusal
            self.progress.say(f"stop: {refusal}")
        return not refusal

    def decide(self, rounds: int, stopped: str) -> paired.PairedResult:
        """The paired analysis of the check's first ``rounds`` rounds, as stored, at that look's level."""
        frame = load_runs(self.plan.checks_store, where={"sweep_id": self.plan.check_id})
        frame = frame[frame["round"].fillna(0) < rounds]
        plan, args = self.plan, self.args
        rows = paired.at_look(frame, self.thresholds, rounds, args.rounds, max(self.horizon or args.max_rounds, rounds))
        return paired.PairedResult(rows=rows, check_id=plan.check_id,
                                   sweep_id=plan.sweep_id, ref=args.against,
                                   ref_commit=plan.trees[against.REF].commit,
                                   work_commit=plan.trees[against.WORK].label, rounds=rounds,
                                   thresholds=self.thresholds, warnings=self.warnings,
                                   max_rounds=self.horizon or args.max_rounds,
                                   stopped=stopped, commands=reproduce(plan, args, self.clock.budget_s / 60),
                                   history=args.history_url or "")


def sweep_cv(results: str, sweep_id: str) -> tuple[float, str]:
    """The process CV the plan's power is reckoned at: the sweep's own runs' (``against_rounds.stored_cv``), else
    the default; and where it came from."""
    try:
        cv = against_rounds.stored_cv(load_runs(results, sweep=sweep_id,
                                                columns=["config_hash", "status", "samples_per_s"]))
    except (ValueError, OSError, KeyError):
        cv = None
    if cv is None:
        return noise_model.DEFAULT_CV, "assumed: the sweep has no config with two runs"
    return max(cv, noise_model.MIN_CV), f"from sweep {sweep_id}'s runs"


def reproduce(plan: against.AgainstPlan, args: argparse.Namespace, budget_min: float) -> list[list[str]]:
    """The command lines that measure this check again (REF by its commit) and draw the history page."""
    check = ["python", "-m", "harness", "check", "--against", plan.trees[against.REF].commit, "--sweep",
             plan.sweep_id, "--results", args.results, "--rounds", str(args.rounds), "--max-rounds",
             str(args.max_rounds), "--budget-min", f"{budget_min:g}"]
    for value in args.threshold or []:
        check += ["--threshold", value]
    for rung in args.rung or []:
        check += ["--rung", str(rung)]
    return [check + list(args.overrides),
            ["python", "-m", "harness", "history", "--results", args.results, "--out",
             str(Path(args.results) / "history")]]


def _stored_runs(plan: against.AgainstPlan, results: str):
    """The stored runs of this check's configs (the sweep's and earlier checks'), for the time estimate."""
    hashes = sorted({r.config_hash for r in plan.replays if r.config_hash})
    frames = []
    for store in (Path(results), plan.checks_store):
        try:
            frames.append(load_runs(store, columns=["sweep_id", "timestamp", "config_hash"],
                                    where={"config_hash": hashes} if hashes else None))
        except (ValueError, OSError):
            continue
    import pandas as pd

    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["sweep_id", "timestamp"])


def only_rungs(replays: list[replay.Replay], rungs: list[int] | None) -> list[replay.Replay]:
    """The configs ``--rung`` names (every one when none is named); ValueError naming an unknown rung."""
    if not rungs:
        return replays
    known = sorted({r.rung for r in replays})
    for rung in rungs:
        if rung not in known:
            raise ValueError(f"--rung {rung}: not a config of the sweep; valid choices: "
                             + ", ".join(map(str, known)))
    return [r for r in replays if r.rung in rungs]


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
    replays = only_rungs(replays, args.rung)
    work = worktree.working_tree(root)
    sweep_id = str(records["sweep_id"].iloc[0])
    key = against.check_key(commit, work, worktree.git(["diff", "HEAD"], root) if work.dirty else "", sweep_id,
                            (args.rounds, args.max_rounds), here.relative_to(root),
                            list(args.overrides) + [f"--rung={r}" for r in args.rung or []])
    finished = {str(d.get("check_id")) for d in verdicts.load_verdicts(results)[0]}
    resumed = against.unfinished_check(results, key, finished.__contains__)
    check_id = resumed or new_id("against-")
    plan = against.AgainstPlan(check_id=check_id, trees={}, subfolder=here.relative_to(root), replays=replays,
                               rounds=args.max_rounds, checks_store=verdicts.checks_dir(results),
                               scratch=against.plan_scratch(results, check_id), sweep_id=sweep_id)
    against.write_workload_files(plan)
    for item in replays:  # a bad setting stops here, in one line, before any tree is made or run
        composed = hydra_edge.compose_settings(shell.with_search_path(list(item.overrides), plan.extra_search))
        settings = config_mod.from_dict(hydra_edge.plain_settings(composed))
        config_mod.validate(settings)
        config_mod.validate_one_node(settings.nodes, "check --against")  # both sides here: a sweep across nodes'
        # configs cannot be measured again on this one node (nodes=1 among the arguments measures them on it)
    plan.trees = {against.WORK: work, against.REF: worktree.ref_tree(root, commit, results)}
    against.keep_plan(plan, key)
    if resumed:
        stored = len(against.stored_turns(plan))
        print(f"resuming check {check_id}: {stored} of at most {2 * args.max_rounds * len(replays)} runs are stored; "
              "measuring the rest", file=sys.stderr)
    return plan, warnings
