"""``python -m harness table``: a sweep's (or a campaign's) speedup table, from the store alone.

    python -m harness table [--results DIR] [--sweep ID|latest] [--campaign ID|latest]
                            [--format md|csv|html|bmf|gab|pytorch-oss]

In a terminal, with no ``--format``, the table is drawn with rich; otherwise it is written in the format
asked (markdown by default), as files, pipes and CI logs expect; ``bmf``, ``gab`` and ``pytorch-oss`` are the CI
dashboards' JSON with the band as the bounds (``harness.analysis.views.ci_formats``). No torch, no Hydra.
"""

from __future__ import annotations

import argparse

from harness.analysis.views import ci_formats, render, table
from harness.analysis.views import units as units_view
from harness.commands import common_args, terminal


def main(command: str, argv: list[str]) -> int:
    parser = common_args.parser(command, "A sweep's (or a campaign's) speedup table, from the store.")
    common_args.add_results(parser)
    common_args.add_sweep(parser)
    parser.add_argument("--campaign", default=None, help="campaign id or 'latest': a table per sweep and a summary")
    common_args.add_format(parser, sorted(render.FORMATS) + list(ci_formats.FORMATS), None,
                           "output format (default: a rich table in a terminal, md in a file or pipe; bmf: Bencher, "
                           "gab: github-action-benchmark, pytorch-oss: PyTorch's benchmark database)")
    return common_args.run(parser, argv, show)


def show(args: argparse.Namespace) -> int:
    """Print the table the flags ask for; ValueError (exit 2) for a missing folder, sweep or campaign."""
    if args.format in ci_formats.FORMATS:
        tables = (table.load_campaign(args.results, args.campaign).tables if args.campaign is not None
                  else [table.load_table(args.results, args.sweep)])
        print(ci_formats.render([f for t in tables for f in ci_formats.table_figures(t)], args.format))
    elif args.campaign is not None:
        terminal.print_campaign(table.load_campaign(args.results, args.campaign), args.format)
    else:
        terminal.print_sweep_table(table.load_table(args.results, args.sweep), args.format)
        if args.format in (None, "md") and (units := units_view.load_unit_table(args.results, args.sweep)):
            print(units_view.render_markdown(units))
    return 0
