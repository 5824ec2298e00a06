"""``python -m harness compare``: two or more sweeps side by side.

    python -m harness compare SWEEP SWEEP [...] [--results DIR] [--out DIR]

A SWEEP is a sweep id in ``--results`` (or ``latest``), a results folder (its latest sweep) or a parquet file. The
table is printed and written to ``--out`` with its plot (``harness.analysis.views.compare``). No torch, no Hydra.
"""

from __future__ import annotations

import argparse
import sys

from harness.analysis.views import compare
from harness.commands import common_args


def main(command: str, argv: list[str]) -> int:
    parser = common_args.parser(command, "Compare two or more sweeps side by side.")
    parser.add_argument("sweeps", nargs="+",
                        help="sweep id (in --results) or 'latest', results folder, or parquet file")
    common_args.add_results(parser, "results folder for sweep ids (default: results)")
    parser.add_argument("--out", default="results/compare",
                        help="folder for the table and plot (default: results/compare)")
    return common_args.run(parser, argv, side_by_side)


def side_by_side(args: argparse.Namespace) -> int:
    common_args.out_folder(args.out, "compare.md and compare.png", "results/compare")
    comparison = compare.compare_sweeps(args.sweeps, args.results)
    sys.stdout.write(comparison.text)
    for path in compare.write_comparison(comparison, args.out):
        print(path)
    return 0
