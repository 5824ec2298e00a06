"""The overhead benchmark's command line: its options, and which comparison they ask for."""

from __future__ import annotations

import argparse
import json
import os

from . import as_users, plain, sections
from .common import DEFAULT_STEPS, BLOCK_STEPS, env, load
from .fresh import cpu_halves

# the benchmark's own child processes: ``--plain SETTINGS`` and ``--follow SETTINGS`` print their result as JSON
# (``--poll``, the parent's stand-in, is answered before this module loads torch: benchmarks/overhead.py)
CHILD_ROLES = {"--plain": plain.plain_loop, "--follow": plain.follow}


def main(argv: list[str], description: str) -> int:
    """Run the comparison ``argv`` asks for (or, started by the benchmark itself, one of its child processes)."""
    if argv[:1] and argv[0] in CHILD_ROLES:
        print(json.dumps(CHILD_ROLES[argv[0]](json.loads(argv[1]))))
        return 0
    parser = parser_for(description)
    args = parser.parse_args(argv)
    if args.as_users:
        as_users.check_options(parser, args)
        as_users.as_users(args.workloads.split(","), args.rounds or 12, args.steps or 30,
                          5 if args.warmup is None else args.warmup, env(), args.mode, args.data, args.flops,
                          args.labels, args.step_fn)
    elif args.hook_cost:
        check_counts(parser, args)
        sections.step_hook_cost(40 if args.rounds is None else args.rounds, 2000 if args.steps is None else args.steps)
    else:
        harness_against_plain(args)
    return 0


def parser_for(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--rounds", type=int, default=None,
                        help="rounds (default 6; 12 with --as-users; 40 with --hook-cost)")
    parser.add_argument("--workloads", default="resnet50,unet3d")
    parser.add_argument("--bf16", action="store_true", help="precision=bf16-mixed instead of fp32")
    parser.add_argument("--steps", type=int, default=None,
                        help=f"measured steps a run (default: {DEFAULT_STEPS}, 20 for other workloads; 2000 a side "
                             f"with --hook-cost)")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up steps (default 3; 5 with --as-users)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sequential", action="store_true",
                        help="run the two sides one after the other instead of at once on disjoint CPUs")
    parser.add_argument("--control", action="store_true",
                        help="paired mode: add an A/A round (the plain loop in the harness's place) per round")
    parser.add_argument("--inproc-rounds", type=int, default=100,
                        help="rounds of the in-process comparison (0: none)")
    parser.add_argument("--inproc-steps", type=int, default=None,
                        help=f"measured steps a side of an in-process round (default: {BLOCK_STEPS}, 20 for others)")
    parser.add_argument("--loop-rounds", type=int, default=20,
                        help="rounds of the in-process loop-cost check (0: none)")
    parser.add_argument("--loop-steps", type=int, default=2000, help="tiny-model steps per side of a loop-cost round")
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--as-users", action="store_true",
                      help="only the end-to-end comparison users make: `harness run` against a plain script of "
                           "their own, fresh processes on all CPUs, ABBA order (benchmarks/overhead_parts/as_users.py)")
    only.add_argument("--hook-cost", action="store_true",
                      help="only the step hook's own cost: a user's step doing exactly loss_fn(model(x), y) against "
                           "the default step, both through the harness's measuring loop on a tiny model, in one "
                           "process (benchmarks/overhead_parts/hook_cost.py)")
    as_users.add_options(parser)
    return parser


def check_counts(parser, args) -> None:
    """``--hook-cost`` takes at least one round of at least one step a side (a usage error otherwise)."""
    for option, value in (("--rounds", args.rounds), ("--steps", args.steps)):
        if value is not None and value < 1:
            parser.error(f"{option} {value}: --hook-cost takes 1 or more")


def harness_against_plain(args) -> None:
    """The default comparison, its four sections in turn (docs/measuring.md, "What the harness costs")."""
    workloads = args.workloads.split(",")
    halves = cpu_halves()
    plan = sections.Plan(
        workloads=workloads, precision="bf16-mixed" if args.bf16 else "32",
        rounds=6 if args.rounds is None else args.rounds, steps={w: args.steps or DEFAULT_STEPS.get(w, 20)
                                                                for w in workloads},
        warmup=3 if args.warmup is None else args.warmup, device=args.device,
        sequential=args.sequential or args.device != "cpu" or halves is None, halves=halves, control=args.control)
    print(f"{len(os.sched_getaffinity(0))} CPUs, load average at start {load()}; precision={plan.precision}, "
          f"{plan.warmup} warm-up + {', '.join(f'{w} {n}' for w, n in plan.steps.items())} measured steps, "
          f"{plan.rounds} rounds")
    e2e = sections.end_to_end(plan)
    inproc_ms = sections.in_process(plan, args.inproc_rounds, args.inproc_steps)
    cost = sections.loop_cost(args.loop_rounds, args.loop_steps)
    sections.accounted(plan, e2e, inproc_ms, cost)
    print(f"\nload average at end {load()} on {os.cpu_count()} CPUs")
