"""``python -m harness history``: one HTML page of every config's throughput over commits and dates.

    python -m harness history [--results DIR] [--ladder L] [--workload W] --out site/

Reads the store, the saved baselines, the runs of ``check --against`` and every check's verdict
(``harness.analysis.views.history``), and writes ``OUT/index.html``, self-contained
(``harness.analysis.views.history_page``).
Exit 2 on bad input. No torch, no Hydra.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.analysis.views import history, history_page
from harness.commands import common_args
from harness.fileio import write_text_atomic


def main(command: str, argv: list[str]) -> int:
    parser = common_args.parser(command, "write one HTML page of every config's throughput over commits and dates, "
                                         "with each check's verdict")
    common_args.add_results(parser)
    parser.add_argument("--ladder", help="only the configs of this ladder")
    parser.add_argument("--workload", help="only the configs of this workload")
    parser.add_argument("--out", required=True, help="folder to write index.html into (made if missing)")
    return common_args.run(parser, argv, run_history)


def run_history(args: argparse.Namespace) -> int:
    found = history.collect(args.results, args.ladder, args.workload)
    for warning in found.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if not found.configs:
        raise ValueError(f"{args.results} holds no measured config to draw (run a sweep first)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = write_text_atomic(out / "index.html", history_page.page(found))
    marks = sum(len(c.marks) for c in found.configs)
    print(f"wrote {path}: {len(found.configs)} config(s), {sum(len(c.points) for c in found.configs)} sessions, "
          f"{marks} verdicts")
    return 0
