"""The words on a sweep's plots: titles that wrap to the figure's width, change names short enough for 15 rungs side
by side, and which harness made the records."""

from __future__ import annotations

import re
import textwrap

TITLE_WIDTH = 100  # characters of a title's line at fontsize 10 in a plot's width


def version_text(record) -> str:
    """Which harness made a record: its installed version, else the commit of the checkout it ran from ("at
    778c533"), else "?"."""
    version = str(record.get("harness_version") or "")
    commit = str(record.get("git_commit") or "")
    return version or (f"at {commit[:7]}" if commit else "?")


def title(data, what: str) -> str:
    """Plot title: what it shows, then workload, device, date and harness version (``data``: a
    :class:`~harness.analysis.views.plots.SweepData`)."""
    t = data.table
    limit = f" capped at {t.memory_limit_gb:g} GiB" if t.memory_limit_gb is not None else ""
    parts = [f"{t.workload} ({t.size}) on {t.device}: {t.hardware}{limit}", f"ladder {t.ladder}", data.date,
             f"harness {data.harness_version}"]
    lines = [what, parts[0]]
    for part in parts[1:]:  # a line the figure's width holds, else the next one
        lines[-1:] = [f"{lines[-1]}  |  {part}"] if len(lines[-1]) + 5 + len(part) <= TITLE_WIDTH else [lines[-1], part]
    return "\n".join(lines)


def short_change(change: str, width: int = 15) -> str:
    """A change name on at most three short lines, so 15 rungs still fit side by side.

    The key is broken at its dots (``data.`` / ``num_workers``) and the value goes on its own line;
    what still does not fit is cut with an ellipsis rather than broken mid-word.
    """
    change = change.replace("(baseline)", "baseline")
    if "=" not in change:
        return "\n".join(_cut(line, width) for line in textwrap.wrap(change, width)[:3]) or change
    key, value = change.split("=", 1)
    lines = _pack(re.split(r"(?<=\.)", key), width)
    if len(lines) > 2:  # keep the most specific end of a long dotted key
        lines = [_cut("…" + lines[-2], width), lines[-1]]
    return "\n".join(lines + [_cut("=" + value, width)])


def _pack(tokens: list[str], width: int) -> list[str]:
    """Greedily join dotted-key pieces into lines no longer than ``width``."""
    lines: list[str] = []
    for token in (t for t in tokens if t):
        if lines and len(lines[-1]) + len(token) <= width:
            lines[-1] += token
        else:
            lines.append(_cut(token, width))
    return lines


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def tick_labels(rows) -> list[str]:
    return [f"{r.rung}\n{short_change(r.change)}" for r in rows]
