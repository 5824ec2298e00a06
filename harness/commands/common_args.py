"""The flags the store-reading commands share, and how every one of them fails.

``--results``, ``--sweep`` and ``--format`` mean the same in ``table``, ``plot``, ``compare``, ``report``,
``check`` and ``baseline``, so they are added here (asv's ``common_args`` idea). A user's mistake is one
line on stderr and exit 2, before anything is read: argparse's own errors (an unknown flag, a missing
argument, a format that is not a choice) and the ``ValueError``/``OSError`` a command's plain function
raises for input it cannot use. ``--help`` exits 0. No torch, no Hydra.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Callable, Iterable

from harness.commands import exit_codes
from harness.registry import unknown_choice

RESULTS_HELP = "results folder (default: results)"


class UsageError(Exception):
    """A command line argparse cannot use; its message is one line."""


class CommandParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line naming ``--help``, not a usage screen and ``sys.exit``."""

    def error(self, message: str):  # argparse calls this for every usage error
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


def parser(command: str, description: str) -> CommandParser:
    """The parser of ``python -m harness COMMAND``."""
    return CommandParser(prog=f"python -m harness {command}", description=description)


def add_results(parser: argparse.ArgumentParser, help: str = RESULTS_HELP) -> None:
    parser.add_argument("--results", default="results", help=help)


def add_sweep(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sweep", default="latest", help="sweep id, or 'latest' (default)")


def add_format(parser: argparse.ArgumentParser, choices: Iterable[str], default: str | None, help: str) -> None:
    """``--format``, one of ``choices``; another value is a usage error naming them all."""
    choices = tuple(choices)

    def one_of(value: str) -> str:
        if value not in choices:
            raise argparse.ArgumentTypeError(str(unknown_choice("format", value, choices)))
        return value

    parser.add_argument("--format", default=default, type=one_of, metavar="{" + ",".join(choices) + "}", help=help)


def add_summary(parser: argparse.ArgumentParser) -> None:
    """``--summary FILE`` and ``--history-url``: a check's markdown summary for a pull request."""
    parser.add_argument("--summary", metavar="FILE",
                        help="also write the markdown summary here (and append it to $GITHUB_STEP_SUMMARY when set)")
    parser.add_argument("--history-url", metavar="URL",
                        help="where the summary links the history page (default: the page `history` writes)")


def add_export(parser: argparse.ArgumentParser) -> None:
    """``--export TARGET:DEST``: the check's figures exported when it ends (``harness.commands.export``)."""
    parser.add_argument("--export", metavar="TARGET:DEST", default="",
                        help="when the check ends, export it: tb:DIR, mlflow:URI or wandb:DIR (docs/export.md)")


def exit_codes_epilog(parser: argparse.ArgumentParser) -> None:
    """``--help`` ends with the exit codes (``harness.commands.exit_codes``), laid out as written."""
    parser.epilog = exit_codes.help_text()
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


def write_summaries(markdown: str, path: str | None) -> None:
    """``markdown`` to ``path`` (replaced), and appended to ``$GITHUB_STEP_SUMMARY`` when it is set."""
    import os

    if path:
        Path(path).write_text(markdown)
    step = os.environ.get("GITHUB_STEP_SUMMARY")
    if step:
        with open(step, "a") as out:
            out.write(markdown)


def run(parser: argparse.ArgumentParser, argv: list[str], body: Callable[[argparse.Namespace], int],
        intermixed: bool = False) -> int:
    """Parse ``argv`` and return ``body(args)``; a usage error or a ValueError/OSError from ``body`` is one line
    on stderr and exit 2, ``--help`` exit 0. ``intermixed``: positionals (``key=value`` settings) may come
    anywhere among the options, after them too."""
    try:
        args = parser.parse_intermixed_args(argv) if intermixed else parser.parse_args(argv)
    except UsageError as exc:
        return refuse(exc)
    except SystemExit as exc:  # --help, after printing it
        return exc.code if isinstance(exc.code, int) else 0
    try:
        return body(args)
    except (ValueError, OSError) as exc:  # input the command cannot use: never a traceback, never exit 1
        return refuse(exc)


def out_folder(out: str, what: str, example: str) -> Path:
    """``--out``, made if missing, once a file can be written into it: checked before anything is read or drawn,
    so that a file, a path below a file or a folder without rights is one line naming the flag and the fix, not an
    OSError's bare text after the work. ``what``: the files it will hold; ``example``: a folder to suggest."""
    folder = Path(out)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".out-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ValueError(cannot_write(out, what, exc, example)) from None
    return folder


def cannot_write(out: str, what: str, exc: OSError, example: str) -> str:
    return (f"--out {out!r}: cannot write {what} there ({exc.strerror or exc}, {type(exc).__name__}); choose a "
            f"folder you can write, such as {example}")


def refuse(exc: BaseException | str) -> int:
    """Say what is wrong, on one line of stderr; the exit code of bad input."""
    print(f"error: {exc}", file=sys.stderr)
    return 2
