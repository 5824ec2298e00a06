"""`plot` on synthetic sweeps: which files, how many, non-empty, titled; no torch, seconds in all.

``write_sweep`` and ``write_batch_sweep`` are shared with test_compare and test_report.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.analysis.views import labels, plots
from harness.commands import plot as plot_cmd
from harness.store import RunRecord, load_runs, write_record

CPU = "Test CPU @ 3.0GHz"
PHASE2 = ("", "precision=bf16-mixed", "batch_size=8", "data.num_workers=4")


def record(sweep_id: str, rung: int, rnd: int, sps: float | None, *, change: str, status: str = "ok",
           ladder: str = "phase2", day: int = 1, batch: int = 4, **env) -> RunRecord:
    """One synthetic run: step times, data wait and memory follow from ``sps``."""
    step_ms = 1000.0 * batch / sps if sps else None
    fields = dict(
        run_id=f"{sweep_id}-{rung}-{rnd}", status=status, timestamp=f"2024-06-{day:02d}T10:{rung:02d}:{rnd:02d}+00:00",
        workload="unet3d", size="smoke", device="cpu", config_hash=f"{ladder}-cfg{rung}",
        config_json=json.dumps({"batch_size": batch, "measure": {"steps": 20}}), sweep_id=sweep_id, ladder=ladder,
        rung=rung, change=change, round=rnd, samples_per_step=batch, samples_per_s=sps,
        step_ms_p50=step_ms, step_ms_p90=step_ms and step_ms * 1.1,
        step_ms=[step_ms * (1 + 0.01 * (i % 3 - 1)) for i in range(20)] if step_ms else [],
        data_wait_frac=0.3 if sps else None, peak_host_rss_bytes=(1 + rung) * 2**30 if sps else None,
        error="" if status == "ok" else "RuntimeError: out of memory", cpu_model=CPU, cpu_count=2,
        torch_version="2.4.0", cuda_version="", monai_version="1.4.0", harness_version="0.1.0",
        git_commit="abc1234def", python_version="3.11.7")
    fields.update(env)
    return RunRecord(**fields)


def write_sweep(results: Path, sweep_id: str = "phase2-a", throughputs=(50.0, 60.0, None, 90.0), repeats: int = 2,
                changes=PHASE2, day: int = 1, **env) -> None:
    """A 4-rung phase2 sweep; a None throughput is an out-of-memory rung."""
    for rung, (sps, change) in enumerate(zip(throughputs, changes)):
        for rnd in range(repeats):
            jitter = None if sps is None else sps * (1 + 0.02 * rnd)
            write_record(record(sweep_id, rung, rnd, jitter, change=change, status="ok" if sps else "oom", day=day,
                                **env), results)


def write_batch_sweep(results: Path, sweep_id: str = "batch-a") -> None:
    """The batch ladder: batch 1, 2, 4 fit, batch 8 runs out of memory."""
    for rung, (batch, sps) in enumerate(((1, 10.0), (2, 18.0), (4, 30.0), (8, None))):
        change = "" if rung == 0 else f"batch_size={batch}"
        write_record(record(sweep_id, rung, 0, sps, change=change, status="ok" if sps else "oom", ladder="batch",
                            batch=batch, day=2), results)


@pytest.fixture(autouse=True)
def close_figures():
    """Tests that inspect figures leave them open; close them so none pile up."""
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


def run_plot(results: Path, out: Path, *extra: str) -> int:
    return plot_cmd.main("plot", ["--results", str(results), "--out", str(out), *extra])


def test_phase2_writes_the_four_cpu_plots(results, tmp_path, capsys):
    write_sweep(results)
    out = tmp_path / "plots"
    assert run_plot(results, out) == 0
    printed = capsys.readouterr().out.split()
    names = sorted(p.name for p in out.iterdir())
    # no GPU utilisation on a CPU sweep, and no batch plot for phase2
    assert names == ["phase2-cpu-data-wait.png", "phase2-cpu-memory.png", "phase2-cpu-throughput.png",
                     "phase2-cpu-waterfall.png"]
    assert sorted(Path(p).name for p in printed) == names
    for path in out.iterdir():
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert path.stat().st_size > 5000


def test_gpu_sweep_adds_utilisation_and_capacity_line(results, tmp_path):
    write_sweep(results, device="cuda", gpu_name="Test GPU", gpu_count=1, gpu_util_pct=85.0,
                peak_vram_bytes=3 * 2**30, gpu_mem_total_bytes=80 * 2**30)
    data = plots.sweep_data(load_runs(results))
    assert data.capacity_bytes == 80 * 2**30
    built = plots.build_plots(data)
    assert [p.name for p in built] == ["phase2-cuda-waterfall", "phase2-cuda-throughput", "phase2-cuda-data-wait",
                                       "phase2-cuda-memory", "phase2-cuda-gpu-util"]
    memory = next(p for p in built if p.name.endswith("memory"))
    capacity = [line for line in memory.figure.axes[0].get_lines() if list(line.get_ydata()) == [80, 80]]
    assert capacity, "the device capacity line is missing"


def test_gpu_memory_plot_draws_the_reserved_peak_against_capacity(results):
    # reserved (allocator cache) is what must fit; records from before that column fall back to allocated
    write_sweep(results, device="cuda", gpu_name="Test GPU", gpu_count=1, peak_vram_bytes=3 * 2**30,
                peak_vram_reserved_bytes=5 * 2**30, gpu_mem_total_bytes=80 * 2**30)
    data = plots.sweep_data(load_runs(results))
    assert {r.peak_mem_bytes for r in data.table.rows if r.status == "ok"} == {5 * 2**30}
    memory = next(p for p in plots.build_plots(data) if p.name.endswith("memory"))
    ok = len([r for r in data.table.rows if r.status == "ok"])
    bars = [(round(b.get_width(), 1), round(b.get_height(), 2)) for b in memory.figure.axes[0].patches
            if b.get_height()]
    assert bars == [(0.6, 5.0)] * ok + [(0.3, 3.0)] * ok  # reserved, then the allocated peak inside it
    assert "peak VRAM reserved" in memory.figure.axes[0].get_ylabel()


def test_a_capped_sweep_s_memory_plot_is_scaled_to_the_cap_not_the_card(results):
    write_sweep(results, device="cuda", gpu_name="Test GPU", gpu_count=1, peak_vram_bytes=3 * 2**30,
                peak_vram_reserved_bytes=3.5 * 2**30, gpu_mem_total_bytes=80 * 2**30, memory_limit_gb=4.0)
    memory = next(p for p in plots.build_plots(plots.sweep_data(load_runs(results))) if p.name.endswith("memory"))
    ax = memory.figure.axes[0]
    assert 4.0 < ax.get_ylim()[1] < 10  # the 80 GiB card would flatten the bars
    assert [list(line.get_ydata()) for line in ax.get_lines() if line.get_linestyle() == ":"] == [[4.0, 4.0]]
    assert any("80.0 GiB, off the scale" in t.get_text() for t in ax.get_legend().get_texts())
    assert "capped at 4 GiB" in ax.get_title()


def test_titles_wrap_to_the_figure_and_name_the_commit_without_an_installed_version(results):
    write_sweep(results, harness_version="", ladder="a_long_ladder_name_of_forty_characters_xx")
    for p in plots.build_plots(plots.sweep_data(load_runs(results))):
        lines = p.figure.axes[0].get_title().splitlines()
        assert max(map(len, lines[1:])) <= labels.TITLE_WIDTH and "harness at abc1234" in lines[-1], lines


def test_cpu_memory_plot_says_the_capacity_line_is_omitted(results):
    write_sweep(results)
    memory = next(p for p in plots.build_plots(plots.sweep_data(load_runs(results))) if p.name.endswith("memory"))
    ax = memory.figure.axes[0]
    assert "host RAM not recorded" in ax.get_title()
    assert any("not recorded" in t.get_text() for t in ax.get_legend().get_texts())


def test_titles_name_workload_device_date_and_version(results):
    write_sweep(results)
    for p in plots.build_plots(plots.sweep_data(load_runs(results))):
        text = p.figure.axes[0].get_title()
        for part in ("unet3d", "cpu", "2024-06-01", "harness 0.1.0"):
            assert part in text, (p.name, part)
        assert p.figure.axes[0].get_ylabel() and "(" in p.figure.axes[0].get_ylabel()  # units


def test_waterfall_draws_claims_and_marks_the_oom_rung(results):
    write_sweep(results)
    fall = plots.waterfall(plots.sweep_data(load_runs(results)))
    ax = fall.figure.axes[0]
    hatched = [p for p in ax.patches if p.get_hatch() == "//"]
    # claims for rungs 1 and 3 (rung 2 ran out of memory, so nothing is drawn for it)
    assert len(hatched) == 2
    rung1 = hatched[0]
    assert rung1.get_y() == pytest.approx(2.0) and rung1.get_y() + rung1.get_height() == pytest.approx(3.0)
    texts = [t.get_text() for t in ax.texts]
    assert "OOM" in texts
    assert any(t.startswith("1.8") for t in texts)  # rung 3: 90/50 = 1.8x (median of two repeats ~1.81x)


def test_batch_ladder_plots_against_batch_size_and_marks_oom(results, tmp_path):
    write_batch_sweep(results)
    out = tmp_path / "plots"
    assert run_plot(results, out) == 0
    assert (out / "batch-cpu-batch.png").stat().st_size > 5000
    batch = plots.batch_scaling(plots.sweep_data(load_runs(results)))
    top = batch.figure.axes[0]
    assert "memory ran out at batch 8" in top.get_title()
    throughput = top.get_lines()[0]
    assert list(throughput.get_xdata()) == [1, 2, 4]
    assert any("oom at batch 8" in t.get_text() for t in top.get_legend().get_texts())


def test_fifteen_rungs_stay_readable(results):
    changes = [""] + [f"some.really_long.knob_name_{i}=a-very-long-value-{i}" for i in range(1, 15)]
    write_sweep(results, throughputs=[50.0 + i for i in range(15)], changes=changes, repeats=1)
    data = plots.sweep_data(load_runs(results))
    fig = plots.throughput(data).figure
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert len(labels) == 15
    assert all(max(len(line) for line in label.splitlines()) <= 15 for label in labels)
    assert fig.get_figwidth() >= 15  # about an inch per rung
    assert labels[1] == "1\n…really_long.\nknob_name_1\n=a-very-long-v…"


def test_change_names_break_at_dots_not_mid_word():
    assert labels.short_change("data.num_workers=4") == "data.\nnum_workers\n=4"
    assert labels.short_change("precision=bf16-mixed") == "precision\n=bf16-mixed"
    assert labels.short_change("(baseline)") == "baseline"


def test_svg_on_request_and_bad_format(results, tmp_path, capsys):
    write_sweep(results)
    assert run_plot(results, tmp_path / "svg", "--format", "svg") == 0
    svgs = list((tmp_path / "svg").glob("*.svg"))
    assert len(svgs) == 4 and all(p.read_text().lstrip().startswith("<?xml") for p in svgs)
    assert run_plot(results, tmp_path / "x", "--format", "jpg") == 2
    err = capsys.readouterr().err
    assert "'jpg'" in err and "png, svg" in err


def test_unknown_sweep_is_exit_2(results, tmp_path, capsys):
    write_sweep(results)
    assert run_plot(results, tmp_path / "p", "--sweep", "nope") == 2
    assert "nope" in capsys.readouterr().err


def test_waterfall_goes_log_when_a_rung_is_many_times_slower(results, tmp_path):
    write_sweep(results, throughputs=(50.0, 1.0, 1.2, 1.1))  # bf16 on a CPU: 50x slower
    ax = plots.waterfall(plots.sweep_data(load_runs(results))).figure.axes[0]
    assert ax.get_yscale() == "log"
    assert "0.020x" in [t.get_text() for t in ax.texts]
    write_sweep(tmp_path / "modest")
    assert plots.waterfall(plots.sweep_data(load_runs(tmp_path / "modest"))).figure.axes[0].get_yscale() == "linear"


def test_an_out_that_cannot_be_a_folder_names_the_flag_and_the_fix_before_anything_is_drawn(results, tmp_path,
                                                                                              capsys):
    """An --out that is a file (or below one) was an OSError's bare text ("[Errno 17] File exists: ..."), naming
    neither the flag nor what to give instead."""
    write_sweep(results)
    a_file = tmp_path / "plots.png"
    a_file.write_text("")
    for out, why in ((a_file, "File exists, FileExistsError"), (a_file / "sub", "Not a directory, NotADirectoryError")):
        assert run_plot(results, out) == 2
        assert capsys.readouterr().err.strip() == (f"error: --out {str(out)!r}: cannot write the plots there ({why}); "
                                                   "choose a folder you can write, such as results/plots")
