"""``python -m harness baseline save|list``: the baselines ``check`` compares sweeps with.

    python -m harness baseline save NAME [--sweep latest] [--results DIR] [--force]
    python -m harness baseline list [--results DIR]

A baseline is a copy of a sweep's records under ``<results>/baselines/NAME.parquet``
(``harness.analysis.gate.baseline``). Exit 2 on bad input. No torch, no Hydra.
"""

from __future__ import annotations

import argparse

from harness.analysis.gate import baseline
from harness.commands import common_args


def main(command: str, argv: list[str]) -> int:
    parser = common_args.parser(command, "save or list baselines for `check`")
    sub = parser.add_subparsers(dest="action", required=True, metavar="{save,list}")
    save = sub.add_parser("save", help="copy a sweep's records into results/baselines/NAME.parquet")
    save.add_argument("name", help="baseline name (letters, digits, . _ -), e.g. main-h200")
    common_args.add_sweep(save)
    common_args.add_results(save)
    save.add_argument("--force", action="store_true", help="overwrite an existing baseline of that name")
    listing = sub.add_parser("list", help="list saved baselines")
    common_args.add_results(listing)
    return common_args.run(parser, argv, run_baseline)


def run_baseline(args: argparse.Namespace) -> int:
    if args.action == "list":
        print(baseline.list_baselines(args.results))
        return 0
    path = baseline.save_baseline(args.name, args.sweep, args.results, args.force)
    print(f"saved baseline {args.name!r} to {path}")
    return 0
