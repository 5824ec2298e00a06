"""Speedup tables as a person sees them: a rich table in a terminal, the asked format everywhere else.

``sweep`` and ``table`` print through here. Rich is used only when no ``--format`` was asked and stdout
is a terminal; a file, a pipe or ``--format md`` gets the markdown of ``harness.analysis.views.render``
unchanged, so what scripts and CI logs read does not depend on where the command ran.
"""

from __future__ import annotations

import re

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from harness.analysis.views import render
from harness.analysis.views.rows import CampaignSummary, SweepTable
from harness.commands import console as console_mod

# a verdict's first word -> its colour (stats.verdict's words)
VERDICT_STYLES = {"confirms": "green", "exceeds": "cyan", "falls": "red", "reverses": "red", "inconclusive": "yellow"}


def _default_console() -> Console:
    return console_mod.console  # read when called: a test puts a console of its own there


def rich_wanted(fmt: str | None, console: Console) -> bool:
    """A rich table only for a person at a terminal who asked for no format. The file must be a terminal
    itself: FORCE_COLOR (often set in CI for coloured logs) makes rich colour a pipe, but a pipe still gets
    the markdown scripts read."""
    return fmt is None and console.is_terminal and _isatty(console.file)


def _isatty(file) -> bool:
    try:
        return bool(file.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed file
        return False


def print_sweep_table(table: SweepTable, fmt: str | None = None, console: Console | None = None) -> None:
    """One sweep's table: rich in a terminal (``fmt`` None), else ``fmt`` (default markdown) as plain text."""
    console = console or _default_console()
    if not rich_wanted(fmt, console):
        console.file.write(render.render(table, fmt or "md"))
        return
    console.print(sweep_grid(table))
    for line in rung_notes(table):
        console.print(escape(line))
    for line in render.footer_lines(table):
        console.print(_bold(escape(line)))
    for note in table.notes:
        console.print(f"- {escape(note)}")


def print_campaign(summary: CampaignSummary, fmt: str | None = None, console: Console | None = None,
                   tables: bool = True) -> None:
    """Every sweep's table (when ``tables``), then the campaign's summary; rich or text as above."""
    console = console or _default_console()
    if not rich_wanted(fmt, console):
        text = render.render_campaign(summary, fmt or "md") if tables else \
            render.render_campaign_summary(summary, fmt or "md")
        console.file.write(text)
        return
    for table in summary.tables if tables else ():
        print_sweep_table(table, fmt, console)
        console.print()
    console.print(campaign_grid(summary))


def sweep_grid(table: SweepTable) -> Table:
    """The rungs as a rich table: the markdown's cells, verdicts and statuses in colour, each rung's note
    under the table (:func:`rung_notes`)."""
    grid = Table(title=escape(render.title(table)), title_justify="left")
    head, scaling = render.headers(table), render.has_scaling(table)
    for name in head:
        grid.add_column(escape(name), overflow="fold")
    verdict, status = head.index("verdict"), head.index("status")
    for row in table.rows:
        cells = [escape(c) for c in render.row_cells(row, scaling)]
        cells[verdict] = _styled(cells[verdict], VERDICT_STYLES.get(row.verdict.split(" ")[0], ""))
        # the note (why a rung failed, what it was built on) goes under the table: a long cell would fold tall
        cells[status] = _styled(escape(render.status_text(row)), _status_style(row))
        grid.add_row(*cells)
    return grid


def _status_style(row) -> str:
    """Green when every run was ok on a quiet machine, yellow when some were, red when none ran ok."""
    if row.status != "ok":
        return "red"
    return "green" if row.statuses.get("ok", 0) == row.repeats and not row.busy else "yellow"


def rung_notes(table: SweepTable) -> list[str]:
    """The notes the status cells of the rich table leave out, one line per rung that has one."""
    return [f"rung {row.rung}: {row.note}" for row in table.rows if row.note]


def campaign_grid(summary: CampaignSummary) -> Table:
    """The campaign's summary as a rich table: a line per sweep."""
    grid = Table(title=escape(f"campaign {summary.campaign_id}: {len(summary.rows)} sweeps"), title_justify="left")
    for name in render.CAMPAIGN_HEADER:
        grid.add_column(escape(name), overflow="fold")
    for cells in render.campaign_cells(summary):
        grid.add_row(*(escape(c) for c in cells))
    return grid


def _styled(text: str, style: str) -> str:
    return f"[{style}]{text}[/]" if style else text


def _bold(text: str) -> str:
    """Markdown's ``**strong**`` as rich markup."""
    return re.sub(r"\*\*(.+?)\*\*", r"[bold]\1[/bold]", text)
