"""The results store: atomic one-file-per-run parquet with one schema, read back in one call."""

import json
import math
import os
import shlex
import subprocess
import sys
import warnings
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from harness import cli, store
from harness.store import (SCHEMA_VERSION, RunRecord, UnreadableRecord, load_records, load_runs, records_from_frame,
                           store_record, write_record)
from tests.conftest import REPO, harness_cli


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


# ------------------------------------------------------------------------------------------
# unreadable files: one warning each per process


def _one_good_one_truncated(results) -> Path:
    write_record(_record("good", sweep_id="s", ladder="l", rung=0, round=0, change="", workload="unet3d", size="smoke",
                         device="cpu", cpu_model="test CPU", cpu_count=2, samples_per_s=10.0), results)
    good = (results / "runs" / "good.parquet").read_bytes()
    bad = results / "runs" / "truncated.parquet"
    bad.write_bytes(good[: len(good) // 2])
    return bad


def test_an_unreadable_record_is_warned_about_once_per_process(tmp_path, capsys):
    bad = _one_good_one_truncated(tmp_path)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(3):  # a cached sweep reads the store once per rung
            assert list(load_runs(tmp_path)["run_id"]) == ["good"]
        assert [r.run_id for r in load_records(tmp_path, where={"sweep_id": "s"})] == ["good"]
        assert cli.main(["table", "--results", str(tmp_path), "--sweep", "s"]) == 0
    messages = [str(w.message) for w in seen if issubclass(w.category, UnreadableRecord)]
    assert len(messages) == 1 and str(bad) in messages[0]
    bad.write_bytes(b"PAR1 another broken copy")  # a different file now: named again
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        load_runs(tmp_path)
        load_runs(tmp_path)
    assert len([w for w in seen if issubclass(w.category, UnreadableRecord)]) == 1
    write_record(_record("truncated", sweep_id="s"), tmp_path)  # copied again whole: read again
    assert sorted(load_runs(tmp_path)["run_id"]) == ["good", "truncated"]


def test_one_command_names_an_unreadable_record_in_one_line(tmp_path):
    _one_good_one_truncated(tmp_path)
    proc = harness_cli("table", "--results", str(tmp_path), "--sweep", "latest")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("warning: skipped unreadable record") == 1 and "Traceback" not in proc.stderr


# ------------------------------------------------------------------------------------------
# a reader that stops early


def test_store_info_into_a_closed_pipe_ends_quietly(tmp_path):
    for i in range(3):
        write_record(_record(f"r{i}", sweep_id="s"), tmp_path)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "harness", "store", "info", "--results", str(tmp_path)], cwd=REPO,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # as `| head` that has read enough: closed long before the command prints
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0
    assert "Traceback" not in err and "BrokenPipeError" not in err and "Exception ignored" not in err, err


# ------------------------------------------------------------------------------------------
# store import: a refused record put back


def _full_record(run_id: str = "20261121-100000000000-abcd0123") -> RunRecord:
    return RunRecord(run_id=run_id, status="ok", timestamp="2026-11-21T10:00:00+0000", sweep_id="s", ladder="l",
                     rung=2, samples_per_s=12.5, step_ms=[1.0, 2.5], git_dirty=False, gpu_count=0,
                     config_json='{"note": "it\'s quoted"}')


def test_a_fallback_file_is_imported_read_back_and_not_twice(tmp_path, capsys):
    record = _full_record()
    saved = write_record(record, tmp_path / "fallback")  # as store_record saves it when the store refuses it
    results = tmp_path / "results"
    results.mkdir()
    assert cli.main(["store", "import", str(saved), "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert f"imported 1 run(s) into {results / 'runs' / saved.name}, read back equal; {saved} can be deleted" in out
    assert load_records(results) == [record]
    assert cli.main(["store", "import", str(saved), "--results", str(results)]) == 0
    assert f"imported nothing; already in the store with the same values: {record.run_id}" in capsys.readouterr().out
    assert len(list((results / "runs").iterdir())) == 1


def test_the_json_a_failed_write_prints_runs_as_printed_and_puts_the_record_back(tmp_path, monkeypatch, capsys):
    from harness.store import write

    results = tmp_path / "results"
    results.mkdir()
    record = _full_record()
    lines = []
    with monkeypatch.context() as patch:
        patch.setattr(write, "write_record", lambda record, folder: (_ for _ in ()).throw(OSError(28, "No space")))
        assert store_record(record, results, log=lines.append) is None
    command = shlex.split(lines[0].splitlines()[-1])
    assert command[:5] == ["python", "-m", "harness", "store", "import"] and command[-2:] == ["--results", str(results)]
    assert cli.main(command[3:]) == 0
    assert load_records(results) == [record]
    (tmp_path / "record.json").write_text(command[5])  # the JSON saved to a file imports too
    assert cli.main(["store", "import", str(tmp_path / "record.json"), "--results", str(results)]) == 0
    assert "already in the store with the same values" in capsys.readouterr().out


def test_a_record_with_nan_among_its_step_times_imports_and_compares_equal(tmp_path):
    record = _full_record()
    record.step_ms, record.loss_last = [1.5, float("nan")], float("nan")  # a diverged run keeps its NaN
    text = json.dumps(asdict(record))
    assert len(store.import_record(text, tmp_path).written) == 1  # read back equal: NaN equals NaN
    assert store.import_record(text, tmp_path).already == [record.run_id]  # not "other values"
    back = load_records(tmp_path)[0]
    assert back.step_ms[0] == 1.5 and math.isnan(back.step_ms[1])


def test_a_newer_harness_column_survives_an_import(tmp_path):
    saved = write_record(_full_record(), tmp_path / "fallback")
    pq.write_table(pq.read_table(saved).append_column("vram_fragmentation", pa.array([0.25])), saved)
    assert store.import_record(str(saved), tmp_path).written == [str(tmp_path / "runs" / saved.name)]
    assert pq.read_table(tmp_path / "runs" / saved.name).column("vram_fragmentation").to_pylist() == [0.25]


def _bad_imports(tmp_path: Path) -> list[tuple[list[str], str]]:
    good = json.loads(json.dumps(asdict(_full_record())))
    (tmp_path / "text.txt").write_text("hello")
    (tmp_path / "broken.parquet").write_bytes(b"PAR1 not really")
    pq.write_table(pa.table({"x": [1]}), tmp_path / "other.parquet")
    return [
        (["nope.parquet"], "no such file, and not a record's JSON: 'nope.parquet'"),
        ([str(tmp_path / "text.txt")], "is neither parquet nor JSON"),
        ([str(tmp_path / "broken.parquet")], "is not a readable record"),
        ([str(tmp_path / "other.parquet")], "is not a run record: no run_id, status, timestamp column"),
        ([str(tmp_path)], "is a folder; give one of its record files"),
        ([json.dumps({**good, "speed": 1})], "has fields that are not record columns: speed"),
        ([json.dumps({**good, "status": "fine"})], "has status 'fine' for run '20261121-100000000000-abcd0123'; "
                                                   "valid choices: ok, oom, nan, timeout, error, skipped"),
        ([json.dumps({**good, "samples_per_s": "fast"})], "field 'samples_per_s' of the JSON given is 'fast', not a "
                                                          "number or null"),
        ([json.dumps({**good, "run_id": "../up"})], "has run_id '../up', which cannot name a record file"),
        ([json.dumps({**good, "samples_per_s": 99.0})], "is already in"),  # the store holds it with other values
        ([], "store import needs the record to put back"),
    ]


def test_a_bad_import_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys):
    results, inputs = tmp_path / "results", tmp_path / "inputs"
    results.mkdir()
    inputs.mkdir()
    store.import_record(json.dumps(asdict(_full_record())), results)  # the same run_id with other values clashes
    before = sorted(p.name for p in (results / "runs").iterdir())
    for args, message in _bad_imports(inputs):
        assert cli.main(["store", "import", *args, "--results", str(results)]) == 2, args
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1 and "Traceback" not in err, (args, err)
    assert sorted(p.name for p in (results / "runs").iterdir()) == before


def test_store_actions_are_named_when_one_is_unknown(tmp_path, capsys):
    assert cli.main(["store", "reindex", "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == "error: unknown store action 'reindex'. Valid choices: compact, import, info, verify\n"
    assert cli.main(["store", "--results", str(tmp_path)]) == 2
    assert capsys.readouterr().err == "error: store needs an action; valid choices: compact, import, info, verify\n"
    assert cli.main(["store", "info", "extra", "--results", str(tmp_path)]) == 2
    assert "store info takes no argument, got 'extra'" in capsys.readouterr().err


def test_a_process_reading_the_same_records_again_sees_a_file_rewritten_and_one_added(tmp_path):
    """Whole records read with a filter come from the files kept in the process, joined once per set of files: a
    record file rewritten (another value) or added since is what the next read gives."""
    for i in range(3):
        write_record(_record(f"r{i}", sweep_id="s", samples_per_s=float(i)), tmp_path)
    def read():
        frame = load_runs(tmp_path, where={"sweep_id": "s"})
        return sorted(zip(frame["run_id"], frame["samples_per_s"]))

    assert read() == read() == [("r0", 0.0), ("r1", 1.0), ("r2", 2.0)]
    path = next(p for p in store.record_files(tmp_path) if "r1" in pq.read_table(p)["run_id"].to_pylist())
    before = os.stat(path)
    table = pq.read_table(path)
    pq.write_table(table.set_column(table.schema.get_field_index("samples_per_s"), "samples_per_s",
                                    pa.array([10.0])), path)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000))  # a new mtime, however coarse the clock
    assert read() == [("r0", 0.0), ("r1", 10.0), ("r2", 2.0)]
    write_record(_record("r3", sweep_id="s", samples_per_s=3.0), tmp_path)
    assert read() == [("r0", 0.0), ("r1", 10.0), ("r2", 2.0), ("r3", 3.0)]
