"""A sweep run again over its measurements: its copies are a few columns in one file per sweep, read back whole; the
store is read a bounded number of times, however many re-runs have piled up."""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from harness import cli, store
from harness.analysis.views import table as table_mod
from harness.run.parent import runner
from harness.run.parent import env as env_mod
from harness.store import COPY_COLUMNS, RunRecord, load_runs, store_copy, write_record
from harness.store import copy_of
from harness.sweeps import loop
from harness.sweeps import rungs as rungs_mod
from tests.conftest import REPO
from tests.test_store_compaction import KILLER
from tests.test_sweep_rounds import CLEAR, PHASE2, Display, FakeMeasure

store_index = importlib.import_module("harness.store.index")


def _sweep(results: Path, sweep_id: str) -> None:
    ctx = rungs_mod.SweepContext(sweep_id=sweep_id, ladder=PHASE2, settings={"results_dir": str(results)},
                                 user_keys=frozenset(), repeats=2)
    assert loop.run_ladder(ctx, runner.Machine(cuda_available=False), Display()) == 0


def _files(results: Path) -> list[str]:
    return sorted(p.relative_to(results).as_posix() for p in results.rglob("*.parquet"))


@pytest.fixture
def measured(tmp_path, monkeypatch) -> FakeMeasure:
    """Sweep "a" of phase2, two rounds, measured (fake runs, real store and cache)."""
    measure = FakeMeasure(CLEAR)
    monkeypatch.setattr(runner, "store_asked", measure)
    monkeypatch.setattr(env_mod, "environment", lambda device, git=True: ({}, "env"))
    monkeypatch.setattr(env_mod, "environment_key", lambda device: "env")
    _sweep(tmp_path, "a")
    return measure


def test_cached_reruns_store_one_small_file_each_and_read_back_whole(tmp_path, measured, capsys):
    measured_files = _files(tmp_path)
    assert len(measured_files) == 8 and all(f.startswith("runs/") for f in measured_files)
    for sweep_id in ("b", "c"):
        _sweep(tmp_path, sweep_id)
    assert len(measured.calls) == 8  # nothing measured again
    assert _files(tmp_path) == ["copies/b.parquet", "copies/c.parquet"] + measured_files  # no run file added
    assert len(pq.read_table(store.runs_dir(tmp_path))) == 8  # no run row added
    kept = pq.read_table(store.copies_dir(tmp_path) / "b.parquet")
    assert kept.num_rows == 8 and kept.column_names == list(COPY_COLUMNS)  # no step times, no config_json
    originals = load_runs(tmp_path, where={"sweep_id": "a"}).set_index("run_id")
    for sweep_id in ("b", "c"):
        copies = load_runs(tmp_path, sweep=sweep_id)
        assert len(copies) == 8 and sorted(copies["cached_from"]) == sorted(originals.index)
        for _, copy in copies.iterrows():
            original = originals.loc[copy["cached_from"]]
            assert copy["run_id"] not in originals.index and copy["sweep_id"] == sweep_id
            assert (copy["rung"], copy["change"]) == (original["rung"], original["change"])
            assert (copy["samples_per_s"], copy["config_hash"], copy["env_key"], copy["workload"]) == (
                original["samples_per_s"], original["config_hash"], original["env_key"], original["workload"])
    by_workload = load_runs(tmp_path, columns=["run_id"], where={"workload": "unet3d", "sweep_id": ["b", "c"]})
    assert len(by_workload) == 16  # a filter on a column only the originals hold finds the copies too
    table = table_mod.load_table(str(tmp_path), "c")
    assert [row.how for row in table.rows] == ["cached"] * 4
    assert any("rounds 0, 1 from sweep a" in note for note in table.notes)
    assert load_runs(tmp_path, sweep="latest")["sweep_id"].unique().tolist() == ["c"]
    before = load_runs(tmp_path).sort_values("run_id").reset_index(drop=True)
    done = store.compact(tmp_path)  # the runs into a part, the two sweeps' copies into one part of copies
    assert store.record_files(tmp_path) == [] and store.sweep_copy_files(tmp_path) == []
    assert [Path(p).parent.name for p in store.copy_files(tmp_path)] == ["compacted"] and done.copy_files == 2
    after = load_runs(tmp_path).sort_values("run_id").reset_index(drop=True)
    assert len(after) == 24 and after.drop(columns=["step_ms"]).equals(before.drop(columns=["step_ms"]))
    capsys.readouterr()
    assert cli.main(["store", "verify", "--results", str(tmp_path)]) == 0
    assert cli.main(["store", "info", "--results", str(tmp_path)]) == 0
    assert "copies:          16 runs copied from the store by sweeps, 1 files in" in capsys.readouterr().out


def test_a_copy_after_compaction_starts_its_sweep_s_file_anew_and_the_next_compaction_merges_it(tmp_path, measured):
    for sweep_id in ("b", "c"):
        _sweep(tmp_path, sweep_id)
    store.compact(tmp_path)
    _sweep(tmp_path, "d")  # copies again, into a file of its own beside the part
    assert [Path(p).name for p in store.sweep_copy_files(tmp_path)] == ["d.parquet"]
    done = store.compact(tmp_path)
    assert done.copy_files == 1 and len(done.copy_parts) == 1 and store.sweep_copy_files(tmp_path) == []
    assert done.summary() == "merged the copies of 1 sweep file(s) into 1 part file(s); no loose run files"
    (part,) = store.copy_files(tmp_path)  # the part with room was merged with it: one part, each copy once
    assert pq.ParquetFile(part).metadata.num_rows == 24
    for sweep_id in ("b", "c", "d"):
        assert [row.how for row in table_mod.load_table(str(tmp_path), sweep_id).rows] == ["cached"] * 4
    assert len(measured.calls) == 8


def test_a_copy_waits_for_a_compaction_of_copies_and_is_kept(tmp_path):
    write_record(RunRecord(run_id="orig", status="ok", sweep_id="a", timestamp="2026-01-01T00:00:00+0000"), tmp_path)
    copy = RunRecord(run_id="copy1", status="ok", sweep_id="b", cached_from="orig",
                     timestamp="2026-01-01T00:01:00+0000")
    with store.copies_locked(tmp_path):  # a compaction merging copies holds this
        writer = threading.Thread(target=store_copy, args=(copy, tmp_path))
        writer.start()
        writer.join(0.5)
        assert writer.is_alive() and store.sweep_copy_files(tmp_path) == []  # waiting, nothing written yet
    writer.join(10)
    assert list(load_runs(tmp_path, sweep="b")["cached_from"]) == ["orig"]


def _files_read(monkeypatch, reader: str) -> list[list[str]]:
    """The lists of files each call of ``harness.store.index``'s ``reader`` was handed, from now on."""
    real = getattr(store_index, reader)
    scans: list[list[str]] = []

    def counting(files, *args, **kwargs):
        scans.append(list(files))
        return real(files, *args, **kwargs)

    monkeypatch.setattr(store_index, reader, counting)
    return scans


def test_a_cached_sweep_reads_each_stored_file_once_however_many_reruns_piled_up(tmp_path, measured, monkeypatch):
    scans = _files_read(monkeypatch, "scan")
    stored = set(store.record_files(tmp_path))
    per_sweep = []
    for sweep_id in ("b", "c", "d"):
        store_index.forget()  # a fresh process, as each `python -m harness sweep` is
        scans.clear()
        _sweep(tmp_path, sweep_id)
        per_sweep.append([files for files in scans])
    for seen in per_sweep:
        whole = [files for files in seen if stored <= set(files)]
        assert len(whole) == 1  # the snapshot of the short columns; nothing else reads every run file
        runs_read = sum(len(set(files) & stored) for files in seen)
        assert runs_read <= len(stored) + 8 + 1  # then each copied run's original, alone (and the first once more)
        assert len(seen) <= 1 + 1 + 2 * 8  # snapshot, earlier sweeps' copies, per copy: its original, its file again
    assert len(per_sweep[2]) == len(per_sweep[1])  # a third re-run reads the store no more than the second


def test_a_sweep_reads_back_no_file_it_wrote_and_reads_its_sources_runs_in_one_read(tmp_path, measured, monkeypatch):
    scans = _files_read(monkeypatch, "_scan")
    stored = store.record_files(tmp_path)
    store_index.forget()  # a fresh process, as each `python -m harness sweep` is
    _sweep(tmp_path, "b")
    (copies,) = store.sweep_copy_files(tmp_path)
    assert not any(copies in files for files in scans)  # rewritten a rung (8 times), never read back
    whole_reads = [files for files in scans if set(files) & set(stored)]
    assert sorted(whole_reads[1]) == sorted(stored)  # the short columns, then every run of sweep "a" in one read
    assert len(whole_reads) == 2
    snap = store_index.snapshot(tmp_path)
    store_index.forget()  # what it kept of its own writes is what a fresh process reads from the files
    fresh = store_index.snapshot(tmp_path)
    assert snap.keys.equals(fresh.keys) and snap.copies.equals(fresh.copies) and snap.files == fresh.files
    scans.clear()
    other = pq.read_table(copies)  # another process rewrites the file: this process reads it again
    pq.write_table(other.slice(0, 4), copies)
    assert len(load_runs(tmp_path, sweep="b")) == 4 and any(copies in files for files in scans)


def test_the_stores_snapshot_holds_each_of_its_tables_in_one_chunk_however_many_files_piled_up(tmp_path, measured):
    # one chunk per file made every filter on the snapshot (a cached sweep makes some 60) slower with each file
    for sweep_id in ("b", "c", "d"):
        _sweep(tmp_path, sweep_id)
    store_index.forget()
    snap = store_index.snapshot(tmp_path)
    assert len(snap.files) == 8 and len(snap.copy_files) == 3
    assert snap.rows.num_rows == 8 and snap.copies.num_rows == 3 * 8 and snap.keys.num_rows == 4 * 8
    assert {c.num_chunks for t in (snap.rows, snap.copies, snap.keys) for c in t.columns} == {1}
    assert len(load_runs(tmp_path, where={"sweep_id": "c"})) == 8  # read back as before


def test_a_copy_whose_file_cannot_be_written_is_stored_whole(tmp_path, capsys):
    original = RunRecord(run_id="o", status="ok", timestamp="2026-11-24T10:00:00+0000", sweep_id="a",
                         samples_per_s=3.0, step_ms=[1.0, 2.0])
    write_record(original, tmp_path)
    copy = copy_of(original, sweep_id="b", rung=0, round=0)
    store.copies_dir(tmp_path).mkdir()
    (store.copies_dir(tmp_path) / "b.parquet").write_bytes(b"not parquet")  # a damaged file of copies
    with pytest.warns(store.UnreadableRecord, match="b.parquet"):
        store_copy(copy, tmp_path)
        got = load_runs(tmp_path, where={"sweep_id": "b"})
    assert (store.runs_dir(tmp_path) / f"{copy.run_id}.parquet").exists()  # whole, as a run: nothing is lost
    assert got["cached_from"].tolist() == ["o"] and list(got["step_ms"].iloc[0]) == [1.0, 2.0]
    with pytest.raises(ValueError, match="sets only the store's COPY_COLUMNS; not samples_per_s"):
        copy_of(original, samples_per_s=9.0)
    with pytest.raises(ValueError, match="is no copy"):
        store_copy(original, tmp_path)


def test_verify_names_a_copy_whose_original_is_gone(tmp_path, capsys):
    original = RunRecord(run_id="o", status="ok", timestamp="2026-11-24T10:00:00+0000", sweep_id="a")
    path = write_record(original, tmp_path)
    store_copy(copy_of(original, sweep_id="b"), tmp_path)
    assert len(load_runs(tmp_path, sweep="b")) == 1
    path.unlink()
    assert cli.main(["store", "verify", "--results", str(tmp_path)]) == 1
    assert "names run 'o', which is not in the store" in capsys.readouterr().out
    assert load_runs(tmp_path).empty  # the copy is left out with its original


def test_a_copies_compaction_killed_after_its_part_reads_each_copy_once_and_the_next_cleans_up(tmp_path, measured):
    for sweep_id in ("b", "c"):
        _sweep(tmp_path, sweep_id)
    before = load_runs(tmp_path, columns=["run_id", "sweep_id", "cached_from"]).sort_values("run_id")
    proc = subprocess.run([sys.executable, "-c", KILLER, str(tmp_path), "copies-part-written", "1"], cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert len(store.sweep_copy_files(tmp_path)) == 2 and len(store.copy_files(tmp_path)) == 3  # both places
    after = load_runs(tmp_path, columns=["run_id", "sweep_id", "cached_from"]).sort_values("run_id")
    assert after.reset_index(drop=True).equals(before.reset_index(drop=True))  # each copy once
    assert [row.how for row in table_mod.load_table(str(tmp_path), "c").rows] == ["cached"] * 4
    assert cli.main(["store", "verify", "--results", str(tmp_path)]) == 0
    store.compact(tmp_path)
    (part,) = store.copy_files(tmp_path)
    assert pq.ParquetFile(part).metadata.num_rows == 16


def test_an_unreadable_file_of_copies_is_left_in_place_by_compaction_and_named_by_verify(tmp_path, measured, capsys):
    _sweep(tmp_path, "b")
    bad = store.copies_dir(tmp_path) / "broken.parquet"
    bad.write_bytes(b"not parquet")
    done = store.compact(tmp_path)
    assert done.copy_files == 1 and bad.exists()  # sweep b's file merged, the damaged one untouched
    with pytest.warns(store.UnreadableRecord, match="broken.parquet"):  # readers skip it, saying so
        assert [row.how for row in table_mod.load_table(str(tmp_path), "b").rows] == ["cached"] * 4
    capsys.readouterr()
    assert cli.main(["store", "verify", "--results", str(tmp_path)]) == 1
    assert f"unreadable: {bad}" in capsys.readouterr().out
