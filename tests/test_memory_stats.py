"""Memory as the field reads it: the CUDA caching allocator's retries and survived out-of-memory errors
(torch.cuda.memory_stats, faked here) travel from the child's extras to the record, add up over ranks, and the
table, its footer and the fit's curve say which memory figure is which."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest
import torch

from harness.analysis.views import fit_curve, render
from harness.analysis.views import table as table_mod
from harness.run.child import measure, ranks
from harness.run.child.summary import Extras, Measurement, PerSample, summarize
from harness.records.make import make_record
from harness.store import COLUMNS, RunRecord
from tests.conftest import tiny_config

GIB = 2**30


def test_the_allocators_counts_are_read_from_memory_stats_on_cuda_only(monkeypatch):
    stats = {"num_alloc_retries": 3, "num_ooms": 1, "allocated_bytes.all.peak": 5}
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda device: stats)
    assert measure.allocator_counts(torch.device("cuda", 0)) == {"cuda_alloc_retries": 3, "cuda_ooms": 1}
    assert measure.allocator_counts(torch.device("cpu")) == {}


def test_the_window_s_own_counts_are_apart_from_the_warm_ups(monkeypatch):
    # cuDNN's benchmark in the first step tries workspaces that do not fit: retries and OOMs before the window
    stats = {"num_alloc_retries": 5, "num_ooms": 5}
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda device: stats)
    at_open = measure.allocator_counts(torch.device("cuda", 0))
    stats["num_alloc_retries"] = 6  # one retry in the window itself: pressure in the steady state
    counts = measure.allocator_counts(torch.device("cuda", 0), at_open)
    assert counts == {"cuda_alloc_retries": 6, "cuda_ooms": 5, "warmup_cuda_alloc_retries": 5, "warmup_cuda_ooms": 5,
                      "window_cuda_alloc_retries": 1, "window_cuda_ooms": 0}
    out = ranks.combine([{**_BASE, **counts}, {**_BASE, **counts}], "nccl", 1)
    assert (out["window_cuda_alloc_retries"], out["warmup_cuda_ooms"]) == (2, 10)
    record = _gpu_record(0, 6)
    record.window_cuda_alloc_retries = 1
    frame = pd.DataFrame([{c: getattr(r, c) for c in COLUMNS} for r in [record]])
    assert table_mod.build_table(frame, "s").rows[0].alloc_retries == 1  # the table reads the window's own


_BASE = {"samples_per_s": 10.0, "units_per_s": 10.0, "samples_per_step": 2, "step_ms_p50": 10.0, "step_ms_p90": 11.0,
         "measured_s": 1.0, "peak_main_rss_bytes": 1e9, "step_ms": [10.0]}


def test_the_counts_reach_the_record_beside_the_peaks():
    m = Measurement(samples_per_step=2, warmup_ms=[50.0], step_ms=[10.0, 11.0], data_wait_ms=[0.0, 0.0],
                    measured_s=0.021)
    extras = Extras(peak_vram_bytes=2 * GIB, peak_vram_reserved_bytes=3 * GIB, cuda_alloc_retries=4, cuda_ooms=0)
    summary = summarize(m, extras, PerSample(units=1.0), compiled=False)
    record = make_record(tiny_config(), {}, "key", "ok", "", summary)
    assert (record.peak_vram_bytes, record.peak_vram_reserved_bytes) == (2 * GIB, 3 * GIB)
    assert (record.cuda_alloc_retries, record.cuda_ooms) == (4, 0)


def test_the_ranks_counts_add_up():
    base = {"samples_per_s": 10.0, "units_per_s": 10.0, "samples_per_step": 2, "step_ms_p50": 10.0,
            "step_ms_p90": 11.0, "measured_s": 1.0, "peak_main_rss_bytes": 1e9, "step_ms": [10.0]}
    out = ranks.combine([{**base, "cuda_alloc_retries": 2, "cuda_ooms": 0},
                         {**base, "cuda_alloc_retries": 5, "cuda_ooms": 1}], "nccl", 1)
    assert (out["cuda_alloc_retries"], out["cuda_ooms"]) == (7, 1)


def _gpu_record(run: int, retries: int) -> RunRecord:
    return RunRecord(run_id=f"r{run}", status="ok", timestamp=f"2026-11-27T10:00:0{run}", workload="unet3d",
                     size="full", device="cuda", env_key="e", sweep_id="s", ladder="fit-x", rung=0, round=run,
                     gpu_name="H100", gpu_count=1, samples_per_s=10.0 + run, step_ms=[100.0] * 5,
                     peak_vram_bytes=2 * GIB, peak_vram_reserved_bytes=3 * GIB, gpu_mem_used_bytes=3.5 * GIB,
                     cuda_alloc_retries=retries, cuda_ooms=0)


def _table():
    frame = pd.DataFrame([{c: getattr(r, c) for c in COLUMNS} for r in [_gpu_record(0, 0), _gpu_record(1, 6)]])
    return table_mod.build_table(frame, "s")


def test_the_table_labels_reserved_allocated_and_retries():
    table = _table()
    row = table.rows[0]
    assert (row.peak_mem_bytes, row.peak_mem_allocated_bytes, row.device_mem_bytes) == (3 * GIB, 2 * GIB,
                                                                                         3.5 * GIB)
    assert row.alloc_retries == 6  # the most of any run
    assert render.mem_text(row) == "3.00 GiB (2.00 allocated), 6 alloc retries"
    footer = " ".join(render.footer_lines(table))
    assert "peak VRAM reserved (what the allocator holds)" in footer and "allocator's retries" in footer
    assert "NVML's device-wide figure" in footer


def test_the_fit_curve_on_a_gpu_has_a_column_for_each_figure():
    lines = fit_curve.curve_table(fit_curve.curve(_table(), [16]), "cuda")
    assert lines[0] == ("| batch_size | samples/s [95% band] | runs | peak reserved GiB (allocator) | "
                        "peak allocated GiB (tensors) | alloc retries |")
    assert lines[2].startswith("| 16 | 10.") and lines[2].endswith("| 2 | 3.00 | 2.00 | 6 |")


def test_the_memory_plot_draws_the_allocated_peak_the_device_figure_and_the_cap(tmp_path):
    from harness.analysis.views import plots

    table = dataclasses.replace(_table(), memory_limit_gb=24.0)  # the table is frozen: a view, built once
    fig = plots.plt.figure()
    ax = fig.add_subplot()
    assert plots._gpu_memory_layers(ax, table) == pytest.approx(24.0)
    labels = ax.get_legend_handles_labels()[1]
    assert sorted(labels) == ["device-wide in use (NVML: every process, CUDA context)",
                              "memory.limit_gb cap (24 GiB)", "peak allocated (live tensors)"]
    plots.plt.close(fig)
