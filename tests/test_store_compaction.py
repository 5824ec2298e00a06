"""Compaction and narrow reads: every run read exactly once whatever is killed when, old stores unchanged."""

from __future__ import annotations

import fcntl
import importlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness import cli, store
from harness.session import cache
from harness.store import RunRecord, load_runs, write_record
from tests.conftest import REPO

compaction = importlib.import_module("harness.store.compact")  # the module: ``store.compact`` is the function
store_index = importlib.import_module("harness.store.index")


def _record(i: int, **kw) -> RunRecord:
    fields = dict(run_id=f"r{i:04d}", status="ok", timestamp=f"2026-{10 + i % 2:02d}-01T00:00:{i % 60:02d}+0000",
                  sweep_id=f"s{i % 4}", rung=i % 7, samples_per_s=float(i), step_ms=[float(i)] * 60,
                  config_hash=f"h{i % 5}", env_key="e", config_json="{}")
    return RunRecord(**{**fields, **kw})


def _store(path: Path, n: int) -> Path:
    for i in range(n):
        write_record(_record(i), path)
    return path


def _ids(path: Path) -> list[str]:
    return sorted(load_runs(path, columns=["run_id"])["run_id"])


def test_compaction_keeps_every_run_and_readers_see_both_folders(tmp_path):
    _store(tmp_path, 40)
    before = load_runs(tmp_path).sort_values("run_id").reset_index(drop=True)
    done = store.compact(tmp_path)
    assert (done.merged, done.removed, len(done.parts)) == (40, 40, 1)
    assert store.record_files(tmp_path) == [] and store.part_files(tmp_path) == done.parts
    write_record(_record(40), tmp_path)  # a run written after compaction is loose, and read with the rest
    after = load_runs(tmp_path).sort_values("run_id").reset_index(drop=True)
    assert list(after["run_id"]) == [f"r{i:04d}" for i in range(41)]
    pd.testing.assert_frame_equal(after.iloc[:40], before)
    again = store.compact(tmp_path)  # the part is not full: it is rewritten with the new run, one part stays
    assert (again.merged, again.rewritten) == (1, 1) and store.part_files(tmp_path) == again.parts
    assert len(load_runs(tmp_path)) == 41 and store.compact(tmp_path).summary().startswith("nothing to compact")


def test_full_parts_are_sealed_and_never_rewritten(tmp_path, monkeypatch):
    monkeypatch.setattr(compaction, "PART_ROWS", 10)
    _store(tmp_path, 25)
    first = store.compact(tmp_path)
    assert len(first.parts) == 3  # 10 + 10 + 5 rows
    for i in range(25, 30):
        write_record(_record(i), tmp_path)
    second = store.compact(tmp_path)
    assert second.rewritten == 1 and len(second.parts) == 1  # only the part of 5 rows took the 5 new ones
    assert len(store.part_files(tmp_path)) == 3 and _ids(tmp_path) == [f"r{i:04d}" for i in range(30)]


def test_narrow_reads_filter_inside_the_store(tmp_path):
    _store(tmp_path, 40)
    store.compact(tmp_path, min_loose=1)
    write_record(_record(41, sweep_id="s9", timestamp="2026-12-01T00:00:00+0000"), tmp_path)
    latest = load_runs(tmp_path, sweep="latest")
    assert list(latest["run_id"]) == ["r0041"]
    assert sorted(load_runs(tmp_path, sweep="s1")["run_id"]) == [f"r{i:04d}" for i in range(1, 40, 4)]
    few = load_runs(tmp_path, columns=["run_id", "status"], where={"config_hash": "h0", "status": ["ok", "oom"]})
    assert list(few.columns) == ["run_id", "status"] and sorted(few["run_id"]) == [f"r{i:04d}" for i in range(0, 40, 5)]
    with pytest.raises(ValueError, match="unknown sweep 's7'.*Valid choices: s0, s1, s2, s3, s9"):
        load_runs(tmp_path, sweep="s7")
    with pytest.raises(ValueError, match="unknown column 'nope'"):
        load_runs(tmp_path, where={"nope": 1})
    assert load_runs(tmp_path, where={"sweep_id": "none"}).empty


KILLER = """
import importlib, os, signal, sys
from harness import store
point, after = sys.argv[2], int(sys.argv[3])
seen = []
def step(name, **info):
    if name == point:
        seen.append(name)
        if len(seen) == after:
            os.kill(os.getpid(), signal.SIGKILL)
importlib.import_module("harness.store.compact")._compaction_step = step
store.compact(sys.argv[1])
"""


@pytest.mark.parametrize("point, after, loose_left", [
    pytest.param("part-temp-written", 1, 300, marks=pytest.mark.slow),
    pytest.param("part-written", 1, 300, marks=pytest.mark.slow),
    pytest.param("loose-removed", 120, 180, marks=pytest.mark.slow)])
def test_a_compaction_killed_at_any_step_loses_and_duplicates_nothing(tmp_path, point, after, loose_left):
    _store(tmp_path, 300)
    proc = subprocess.run([sys.executable, "-c", KILLER, str(tmp_path), point, str(after)], cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert len(store.record_files(tmp_path)) == loose_left
    temps = list(store.compacted_dir(tmp_path).glob(".tmp-*.parquet"))
    assert len(temps) == (point == "part-temp-written")  # killed between its durable temp file and the rename
    ids = list(load_runs(tmp_path, columns=["run_id"])["run_id"])
    assert sorted(ids) == [f"r{i:04d}" for i in range(300)]  # each run exactly once
    by_key = load_runs(tmp_path, columns=["run_id"], where={"config_hash": "h2"})["run_id"]
    assert sorted(by_key) == [f"r{i:04d}" for i in range(2, 300, 5)]
    text, problems = cli_verify(tmp_path)
    assert problems == 0  # identical copies are leftovers, not problems
    if point == "loose-removed":
        assert "note: 180 run(s) stored twice with identical values" in text  # the loose files not yet removed
    done = store.compact(tmp_path)  # a second compaction finishes the job, and removes the dead temp file
    assert store.record_files(tmp_path) == [] and done.removed == loose_left and done.temps == len(temps)
    assert list(store.compacted_dir(tmp_path).glob(".tmp-*")) == []
    assert _ids(tmp_path) == [f"r{i:04d}" for i in range(300)]
    rows = sum(pq.ParquetFile(p).metadata.num_rows for p in store.part_files(tmp_path))
    assert rows == 300  # merged once: runs already in a part are never merged again
    text, problems = cli_verify(tmp_path)
    assert problems == 0 and "note:" not in text


@pytest.mark.parametrize("point", ["part-written", "part-removed"])
def test_a_compaction_killed_while_rewriting_a_part_loses_and_duplicates_nothing(tmp_path, point):
    _store(tmp_path, 50)
    store.compact(tmp_path)
    for i in range(50, 100):
        write_record(_record(i), tmp_path)
    proc = subprocess.run([sys.executable, "-c", KILLER, str(tmp_path), point, "1"], cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert len(store.part_files(tmp_path)) == (2 if point == "part-written" else 1)  # old part gone only after
    assert _ids(tmp_path) == [f"r{i:04d}" for i in range(100)] and cli_verify(tmp_path)[1] == 0
    assert sorted(load_runs(tmp_path, columns=["run_id"], where={"config_hash": "h1"})["run_id"]) == \
        [f"r{i:04d}" for i in range(1, 100, 5)]
    store.compact(tmp_path)
    assert store.record_files(tmp_path) == [] and len(store.part_files(tmp_path)) == 1
    assert pq.ParquetFile(store.part_files(tmp_path)[0]).metadata.num_rows == 100


def cli_verify(path: Path) -> tuple[str, int]:
    from harness.commands import store as store_cli

    text, problems = store_cli.verify(str(path))
    return text, len(problems)


def test_a_second_compactor_waits_or_skips(tmp_path, capsys):
    _store(tmp_path, 5)
    fd = os.open(tmp_path / store.LOCK_NAME, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert store.compact(tmp_path, wait=False).busy
        assert store.maybe_compact(tmp_path, threshold=5).busy
        assert cli.main(["store", "compact", "--results", str(tmp_path), "--no-wait"]) == 0
        assert "another compaction is running; skipped" in capsys.readouterr().out
        assert len(store.record_files(tmp_path)) == 5
    finally:
        os.close(fd)
    assert store.maybe_compact(tmp_path, threshold=6) is None  # below the threshold: nothing, not even the lock
    assert store.maybe_compact(tmp_path, threshold=5).merged == 5


def test_runs_written_during_compaction_are_kept(tmp_path):
    _store(tmp_path, 100)
    stop = threading.Event()

    def writer():
        for i in range(100, 400):
            write_record(_record(i), tmp_path)
        stop.set()

    thread = threading.Thread(target=writer)
    thread.start()
    seen: set[str] = set()
    while not stop.is_set():
        store.compact(tmp_path)
        ids = _ids(tmp_path)
        assert len(set(ids)) == len(ids) and seen <= set(ids)  # never twice, never lost once seen
        seen = set(ids)
    thread.join()
    store.compact(tmp_path)
    assert _ids(tmp_path) == [f"r{i:04d}" for i in range(400)] and store.record_files(tmp_path) == []


def test_a_reader_racing_a_compaction_still_sees_every_run(tmp_path, monkeypatch):
    """The reader lists runs/, then a compaction moves them all into a part before the reader lists compacted/."""
    _store(tmp_path, 30)
    real = store.part_files
    raced = []

    def part_files_after_a_compaction(results_dir):
        if not raced:
            raced.append(None)
            raced[0] = store.compact(tmp_path)  # compaction lists the parts with its own, real part_files
        return real(results_dir)

    monkeypatch.setattr(store_index, "part_files", part_files_after_a_compaction)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a vanished loose file is not "unreadable"
        assert _ids(tmp_path) == [f"r{i:04d}" for i in range(30)]
    assert raced[0].removed == 30


def test_committed_old_schema_results_read_the_same_before_and_after_compaction(tmp_path, capsys):
    committed = REPO / "results" / "cpu-2core"
    frame = load_runs(committed)
    assert len(frame) == 16 and set(frame["schema_version"]) == {1}
    assert cli.main(["table", "--results", str(committed)]) == 0
    table_before = " ".join(capsys.readouterr().out.replace(str(committed), "FOLDER").split())  # its notes name it
    copy = tmp_path / "cpu-2core"
    shutil.copytree(committed / "runs", copy / "runs")
    assert store.compact(copy).merged == 16
    after = load_runs(copy)
    key = ["run_id"]
    pd.testing.assert_frame_equal(after.sort_values(key).reset_index(drop=True),
                                  frame.sort_values(key).reset_index(drop=True))
    assert cli.main(["table", "--results", str(copy)]) == 0
    assert " ".join(capsys.readouterr().out.replace(str(copy), "FOLDER").split()) == table_before


def test_columns_newer_than_this_code_survive_compaction(tmp_path):
    """A store shared with a newer harness: compaction must not drop the columns this code does not know."""
    write_record(_record(0), tmp_path)
    write_record(_record(2), tmp_path / "newer")  # same month: one part
    newer = pq.read_table(store.record_files(tmp_path / "newer")[0]).append_column("vram_reserved_bytes",
                                                                                   pa.array([5.0]))
    pq.write_table(newer, store.runs_dir(tmp_path) / "r0002.parquet")
    store.compact(tmp_path)
    part = pq.read_table(store.part_files(tmp_path)[0]).sort_by("run_id")
    assert part.column("run_id").to_pylist() == ["r0000", "r0002"]
    assert part.column("vram_reserved_bytes").to_pylist() == [None, 5.0]
    assert _ids(tmp_path) == ["r0000", "r0002"]


def test_verify_and_info_report_problems_and_facts(tmp_path, capsys):
    _store(tmp_path, 8)
    store.compact(tmp_path)
    assert cli.main(["store", "info", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "runs:            8 (0 outside any sweep)" in out and "sweeps:          4" in out
    assert "loose files:     0" in out and "compacted files: 1" in out
    assert "oldest, newest:  2026-10-01T00:00:00+0000, 2026-11-01T00:00:07+0000" in out
    assert cli.main(["store", "verify", "--results", str(tmp_path)]) == 0
    write_record(_record(3, samples_per_s=99.0), tmp_path)  # same run_id, other values: a real conflict
    (store.runs_dir(tmp_path) / "broken.parquet").write_bytes(b"not parquet")
    assert cli.main(["store", "verify", "--results", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "problem: unreadable:" in out and "broken.parquet" in out
    assert "problem: run_id 'r0003' is stored 2 times with different values" in out and "2 problem(s) found" in out
    assert f"schema versions: {store.SCHEMA_VERSION} (9 rows)" in out
    done = store.compact(tmp_path)
    assert done.conflicts and done.unreadable and done.merged == 0  # both left in place, named
    assert cli.main(["store", "verify", "--results", str(tmp_path / "missing")]) == 2
    assert cli.main(["store", "vacuum", "--results", str(tmp_path)]) == 2
    assert "unknown store action 'vacuum'" in capsys.readouterr().err


def test_the_cache_lookup_reads_the_same_run_as_a_full_scan(tmp_path):
    for i in range(12):
        write_record(_record(i, config_hash="h", timestamp=f"2026-11-01T00:00:{i:02d}+0000",
                             cached_from="x" if i == 11 else "",
                             config_json='{"debug": {"fault": "hang"}}' if i == 10 else "{}"), tmp_path)
    store.compact(tmp_path)
    write_record(_record(20, config_hash="h", timestamp="2026-11-01T00:00:30+0000", env_key="other"), tmp_path)
    used = {"r0009"}
    found = cache.lookup_cached(str(tmp_path), "h", "e", used)
    assert found == cache.find_cached(load_runs(tmp_path), "h", "e", used)
    assert found.run_id == "r0008" and found.step_ms == [8.0] * 60  # newest not used, not debug, not a copy
    assert cache.lookup_cached(str(tmp_path), "h", "nope", set()) is None


def test_a_sweep_compacts_the_store_at_its_end_past_the_threshold(tmp_path, monkeypatch, capsys):
    from harness.sweeps import loop

    monkeypatch.setattr(compaction, "AUTO_COMPACT_LOOSE", 6)
    _store(tmp_path, 5)
    loop.auto_compact(str(tmp_path))
    assert len(store.record_files(tmp_path)) == 5 and capsys.readouterr().out == ""  # below: nothing
    write_record(_record(5), tmp_path)
    loop.auto_compact(str(tmp_path))
    assert store.record_files(tmp_path) == [] and "store: compacted 6 loose runs into 1 part file(s)" in \
        capsys.readouterr().out


def test_compaction_removes_the_temp_files_of_killed_compactions_and_leaves_writers_alone(tmp_path):
    _store(tmp_path, 5)
    store.compact(tmp_path)
    dead = store.compacted_dir(tmp_path) / ".tmp-killed.parquet"
    dead.write_bytes(b"PAR1 half a part")
    writing = store.runs_dir(tmp_path) / ".tmp-writing.parquet"  # a writer's: writers never take the lock
    writing.write_bytes(b"PAR1 half a record")
    assert "1 temp file(s) of an interrupted compaction" in cli_verify(tmp_path)[0]
    done = store.compact(tmp_path)
    assert done.temps == 1 and not dead.exists() and writing.exists()
    assert done.summary() == ("nothing to compact: no loose run files; removed 1 temp file(s) of an interrupted "
                              "compaction")
    assert _ids(tmp_path) == [f"r{i:04d}" for i in range(5)]


def _old_index_files(path: Path) -> list[Path]:
    """What an older version wrote beside each part: compacted/_index/<part>.keys.parquet (and a killed temp)."""
    folder = store.compacted_dir(path) / "_index"
    folder.mkdir()
    made = []
    for part in store.part_files(path):
        made.append(folder / f"{Path(part).stem}.keys.parquet")
        pq.write_table(pq.read_table(part, columns=["run_id", "sweep_id", "config_hash"]), made[-1])
    made.append(folder / ".tmp-index.parquet")
    made[-1].write_bytes(b"PAR1 half an index")
    return made


def test_an_old_store_with_key_indexes_reads_the_same_and_compaction_removes_them(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(compaction, "PART_ROWS", 20)
    _store(tmp_path, 50)
    store.compact(tmp_path)
    write_record(_record(50), tmp_path)

    def answers():
        return (load_runs(tmp_path).sort_values("run_id").reset_index(drop=True),
                store.resolve_sweep(tmp_path, "latest"),
                sorted(load_runs(tmp_path, where={"config_hash": "h2"})["run_id"]))

    before = answers()
    made = _old_index_files(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing in _index/ is read, so nothing is unreadable
        after = answers()
    pd.testing.assert_frame_equal(after[0], before[0])
    assert after[1:] == before[1:] and len(after[0]) == 51
    text, problems = cli_verify(tmp_path)
    assert problems == 0 and "note: 4 key index file(s) of an older version" in text and "removes them" in text
    assert cli.main(["store", "compact", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.strip().endswith("; removed 4 key index file(s) of an older version (no longer read)")
    assert not any(p.exists() for p in made) and not (store.compacted_dir(tmp_path) / "_index").exists()
    assert _ids(tmp_path) == [f"r{i:04d}" for i in range(51)] and "note:" not in cli_verify(tmp_path)[0]


def test_latest_is_the_sweep_of_the_newest_record_ties_to_the_greatest_id(tmp_path):
    _store(tmp_path, 40)
    store.compact(tmp_path)
    assert store.resolve_sweep(tmp_path, "latest") == "s3"  # r0039, in November, the newest
    write_record(_record(50, sweep_id="", timestamp="2027-01-01T00:00:00+0000"), tmp_path)  # a plain run: no sweep
    write_record(_record(51, sweep_id="a-tie", timestamp="2026-11-01T00:00:39+0000"), tmp_path)  # ties r0039
    write_record(_record(52, sweep_id="z-tie", timestamp="2026-11-01T00:00:39+0000"), tmp_path)
    assert store.resolve_sweep(tmp_path, "latest") == "z-tie" == store.resolve_sweep_id(load_runs(tmp_path), "latest")
    assert list(load_runs(tmp_path, sweep="latest")["run_id"]) == ["r0052"]
    assert store.resolve_sweep(tmp_path, "s1") == "s1"
    with pytest.raises(ValueError, match="unknown sweep 's777'"):
        store.resolve_sweep(tmp_path, "s777")


def test_a_table_reads_the_newest_calibration_of_its_environment(tmp_path):
    from harness.analysis.stats import noise_model

    def cal(i: int, env: str, status: str = "ok") -> RunRecord:
        return RunRecord(run_id=f"c{i:03d}", status=status, timestamp=f"2026-11-01T{i // 10:02d}:{i % 10:02d}:00+0000",
                         sweep_id=f"cal-{i // 5:02d}", ladder="noise", env_key=env, device="cpu", cpu_model="EPYC",
                         cpu_count=2, samples_per_s=100.0 + i % 7)

    for i in range(40):  # four calibration sweeps an environment; the newest of env e (cal-05) failed
        write_record(cal(i, ("e", "other")[i // 10 % 2], "error" if 25 <= i < 30 else "ok"), tmp_path)
    store.compact(tmp_path)
    for i in range(3):
        write_record(_record(500 + i, sweep_id="shown", timestamp=f"2026-12-01T00:00:0{i}+0000", device="cpu",
                             cpu_model="EPYC", cpu_count=2), tmp_path)
    assert store.newest_ok_sweeps(tmp_path, "noise") == {"e": "cal-04", "other": "cal-07"}
    frame = load_runs(tmp_path, sweep="latest")
    chosen = noise_model.with_calibrations(tmp_path, frame)
    assert set(chosen["sweep_id"]) == {"shown", "cal-04"}  # the newest ok calibration of env e, nothing else
    everything = pd.concat([frame, load_runs(tmp_path, where={"ladder": "noise"})], ignore_index=True)
    assert noise_model.noise_for(chosen, frame) == noise_model.noise_for(everything, frame)
    assert noise_model.noise_for(chosen, frame).sweep_id == "cal-04"
