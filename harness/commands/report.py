"""``python -m harness report``: one self-contained HTML report of a sweep; prints its path.

    python -m harness report [--results DIR] [--sweep ID|latest] [--out results/report.html]

The page is built by ``harness.analysis.report``. No torch, no Hydra.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.analysis import report
from harness.commands import common_args


def main(command: str, argv: list[str]) -> int:
    parser = common_args.parser(command, "Write one self-contained HTML report of a sweep.")
    common_args.add_results(parser)
    common_args.add_sweep(parser)
    parser.add_argument("--out", default="results/report.html",
                        help="HTML file to write (default: results/report.html)")
    return common_args.run(parser, argv, write)


def write(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if out.is_dir():
        raise ValueError(f"--out {args.out!r} is a folder; give a file name such as results/report.html")
    if not out.parent.is_dir():
        raise ValueError(f"--out {args.out!r}: folder {str(out.parent)!r} does not exist; create it or choose "
                         "another path")
    print(report.report_sweep(args.results, args.sweep, out))
    return 0
