"""`report`: one self-contained HTML file with every rung, the embedded plots, environment and verdicts."""

from __future__ import annotations

import base64
import re

from test_plots import record, write_batch_sweep, write_record, write_sweep

from harness.commands import report


def make_report(results, out, *extra) -> int:
    return report.main("report", ["--results", str(results), "--out", str(out), *extra])


def test_report_holds_every_rung_and_embeds_its_plots(results, tmp_path, capsys):
    write_sweep(results, "phase2-a", torch_version="2.4.0", cuda_version="12.4", monai_version="1.4.0")
    out = tmp_path / "r" / "report.html"
    out.parent.mkdir()  # report refuses a folder that does not exist (main d70f134)
    assert make_report(results, out) == 0
    assert capsys.readouterr().out.strip() == str(out)
    page = out.read_text()
    for change in ("(baseline)", "precision=bf16-mixed", "batch_size=8", "data.num_workers=4"):
        assert f"<td>{change}</td>" in page
    images = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", page)
    assert len(images) == 4  # waterfall, throughput, data wait, memory (CPU: no GPU utilisation)
    assert all(base64.b64decode(i)[:4] == b"\x89PNG" for i in images)
    # self-contained: nothing fetched from anywhere
    assert "http://" not in page and "https://" not in page and "<link" not in page and "<script" not in page


def test_report_shows_environment_and_verdicts(results, tmp_path):
    write_sweep(results, "phase2-a", torch_version="2.4.0", cuda_version="12.4", monai_version="1.4.0")
    out = tmp_path / "report.html"
    assert make_report(results, out) == 0
    page = out.read_text()
    for text in ("<th>torch</th><td>2.4.0</td>", "<th>CUDA</th><td>12.4</td>", "<th>MONAI</th><td>1.4.0</td>",
                 "<th>CPU</th><td>Test CPU @ 3.0GHz</td>", "<th>git commit</th><td>abc1234def</td>",
                 "Every run ran in the same environment."):
        assert text in page, text
    # one row per run (4 rungs x 2 repeats) in the per-run environment table
    assert page.count("<td>phase2-a-") == 8
    # rung 1: 60.6/50.5 = 1.2x against the guide's 2-3x
    assert "<td>precision=bf16-mixed</td><td>2-3x</td><td>1.20x" in page
    assert "falls short" in page
    assert "not measured (oom)" in page  # rung 2 ran out of memory
    assert "all rungs together" in page and "3-4x" in page


def test_report_names_runs_that_differ_in_environment(results, tmp_path):
    write_sweep(results, "phase2-a")
    # a resumed round on a later commit (rung 3, round 2)
    write_record(record("phase2-a", 3, 2, 95.0, change="data.num_workers=4", git_commit="fff0000", day=3), results)
    out = tmp_path / "report.html"
    assert make_report(results, out) == 0
    assert "Runs differ in: git commit." in out.read_text()


def test_batch_report_embeds_the_batch_plot(results, tmp_path):
    write_batch_sweep(results)
    out = tmp_path / "report.html"
    assert make_report(results, out) == 0
    page = out.read_text()
    assert "id='batch-cpu-batch'" in page
    assert "This ladder makes no claims to check." in page


def test_report_bad_sweep_and_folder_out(results, tmp_path, capsys):
    write_sweep(results, "phase2-a")
    assert make_report(results, tmp_path / "r.html", "--sweep", "phase2-zz") == 2
    assert "'phase2-zz'" in capsys.readouterr().err
    assert make_report(results, tmp_path) == 2
    assert "is a folder" in capsys.readouterr().err


def test_the_table_shows_allocated_vram_beside_reserved_and_runs_without_cuda_graphs(results):
    from test_plots import record

    from harness.analysis.views import render
    from harness.analysis.views import table as table_mod
    from harness.store import load_runs

    gib = 2**30
    rungs = [("", dict(peak_vram_reserved_bytes=6 * gib, peak_vram_bytes=4 * gib)),
             ("compile=reduce-overhead", dict(peak_vram_reserved_bytes=5 * gib, peak_vram_bytes=5 * gib,
                                               cudagraph_skips=3)),
             ("channels_last=true", dict(peak_vram_reserved_bytes=5 * gib, peak_vram_bytes=4.5 * gib,
                                         cudagraph_skips=0))]
    for rung, (change, fields) in enumerate(rungs):
        write_record(record("g", rung, 0, 50.0, change=change, device="cuda", gpu_name="H100", gpu_count=1,
                            **fields), results)
    table = table_mod.build_table(load_runs(results), "g")
    cells = [render.row_cells(r)[render.HEADER.index("peak mem")] for r in table.rows]
    assert cells == ["6.00 GiB (4.00 allocated)", "5.00 GiB", "5.00 GiB (4.50 allocated)"]
    assert table.rows[1].note == "no CUDA graphs: Inductor skipped capturing them (3 times)"
    assert table.rows[0].note == table.rows[2].note == ""
    text = render.to_markdown(table)
    assert "with the allocated peak (live tensors) beside it where they differ" in text


def test_an_out_path_that_cannot_be_written_is_one_line_naming_it_before_anything_is_drawn(results, capsys,
                                                                                          monkeypatch):
    write_sweep(results, "phase2-a")
    drawn = []
    monkeypatch.setattr(report.report, "report_sweep", lambda *args: drawn.append(args))
    assert make_report(results, "/proc/x.html") == 2  # /proc takes no new files
    out = capsys.readouterr()
    assert out.err.strip().splitlines() == [
        "error: --out '/proc/x.html': cannot write there (No such file or directory, FileNotFoundError); choose a "
        "file in a folder you can write, such as results/report.html"]
    assert not drawn and out.out == ""


def test_a_custom_model_is_named_by_its_target_in_the_report_and_in_compare(results, tmp_path):
    import json

    from harness.analysis.views import compare

    custom = json.dumps({"batch_size": 4, "workload": {"name": "custom", "model": {"_target_": "mypkg.nets.MyNet"}}})
    write_sweep(results, "phase2-a", workload="custom", config_json=custom)
    out = tmp_path / "report.html"
    assert make_report(results, out) == 0
    assert "Sweep phase2-a: ladder phase2, custom: mypkg.nets.MyNet (smoke) on cpu" in out.read_text()
    write_sweep(results, "phase2-b", workload="custom", config_json=custom, day=2)
    text = compare.compare_sweeps(["phase2-a", "phase2-b"], str(results)).text
    assert "custom: mypkg.nets.MyNet (smoke)" in text


def test_without_out_the_page_goes_beside_the_records_it_shows_from_any_folder(results, tmp_path, monkeypatch,
                                                                              capsys):
    write_sweep(results, "phase2-a")
    monkeypatch.chdir(tmp_path)  # a folder with no results/ in it
    assert report.main("report", ["--results", str(results)]) == 0
    assert capsys.readouterr().out.strip() == str(results / "report.html") and (results / "report.html").is_file()
    assert report.main("report", ["--results", str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err.strip() == (f"error: no such results folder: {str(tmp_path / 'nope')!r} (give "
                                               "--results the folder that holds runs/)")
