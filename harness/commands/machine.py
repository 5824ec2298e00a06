"""``python -m harness machine``: is this machine fit to measure? (``harness.run.monitor.fitness``)

    python -m harness machine [--window-s 0.5]

One line per thing that moves numbers (the host, CPU governor and boost, other processes' load; on NVIDIA GPUs
persistence, clocks, clock brakes, other processes), each not fit with how to fix it; nothing is changed. Exit 0
when everything is fit, 1 when something is not.
"""

from __future__ import annotations

import argparse
import sys

from harness.commands import common_args
from harness.run.monitor import fitness


def main(command: str, argv: list[str]) -> int:
    parser = common_args.parser(command, "is this machine fit to measure? CPU governor and boost, other processes' "
                                         "load, GPU persistence and clocks: exit 0 fit, 1 not (each with its fix)")
    parser.add_argument("--window-s", type=float, default=0.5, help="how long to watch other processes' load")
    return common_args.run(parser, argv, run_machine)


def run_machine(args: argparse.Namespace) -> int:
    if not 0 < args.window_s <= 60:
        raise ValueError(f"--window-s {args.window_s:g}: seconds between 0 and 60, such as 0.5")
    findings = fitness.survey(args.window_s)
    width = max(len(f.name) for f in findings)
    for f in findings:
        print(f"{'ok ' if f.fit else 'FIX'}  {f.name:<{width}}  {f.state}" + (f"\n     {'':<{width}}  fix: {f.fix}"
                                                                              if f.fix else ""))
    unfit = sum(not f.fit for f in findings)
    print(f"{'fit to measure' if not unfit else f'{unfit} thing(s) to fix before measuring'}")
    return 1 if unfit else 0


def warn_if_unfit() -> None:
    """One line on stderr when this machine is not fit to measure (for the commands that measure)."""
    line = fitness.warning_line(fitness.survey(window_s=fitness.WARN_WINDOW_S))
    if line:
        print(line, file=sys.stderr)
