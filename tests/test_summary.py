"""The record is made once, from a typed summary: a metric name it does not know fails loudly."""

import dataclasses
import math

import pyarrow.parquet as pq
import pytest

from harness.config import DebugConfig
from harness.run.child import faults, stopping
from harness.run.child.summary import NOT_STORED, Extras, Measurement, PerSample, Summary, summarize
from harness.records.make import make_record
from harness.store import COLUMNS, RunRecord, load_runs
from harness.metrics import Metrics
from tests.conftest import REPO, tiny_config


def _measurement() -> Measurement:
    return Measurement(samples_per_step=4, warmup_ms=[900.0, 110.0], step_ms=[100.0, 120.0, 110.0],
                       data_wait_ms=[10.0, 20.0, 30.0], measured_s=0.4, window_start_unix=1.7e9,
                       loss_first=2.0, loss_last=1.5)


def test_a_metric_is_declared_once_and_both_the_record_and_the_summary_take_it_from_there():
    metrics = [f.name for f in dataclasses.fields(Metrics)]
    record = {f.name: f.type for f in dataclasses.fields(RunRecord)}
    assert all(record[f.name] == f.type for f in dataclasses.fields(Metrics))  # each a column of its name and type
    assert list(Summary().record_fields()) == metrics
    assert NOT_STORED == {"python_threads_in_window", "cpu_window", "worker_hwm_bytes"} and not NOT_STORED & set(record)
    # neither declares a metric of its own: a new one is a field of Metrics alone
    assert not set(RunRecord.__annotations__) & set(metrics) and not set(Summary.__annotations__) & set(metrics)
    assert len(metrics) == 75 and metrics[:3] == ["samples_per_step", "flops_per_sample", "warmup_steps"]


def test_the_records_kept_in_the_repository_read_with_every_column_they_were_written_with():
    files = sorted(REPO.glob("results/*/runs/*.parquet"))
    assert files
    written = set().union(*(pq.read_schema(f).names for f in files))
    assert written <= set(COLUMNS)
    folder = files[0].parent.parent  # a results folder, read as a user reads it
    frame = load_runs(folder)
    assert len(frame) == len(list((folder / "runs").glob("*.parquet"))) and list(frame.columns)[:len(COLUMNS)] == \
        list(COLUMNS)
    assert frame["run_id"].str.len().gt(0).all()


def test_a_misspelt_metric_in_the_childs_result_raises():
    with pytest.raises(TypeError, match=r"'sampels_per_s' \(did you mean 'samples_per_s'\?\)"):
        Summary.from_dict({"samples_per_s": 3.0, "sampels_per_s": 3.0})
    assert Summary.from_dict({"samples_per_s": 3.0}).samples_per_s == 3.0


def test_a_misspelt_field_of_the_record_raises_when_it_is_made():
    cfg = tiny_config()
    with pytest.raises(TypeError, match="swep_id"):
        make_record(cfg, {}, "key", "ok", "", Summary(), swep_id="s")
    with pytest.raises(TypeError, match="not_a_metric"):
        RunRecord(run_id="r", status="ok", timestamp="t", **{"not_a_metric": 1.0})


def test_the_record_carries_every_metric_of_the_summary():
    cfg = tiny_config()
    summary = summarize(_measurement(), Extras(peak_main_rss_bytes=1e8, python_threads_in_window=1,
                                               backend_flags="{}"),
                        PerSample(units=1000.0, flops=2e9, peak_flops=1e12), compiled=True)
    summary = dataclasses.replace(summary, gpu_throttle_reasons="thermal (hardware)")
    with pytest.raises(ValueError, match="'not_a_field'"):  # the environment and the record's columns must agree
        make_record(cfg, {"torch_version": "2.x", "not_a_field": 1}, "key", "ok", "", summary)
    record = make_record(cfg, {"torch_version": "2.x"}, "key", "ok", "", summary,
                                 sweep_id="s1", rung=2)
    for name, value in summary.record_fields().items():
        assert getattr(record, name) == value, name
    assert (record.sweep_id, record.rung, record.torch_version, record.status) == ("s1", 2, "2.x", "ok")
    assert record.samples_per_s == pytest.approx(3 * 4 / 0.4) and record.units_per_s == pytest.approx(30_000.0)
    assert record.mfu == pytest.approx(2e9 * 30.0 / 1e12) and record.world_size == 1
    assert record.compile_s == pytest.approx((900.0 + 110.0 - 2 * 110.0) / 1000.0)  # the warm-up's estimate
    assert not hasattr(record, "python_threads_in_window")


def test_compiles_own_timer_beats_the_warm_up_estimate_and_no_compile_has_none():
    m = _measurement()
    assert summarize(m, Extras(compile_s=4.5), PerSample(units=1.0), compiled=True).compile_s == 4.5
    assert summarize(m, Extras(), PerSample(units=1.0), compiled=False).compile_s is None


def test_the_summary_round_trips_through_its_json_form():
    summary = summarize(_measurement(), Extras(cpu_window={"busy_s": 1.0}), PerSample(units=1.0), compiled=False)
    assert Summary.from_dict(summary.to_dict()) == summary


def test_a_fault_fires_on_its_rank_and_step_only():
    debug = DebugConfig(fault="oom", fault_step=3, fault_rank=1)
    assert faults.plan(debug, rank=1) == faults.FaultPlan("oom", nan_step=faults.NEVER, fault_step=3)
    assert faults.plan(debug, rank=0).fault_step == faults.NEVER
    nan = DebugConfig(fault="nan", fault_step=2, slowdown_ms=5.0)
    assert faults.plan(nan) == faults.FaultPlan("nan", nan_step=2, fault_step=faults.NEVER, slowdown_s=0.005)


def test_the_stopping_rule_of_fixed_steps_and_of_auto():
    fixed = stopping.rule_for(tiny_config(measure__steps=7).measure)
    assert fixed == stopping.StoppingRule(steps=7) and math.isinf(fixed.max_s) and math.isinf(fixed.first_check)
    auto = stopping.rule_for(tiny_config(measure__steps="auto", measure__max_steps=50, measure__max_s=9.0).measure)
    assert (auto.steps, auto.auto, auto.max_s, auto.first_check) == (50, True, 9.0, stopping.AUTO_FIRST_CHECK)
    assert auto.satisfied([100.0, 101.0] * 5) and not auto.satisfied([100.0, 110.0] * 5)
