"""``python -m harness history``: one HTML page of every config's throughput over commits and dates.

    python -m harness history [--results DIR] [--ladder L] [--workload W] --out site/

Reads the store, the saved baselines, the runs of ``check --against`` and every check's verdict
(``harness.analysis.views.history``), and writes ``OUT/index.html``, self-contained
(``harness.analysis.views.history_page``).
Exit 2 on bad input. No torch, no Hydra.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
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
    out = _writable_folder(args.out)
    found = history.collect(args.results, args.ladder, args.workload)
    for warning in found.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if not found.configs:
        raise ValueError(f"{args.results} holds no measured config to draw (run a sweep first)")
    try:
        path = write_text_atomic(out / "index.html", history_page.page(found))
    except OSError as exc:  # the folder changed meanwhile
        raise ValueError(_cannot_write(args.out, exc)) from None
    marks = sum(len(c.marks) for c in found.configs)
    print(f"wrote {path}: {len(found.configs)} config(s), {sum(len(c.points) for c in found.configs)} sessions, "
          f"{marks} verdicts")
    return 0


def _writable_folder(out: str) -> Path:
    """``--out``, made if missing, once a file can be written into it (ValueError naming the flag and the fix)."""
    folder = Path(out)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".history-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ValueError(_cannot_write(out, exc)) from None
    return folder


def _cannot_write(out: str, exc: OSError) -> str:
    return (f"--out {out!r}: cannot write index.html there ({exc.strerror or exc}, {type(exc).__name__}); choose a "
            "folder you can write, such as results/history")
