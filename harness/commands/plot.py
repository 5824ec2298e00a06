"""``python -m harness plot``: write a sweep's plots and print their paths.

    python -m harness plot [--results DIR] [--sweep ID|latest] [--out DIR] [--format png|svg]

No torch, no Hydra: the plots are drawn from the store (``harness.analysis.views.plots``).
"""

from __future__ import annotations

import argparse

from harness.analysis.views import plots
from harness.commands import common_args


def main(command: str, argv: list[str]) -> int:
    parser = common_args.parser(command, "Draw a sweep's plots.")
    common_args.add_results(parser)
    common_args.add_sweep(parser)
    parser.add_argument("--out", default="results/plots", help="folder for the images (default: results/plots)")
    common_args.add_format(parser, plots.FORMATS, "png", "png (default) or svg")
    return common_args.run(parser, argv, draw)


def draw(args: argparse.Namespace) -> int:
    common_args.out_folder(args.out, "the plots", "results/plots")
    for path in plots.write_plots(args.results, args.sweep, args.out, args.format):
        print(path)
    return 0
