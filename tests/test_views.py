"""The views are built once: a pure function makes each view's rows and notes from the records (the sweep's table,
the components' judgement of its rows, the units table, a campaign's summary), and every renderer takes the view as
it is (frozen: a renderer reads a row, it never fills one in). Real values: a sweep of results/h100 (an H100, two
rounds of four rungs) and small fixed records."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import typing
from types import SimpleNamespace

import pandas as pd
import pytest

from harness.analysis.views import ci_formats, components, render, report, rows, units
from harness.analysis.views import table as table_mod
from harness.commands import export as export_cmd
from harness.commands import terminal
from harness.export import figures
from harness.store import COLUMNS, RunRecord, load_runs
from tests.conftest import REPO

H100 = str(REPO / "results" / "h100")
PHASE2 = "phase2-20261127-235759992403-d8545708"  # bf16, batch 8, workers 4 over the baseline; two rounds
QUEUED = "phase2-20261122-090236947663-8775cc4b"  # one round; rung 3's window opened on batches made in the warm-up


def test_the_sweep_view_of_an_h100_sweep_has_its_rows_and_notes():
    table = table_mod.load_table(H100, PHASE2)
    assert [(r.rung, r.change, r.built_on) for r in table.rows] == [
        (0, "(baseline)", None), (1, "precision=bf16-mixed", 0), (2, "batch_size=8", 1), (3, "data.num_workers=4", 2)]
    assert [round(r.samples_per_s, 2) for r in table.rows] == [126.21, 123.13, 127.21, 196.97]
    assert [r.x_previous and round(r.x_previous.value, 3) for r in table.rows] == [None, 0.976, 1.033, 1.549]
    assert (round(table.rows[3].x_previous.low, 3), round(table.rows[3].x_previous.high, 3)) == (1.231, 1.948)
    assert [r.verdict for r in table.rows] == ["", "falls short (no measurable change)",
                                               "falls short (no measurable change)", "confirms"]
    assert all(r.notes == () and r.note == "" for r in table.rows)
    low, high = table.rows[0].samples_per_s_band
    assert (round(low, 2), round(high, 2)) == (122.37, 130.05)  # the noise model's 3.0% either side
    assert table.total_verdict == "falls short" and round(table.total_measured.value, 3) == 1.561
    assert table.notes == [
        f"noise: no calibration here (run python -m harness noise workload=unet3d size=full device=cuda "
        f"results_dir={H100}); bands from the runs' own spread: the rung x round model, 3 degrees of freedom",
        "sweep.repeats=auto: decided after 2 round(s) (2.9 minutes); bands at the 99.93% level of look 2 of at most 6 "
        "(95% together over every look)"]
    assert table.noise_note == table.notes[0] and table.groups == []


def test_the_html_table_says_every_sentence_the_markdown_says_under_it():
    import html
    import re

    table = table_mod.load_table(H100, PHASE2)
    page = render.to_html(table)
    said = [html.unescape(re.sub(r"</?b>", "", p)) for p in re.findall(r"<p>(.*?)</p>", page)]
    assert said == [line.replace("**", "") for line in render.footer_lines(table)]
    assert any(line.startswith("Peak mem is") for line in said)  # how to read the memory, once left out
    assert "<b>falls short</b>" in page


def test_the_components_view_judges_the_rows_it_is_given_and_changes_none_of_them():
    table = table_mod.load_table(H100, PHASE2)
    records = load_runs(H100, sweep=PHASE2)
    given = [dataclasses.replace(r, parts=dataclasses.replace(r.parts, x_compute=None)) for r in table.rows]
    judged = components.judge(given, [], records, 0.05)
    assert [r.parts.x_compute and round(r.parts.x_compute.value, 3) for r in judged.rows] == [None, 1.184, 1.308,
                                                                                             1.006]
    assert [r.parts.x_compute.within_noise for r in judged.rows[1:]] == [False, False, True]
    assert all(r.parts.x_compute is None for r in given)  # what it was given is as it was
    assert judged.readings == table.readings and len(judged.readings) == 4
    assert judged.readings[3] == ("data.num_workers=4: the device's step unchanged (1.01x) per sample, end to end "
                                  "1.55x; the change acted on the loader: 64% -> 0% waiting.")


def test_the_components_view_returns_a_rungs_notes_on_its_row():
    table = table_mod.load_table(H100, QUEUED)
    assert [r.notes for r in table.rows[:3]] == [(), (), ()]
    assert table.rows[3].notes == (
        "the window opened on batches made during the warm-up: waiting on data 0% of its first third, 57% of its "
        "last; a longer window (measure.steps) measures the loader's own pace",)
    records = load_runs(H100, sweep=QUEUED)
    bare = [dataclasses.replace(r, notes=()) for r in table.rows]
    assert [r.notes for r in components.judge(bare, [], records).rows] == [r.notes for r in table.rows]


def _token_run(rung: int, change: str, rnd: int, **fields) -> RunRecord:
    return RunRecord(run_id=f"u-{rung}-{rnd}", status="ok", timestamp=f"2024-06-02T10:{rnd:02d}:{rung:02d}+0000",
                     workload="gpt", size="smoke", device="cpu", config_hash=f"cfg-{rung}", env_key="env", sweep_id="u",
                     ladder="lm", rung=rung, change=change, round=rnd, unit="tokens", cpu_model="Sim CPU",
                     cpu_count=2, other_cpu_pct=1.0, **fields)


def test_the_units_view_has_its_rows_and_notes():
    compiled = json.dumps({"compile": "default"})
    runs = [_token_run(0, "", 0, units_per_s=1000.0, samples_per_s=10.0, step_ms_p50=50.0, peak_host_rss_bytes=2**30),
            _token_run(0, "", 1, units_per_s=1200.0, samples_per_s=12.0, step_ms_p50=40.0, peak_host_rss_bytes=2**30),
            _token_run(1, "compile=default", 0, units_per_s=1500.0, samples_per_s=15.0, step_ms_p50=30.0,
                       compile_s=12.0, config_json=compiled),
            dataclasses.replace(_token_run(2, "batch_size=64", 0), status="oom",
                                error="Traceback\nRuntimeError: out of memory")]
    view = units.build_unit_table(pd.DataFrame([{c: getattr(r, c) for c in COLUMNS} for r in runs]))
    assert [(r.rung, r.change, r.status, r.units_per_s, r.step_ms, r.cache, r.note) for r in view.rows] == [
        (0, "(baseline)", "ok", 1100.0, 45.0, "", ""), (1, "compile=default", "ok", 1500.0, 30.0, "warm", ""),
        (2, "batch_size=64", "oom", None, None, "", "RuntimeError: out of memory")]
    assert view.rows[0].peak_mem_bytes == 2**30 and view.rows[1].compile_s == 12.0
    assert view.break_even == ["rung 1 (compile=default, warm cache): compile 12.0 s, 15 ms a step saved over rung 0: "
                               "breaks even after 800 steps"]
    assert view.mfu_note.startswith("MFU n/a: a CPU has no peak") and view.busy_note == ""


def test_the_campaign_view_has_a_row_per_sweep_from_its_tables():
    frame = load_runs(H100)
    frame.loc[frame["sweep_id"].isin([PHASE2, QUEUED]), "campaign_id"] = "campaign-t"
    summary = table_mod.campaign_summary(frame, "campaign-t", H100)
    assert [r.sweep_id for r in summary.rows] == [QUEUED, PHASE2] == [t.sweep_id for t in summary.tables]
    assert [round(r.total_measured.value, 3) for r in summary.rows] == [
        round(summary.tables[0].rows[-1].x_baseline.value, 3), 1.561]
    assert summary.rows[1].total_verdict == "falls short" and [r.failed_rungs for r in summary.rows] == [0, 0]


def test_a_view_is_frozen():
    table = table_mod.load_table(H100, PHASE2)
    for item, name in ((table, "notes"), (table.rows[1], "verdict"), (table.rows[1].parts, "x_compute")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(item, name, None)


VIEW_TYPES = (rows.SweepTable, rows.RungRow, rows.GroupRow, rows.CampaignSummary, units.UnitTable)
RENDERERS = (render.to_markdown, render.to_csv, render.to_html, render.render, render.row_cells, render.footer_lines,
             render.headers, render.title, render.render_campaign, render.render_campaign_summary,
             render.group_line, terminal.print_sweep_table, terminal.sweep_grid, terminal.print_campaign,
             terminal.campaign_grid, ci_formats.table_figures, report.verdicts_html, figures.table_group,
             units.render_markdown)


@pytest.mark.parametrize("renderer", RENDERERS, ids=lambda f: f"{f.__module__.split('.')[-1]}.{f.__name__}")
def test_every_renderer_takes_a_view(renderer):
    first = next(iter(inspect.signature(renderer).parameters))
    assert typing.get_type_hints(renderer)[first] in VIEW_TYPES


BUILDING = {"RungRow", "GroupRow", "SweepTable", "CampaignRow", "CampaignSummary", "UnitRow", "UnitTable", "Parts",
            "build_table", "judge", "parts_of", "build_unit_table"}


@pytest.mark.parametrize("module", [render, terminal, ci_formats, report, figures, units],
                         ids=lambda m: m.__name__.split(".")[-1])
def test_no_renderer_builds_a_row(module):
    """A renderer makes no row, fills none in and judges none: it calls none of the views' builders or types (the
    units view's module builds its own rows, in ``build_unit_table``, and its renderer does not), and it copies none
    with changes (``dataclasses.replace``)."""
    tree = ast.parse(inspect.getsource(module.render_markdown if module is units else module))
    called = {node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
              for node in ast.walk(tree) if isinstance(node, ast.Call)}
    assert not called & BUILDING
    assert "replace" not in {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                             and node.module == "dataclasses" for alias in node.names}
    assert "dataclasses.replace" not in inspect.getsource(module)


class _Writer:
    """A tracker's writer that keeps what it was handed."""

    def __init__(self):
        self.groups = []

    def export(self, groups, dest, experiment):
        self.groups.extend(groups)
        return []


def test_the_export_after_a_sweep_takes_the_table_the_sweep_printed(monkeypatch):
    table = table_mod.load_table(H100, PHASE2)
    writer = _Writer()
    monkeypatch.setattr(table_mod, "load_table", lambda *a: pytest.fail("the table was built again"))
    monkeypatch.setattr(export_cmd, "importlib", SimpleNamespace(import_module=lambda name: writer))
    export_cmd.export_after("tb:runs", H100, sweep=PHASE2, table=table)
    assert [(g.kind, g.id, len(g.entries)) for g in writer.groups] == [("sweep", PHASE2, 4)]
    assert writer.groups[0].entries[3].metrics["speedup/x_previous"] == pytest.approx(table.rows[3].x_previous.value)
