"""``python -m harness report``: one self-contained HTML report of a sweep; prints its path.

    python -m harness report [--results DIR] [--sweep ID|latest] [--out FILE.html]

Without ``--out`` the page is written beside the records it shows: ``report.html`` in the ``--results`` folder.

The page is built by ``harness.analysis.views.report``. No torch, no Hydra.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from harness.analysis.views import report
from harness.commands import common_args


def main(command: str, argv: list[str]) -> int:
    parser = common_args.parser(command, "Write one self-contained HTML report of a sweep.")
    common_args.add_results(parser)
    common_args.add_sweep(parser)
    parser.add_argument("--out", default=None,
                        help="HTML file to write (default: report.html in the --results folder)")
    return common_args.run(parser, argv, write)


def write(args: argparse.Namespace) -> int:
    if args.out is None and not Path(args.results).is_dir():  # the records' folder is what is wrong, not --out
        raise ValueError(f"no such results folder: {args.results!r} (give --results the folder that holds runs/)")
    out = Path(args.out) if args.out is not None else Path(args.results) / "report.html"
    if out.is_dir():
        raise ValueError(f"--out {str(out)!r} is a folder; give a file name such as results/report.html")
    if not out.parent.is_dir():
        raise ValueError(f"--out {str(out)!r}: folder {str(out.parent)!r} does not exist; create it or choose "
                         "another path")
    _check_writable(out)  # before the plots are drawn: a page that cannot be written is refused at once
    try:
        print(report.report_sweep(args.results, args.sweep, out))
    except OSError as exc:  # the folder changed meanwhile
        raise ValueError(_cannot_write(out, exc)) from None
    return 0


def _check_writable(out: Path) -> None:
    """ValueError naming ``out`` when no file can be written there (a system folder such as /proc, no rights)."""
    try:
        fd, probe = tempfile.mkstemp(dir=out.parent, prefix=".report-probe-")
        os.close(fd)
        os.unlink(probe)
        if out.exists() and not os.access(out, os.W_OK):
            raise PermissionError(13, "Permission denied")
    except OSError as exc:
        raise ValueError(_cannot_write(out, exc)) from None


def _cannot_write(out: Path, exc: OSError) -> str:
    return (f"--out {str(out)!r}: cannot write there ({exc.strerror or exc}, {type(exc).__name__}); choose a file in "
            "a folder you can write, such as results/report.html")
