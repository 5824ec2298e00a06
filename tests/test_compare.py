"""`compare` on synthetic sweeps: lining up rungs, labels, not-comparable rows, the table text."""

from __future__ import annotations

from pathlib import Path

from test_plots import PHASE2, write_record, write_sweep, record

from harness.commands import compare


def run_compare(results: Path, out: Path, *sweeps: str) -> int:
    return compare.main("compare", [*sweeps, "--results", str(results), "--out", str(out)])


def test_two_gpus_same_rungs_line_up_with_ratios(results, tmp_path, capsys):
    # different GPUs resolve to different settings hashes: still the same rungs, so they pair up
    write_sweep(results, "on-a100", (50.0, 60.0, 70.0, 80.0), device="cuda", gpu_name="A100", gpu_count=1)
    write_sweep(results, "on-h100", (100.0, 120.0, 140.0, 160.0), device="cuda", gpu_name="H100", gpu_count=1,
                config_hash="other", day=2)
    out = tmp_path / "cmp"
    assert run_compare(results, out, "on-a100", "on-h100") == 0
    text = capsys.readouterr().out
    # sides are named by what differs: the GPU
    assert "### compare: A100 x1 vs H100 x1" in text
    assert "| rung | change | A samples/s | B samples/s | B/A | note |" in text
    assert "| 0 | (baseline) | 50.50 | 101.00 | 2.00x | - |" in text
    assert "| 3 | data.num_workers=4 | 80.80 | 161.60 | 2.00x | - |" in text
    assert "not comparable" not in text
    assert (out / "compare.png").stat().st_size > 5000
    assert (out / "compare.md").read_text() in text


def test_mismatched_rungs_are_not_comparable(results, tmp_path, capsys):
    write_sweep(results, "s1", (50.0, 60.0, 70.0, 80.0))
    # s2: rung 2 changes something else, and there is no rung 3
    changes = ("", "precision=bf16-mixed", "channels_last=true")
    write_sweep(results, "s2", (55.0, 66.0, 77.0), changes=changes, day=2)
    assert run_compare(results, tmp_path / "cmp", "s1", "s2") == 0
    text = capsys.readouterr().out
    lines = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert "1.10x" in lines["0"] and "not comparable" not in lines["0"]
    assert "1.10x" in lines["1"]
    assert lines["2"] == ("| 2 | batch_size=8 / channels_last=true | 70.70 | 77.77 | not comparable | not comparable: "
                          "the change differs (batch_size=8 vs channels_last=true) |")
    assert lines["3"] == "| 3 | data.num_workers=4 | 80.80 | - | not comparable | not comparable: no such rung on s2 |"


def test_sides_labelled_by_torch_version_and_failures_noted(results, tmp_path, capsys):
    write_sweep(results, "old", (50.0, 60.0, None, 90.0), torch_version="2.3.1")
    write_sweep(results, "new", (50.0, 66.0, 70.0, 99.0), torch_version="2.4.0", day=2)
    assert run_compare(results, tmp_path / "cmp", "old", "new") == 0
    text = capsys.readouterr().out
    assert "### compare: torch 2.3.1 vs torch 2.4.0" in text
    assert "| 1 | precision=bf16-mixed | 60.60 | 66.66 | 1.10x | - |" in text
    assert "| 2 | batch_size=8 | - | 70.70 | - | oom on torch 2.3.1 |" in text


def test_same_environment_falls_back_to_sweep_ids_and_notes_settings(results, tmp_path, capsys):
    write_sweep(results, "s1", (50.0, 60.0, 70.0, 80.0))
    write_record(record("s2", 0, 0, 50.0, change="", batch=2), results)
    assert run_compare(results, tmp_path / "cmp", "s1", "s2") == 0
    text = capsys.readouterr().out
    assert "### compare: s1 vs s2" in text
    assert "| 50.50 | 50.00 | 0.99x (no band) | settings differ: batch_size (4 vs 2) |" in text  # one run: no band
    assert "not comparable: no such rung on s2" in text


def test_sources_by_folder_and_parquet_file(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    write_sweep(a, "sa", (50.0, 60.0, 70.0, 80.0), repeats=1)
    write_sweep(b, "sb", (100.0, 60.0, 70.0, 80.0), repeats=1, cpu_model="Other CPU")
    one_file = next((b / "runs").glob("sb-0-0.parquet"))
    assert compare.main("compare", [str(a), str(one_file), str(b / "runs"), "--out", str(tmp_path / "c")]) == 0
    text = capsys.readouterr().out
    assert f"(from {a})" in text and f"(from {one_file})" in text
    assert "| rung | change | A samples/s | B samples/s | C samples/s | B/A | C/A | note |" in text
    assert "| 0 | (baseline) | 50.00 | 100.00 | 100.00 | 2.00x (no band) | 2.00x (no band) | - |" in text
    # the single parquet file holds only rung 0
    assert "| 1 | precision=bf16-mixed | 60.00 | - | 60.00 | not comparable | not comparable |" in text


def test_bad_input_exits_2_with_one_line(results, tmp_path, capsys):
    write_sweep(results, "phase2-a")
    assert run_compare(results, tmp_path / "c", "phase2-a", "phase2-x") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'phase2-x'" in err and "phase2-a" in err
    assert run_compare(results, tmp_path / "c", "phase2-a") == 2
    assert "two or more" in capsys.readouterr().err
    assert PHASE2[0] == ""


def test_latest_names_the_newest_sweep_as_table_and_check_take_it(results, tmp_path, capsys):
    write_sweep(results, "phase2-old", (50.0, 60.0, 70.0, 80.0))
    write_sweep(results, "phase2-new", (100.0, 120.0, 140.0, 160.0), day=2)
    assert run_compare(results, tmp_path / "c", "phase2-old", "latest") == 0
    assert "| 0 | (baseline) | 50.50 | 101.00 | 2.00x | - |" in capsys.readouterr().out


def test_an_out_that_cannot_be_a_folder_names_the_flag_and_the_fix_before_anything_is_compared(results, tmp_path,
                                                                                                capsys):
    write_sweep(results, "a")
    write_sweep(results, "b", day=2)
    a_file = tmp_path / "compare"
    a_file.write_text("")
    assert run_compare(results, a_file, "a", "b") == 2
    captured = capsys.readouterr()
    assert captured.err.strip() == (f"error: --out {str(a_file)!r}: cannot write compare.md and compare.png there "
                                    "(File exists, FileExistsError); choose a folder you can write, such as "
                                    "results/compare")
    assert captured.out == ""  # refused before the table is printed
