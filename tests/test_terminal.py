"""`table` and `sweep` print a rich table to a person at a terminal, markdown to files, pipes and --format md."""

from __future__ import annotations

import io
import sys

import pytest
from rich.console import Console
from test_plots import write_sweep

from harness import cli
from harness.analysis.views import render
from harness.analysis.views.table import load_table
from harness.commands import console as console_mod
from harness.commands import terminal

WIDE = 240  # every column fits: cells are not folded, so the assertions can read them whole


class Screen(io.StringIO):
    """What a terminal shows: a file that is a TTY."""

    def isatty(self) -> bool:
        return True


def _console(file: io.StringIO) -> Console:
    return Console(file=file, force_terminal=True, width=WIDE, color_system=None, highlight=False)


@pytest.fixture
def screen(monkeypatch):
    """The commands' console as a terminal of WIDE columns; its text."""
    fake = _console(Screen())
    monkeypatch.setattr(console_mod, "console", fake)
    return fake


def test_table_in_a_terminal_is_a_rich_table_with_the_same_cells(tmp_path, screen, capsys):
    write_sweep(tmp_path, "phase2-a")
    assert cli.main(["table", "--results", str(tmp_path)]) == 0
    text = screen.file.getvalue()
    assert capsys.readouterr().out == ""  # all of it went to the terminal's console
    assert "┃ rung" in text and "x previous [95% band]" in text and "|---|" not in text and "###" not in text
    assert "sweep phase2-a: ladder phase2, workload unet3d (smoke)" in text
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
            for line in text.splitlines() if line.startswith("│ ")}
    for row in sweep_table(tmp_path).rows:  # the markdown's cells, one by one; the status without its note
        assert rows[str(row.rung)] == render.row_cells(row)[1:-1] + [render.status_text(row)]
    # round 1 is 2% faster for every rung alike: the rung x round model takes it out, no residual is left
    assert rows["1"][3:6] == ["1.20x [1.20-1.20]", "-", "66.0 / 72.6"] and rows["1"][-2:] == ["falls short", "ok x2"]
    assert rows["2"][-1] == "oom x2" and "\nrung 2: RuntimeError: out of memory\n" in text  # the note, under it
    assert "\nrung 3: built on rung 1 (rungs between did not run ok)\n" in text
    assert "Peak mem is peak host RSS" in text and "**" not in text  # bold is markup, not asterisks


def test_format_md_in_a_terminal_is_markdown(tmp_path, screen):
    write_sweep(tmp_path, "phase2-a")
    assert cli.main(["table", "--results", str(tmp_path), "--format", "md"]) == 0
    text = screen.file.getvalue()
    assert text.startswith("### sweep phase2-a") and "| rung | change | samples/s |" in text and "┃" not in text


def test_table_in_a_file_or_pipe_is_markdown(tmp_path, capsys):
    write_sweep(tmp_path, "phase2-a")
    assert not sys.stdout.isatty()  # pytest's captured stdout is a pipe, whatever FORCE_COLOR says
    assert cli.main(["table", "--results", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("### sweep phase2-a") and "|---|" in text and "┃" not in text
    assert "| 2 | batch_size=8 |" in text and "oom x2" in text


def test_a_terminal_by_isatty_gets_rich_too(tmp_path, monkeypatch):
    """The real decision: the console's stdout answers isatty() (no forcing)."""
    write_sweep(tmp_path, "phase2-a")
    stdout = io.StringIO()
    stdout.isatty = lambda: True  # what a terminal answers
    for variable in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "NO_COLOR", "TERM"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr("sys.stdout", stdout)
    monkeypatch.setattr(console_mod, "console", Console(width=WIDE, highlight=False, color_system=None))
    assert cli.main(["table", "--results", str(tmp_path)]) == 0
    assert "┃ rung" in stdout.getvalue() and "|---|" not in stdout.getvalue()


def test_a_bad_format_is_one_line_naming_the_choices(tmp_path, capsys):
    write_sweep(tmp_path, "phase2-a")
    assert cli.main(["table", "--results", str(tmp_path), "--format", "mdx"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'mdx'" in err and "Did you mean 'md'" in err
    assert "Valid choices: bmf, csv, gab, html, md, pytorch-oss" in err


def test_the_sweep_prints_its_table_rich_in_a_terminal_and_markdown_otherwise(tmp_path, screen, capsys):
    from harness.commands import sweep as sweep_cmd
    from harness.config import ladder as ladder_mod
    from harness.sweeps.rungs import SweepContext

    write_sweep(tmp_path, "phase2-a")
    ctx = SweepContext(sweep_id="phase2-a", ladder=ladder_mod.load("phase2"), settings={"results_dir": str(tmp_path)},
                       user_keys=frozenset())
    sweep_cmd._print_table(ctx)
    assert "┃ rung" in screen.file.getvalue() and "|---|" not in screen.file.getvalue()
    assert f"python -m harness table --results {tmp_path} --sweep phase2-a" in capsys.readouterr().out

    piped = _console(io.StringIO())  # rich would colour it (as with FORCE_COLOR), but it is no terminal
    terminal.print_sweep_table(sweep_table(tmp_path), console=piped)
    assert piped.file.getvalue().startswith("### sweep phase2-a") and "┃" not in piped.file.getvalue()


def sweep_table(results):
    return load_table(str(results), "phase2-a")


def test_a_campaign_in_a_terminal_ends_with_its_summary_grid(tmp_path, screen):
    write_sweep(tmp_path, "phase2-a", campaign_id="campaign-x")
    write_sweep(tmp_path, "phase2-b", day=2, campaign_id="campaign-x")
    assert cli.main(["table", "--results", str(tmp_path), "--campaign", "latest"]) == 0
    text = screen.file.getvalue()
    assert text.count("sweep phase2-") >= 2 and "campaign campaign-x: 2 sweeps" in text
    summary = text[text.index("campaign campaign-x"):]
    assert "┃ sweep" in summary and "rungs not ok" in summary and "|---|" not in text
