"""A check as markdown for a pull request (``--format md``, ``--summary FILE``, ``$GITHUB_STEP_SUMMARY``): the
verdict line first, then what was measured, the table, the commands that reproduce it and the history page."""

from __future__ import annotations

import shlex


def cell(text: str) -> str:
    """A table cell: pipes escaped, one line."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(verdict: str, code: int, about: list[str], header: list[str], rows: list[list[str]],
             commands: list[list[str]], history: str) -> str:
    """The summary: ``verdict`` (with exit ``code``) first, ``about`` lines, the table, the ``commands`` (argv lists,
    quoted for a POSIX shell) and a link to ``history``."""
    lines = [f"### {cell(verdict)} (exit {code})", ""]
    lines += [f"- {line}" for line in about] + [""]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    if commands:
        lines += ["", "Reproduce (from the repository's top folder, in a checkout of the measured commit):", "",
                  "```sh"] + [shlex.join(c) for c in commands] + ["```"]
    lines += ["", f"History of every config: [{history}]({history})"]
    return "\n".join(lines) + "\n"
