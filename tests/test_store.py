"""The results store: atomic one-file-per-run parquet with one schema, read back in one call."""

import pandas as pd

from harness.store import SCHEMA_VERSION, RunRecord, load_runs, records_from_frame, write_record


def _record(run_id: str, **kw) -> RunRecord:
    return RunRecord(run_id=run_id, status="ok", timestamp="2026-11-21T10:00:00", **kw)


def test_records_round_trip_with_raw_samples_and_empty_fields(tmp_path):
    write_record(_record("a", samples_per_s=12.5, step_ms=[1.0, 2.0, 3.0], gpu_count=0), tmp_path)
    write_record(_record("b", samples_per_s=None, git_dirty=True), tmp_path)
    frame = load_runs(tmp_path)
    assert sorted(frame["run_id"]) == ["a", "b"]
    a = records_from_frame(frame[frame["run_id"] == "a"])[0]
    assert a.samples_per_s == 12.5 and a.step_ms == [1.0, 2.0, 3.0] and a.schema_version == SCHEMA_VERSION
    b = records_from_frame(frame[frame["run_id"] == "b"])[0]
    assert b.samples_per_s is None and b.git_dirty is True and b.step_ms == []


def test_pandas_reads_the_runs_folder_in_one_call(tmp_path):
    for i in range(3):
        write_record(_record(f"r{i}", samples_per_s=float(i)), tmp_path)
    frame = pd.read_parquet(tmp_path / "runs")
    assert sorted(frame["samples_per_s"]) == [0.0, 1.0, 2.0]


def test_writes_leave_no_temporary_files(tmp_path):
    write_record(_record("x"), tmp_path)
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["x.parquet"]


def test_an_empty_store_loads_as_an_empty_frame_with_columns(tmp_path):
    frame = load_runs(tmp_path)
    assert frame.empty and "samples_per_s" in frame.columns


def test_unknown_status_is_refused(tmp_path):
    import pytest

    with pytest.raises(ValueError, match="status 'fine' is not one of"):
        write_record(RunRecord(run_id="z", status="fine", timestamp="t"), tmp_path)
