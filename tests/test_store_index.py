"""Key indexes of compacted parts: the same answers as a full scan, a fallback for every broken index."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pandas as pd
import pytest

from harness import cli, store
from harness.commands import store as store_cli
from harness.store import RunRecord, load_runs, write_record
from harness.sweeps import rungs as sweep

ENVS = ("e", "other")


def _record(i: int, **kw) -> RunRecord:
    """Run i: config h{i % 3} in env e (every 7th in env "other"), a debug run every 11th, a cached copy every
    13th, an error every 9th; sweeps of 6 runs with increasing timestamps."""
    fields = dict(run_id=f"r{i:04d}", status="error" if i % 9 == 4 else "ok",
                  timestamp=f"2026-11-{1 + i // 60:02d}T00:{i % 60:02d}:00+0000", sweep_id=f"s{i // 6:03d}",
                  rung=i % 6, config_hash=f"h{i % 3}", env_key=ENVS[i % 7 == 5], cached_from="x" if i % 13 == 6 else "",
                  config_json=json.dumps({"debug": {"fault": "hang" if i % 11 == 3 else "none"}}),
                  samples_per_s=float(i), step_ms=[float(i)] * 4, ladder="noise" if i // 6 == 2 else "ladder")
    return RunRecord(**{**fields, **kw})


def _mixed_store(path: Path, monkeypatch) -> Path:
    """Three parts (two compactions, parts of 40 rows) and loose runs, all with the same settings mixed."""
    monkeypatch.setattr(store, "PART_ROWS", 40)
    for i in range(60):
        write_record(_record(i), path)
    store.compact(path)
    for i in range(60, 90):
        write_record(_record(i), path)
    store.compact(path)
    for i in range(90, 110):
        write_record(_record(i), path)  # loose
    assert len(store.part_files(path)) == 3 and len(store.record_files(path)) == 20
    assert all(store.index_state(part)[0] == "ok" for part in store.part_files(path))
    return path


KEYS = (("h0", "e"), ("h1", "other"), ("h2", "e"), ("h9", "e"))


def _lookups(path: Path, keys=KEYS, depth: int = 3) -> list:
    """Cache lookups as sweeps make them: per key, up to ``depth`` hits, each passed over (used) by the next."""
    answers = []
    for config_hash, env in keys:
        used: set[str] = set()
        while len(used) < depth and (hit := sweep.lookup_cached(str(path), config_hash, env, used)) is not None:
            answers.append(hit)
            used.add(hit.run_id)
        answers.append((config_hash, env, sorted(used)))
    return answers


def _full_scan_lookups(frame: pd.DataFrame, keys=KEYS, depth: int = 3) -> list:
    answers = []
    for config_hash, env in keys:
        used: set[str] = set()
        while len(used) < depth and (hit := sweep.find_cached(frame, config_hash, env, used)) is not None:
            answers.append(hit)
            used.add(hit.run_id)
        answers.append((config_hash, env, sorted(used)))
    return answers


def _index_reads(monkeypatch) -> list[str]:
    """The indexes read from now on (a spy on the store's index reader)."""
    read = []
    real = store._index_rows

    def spy(index, *args):
        read.append(Path(index).name)
        return real(index, *args)

    monkeypatch.setattr(store, "_index_rows", spy)
    return read


def test_index_lookups_give_the_full_scans_answers_newest_first(tmp_path, monkeypatch):
    path = _mixed_store(tmp_path, monkeypatch)
    reads = _index_reads(monkeypatch)
    every = (("h1", "e"), ("h2", "other"))
    answers = _lookups(path, every, depth=99)
    assert answers == _full_scan_lookups(load_runs(path), every, depth=99)
    assert len(reads) >= 3 * len(answers) // 2  # every lookup asked the three parts' indexes
    h1 = [a.run_id for a in answers if isinstance(a, RunRecord) and a.config_hash == "h1"]
    expected = [f"r{i:04d}" for i in range(109, -1, -1) if i % 3 == 1 and i % 7 != 5 and i % 9 != 4
                and i % 11 != 3 and i % 13 != 6]
    assert h1 == expected  # newest first, loose and compacted alike; no error, debug run, copy or other env
    assert answers[-1] == ("h2", "other", ["r0005", "r0026", "r0068", "r0089"])  # the other environment's own runs
    oldest = sweep.lookup_cached(str(path), "h1", "e", set(), oldest=True)
    assert oldest.run_id == expected[-1] and oldest.step_ms == [float(int(expected[-1][1:]))] * 4


def test_key_column_filters_read_the_same_rows_from_indexes(tmp_path, monkeypatch):
    path = _mixed_store(tmp_path, monkeypatch)
    full = load_runs(path)
    reads = _index_reads(monkeypatch)
    for where, columns in [({"config_hash": "h2", "env_key": "e", "status": "ok"}, list(sweep.CACHE_COLUMNS)),
                           ({"ladder": "noise"}, None), ({"run_id": ["r0003", "r0095", "r0061"]}, None),
                           ({"config_hash": "h1", "rung": 4}, ["run_id", "samples_per_s"]),
                           ({"config_hash": "nope"}, None)]:
        got = load_runs(path, columns=columns, where=where).sort_values("run_id").reset_index(drop=True)
        mask = pd.Series(True, index=full.index)
        for name, value in where.items():
            mask &= full[name].isin(value if isinstance(value, list) else [value])
        wanted = full[mask].sort_values("run_id").reset_index(drop=True)[list(got.columns)]
        pd.testing.assert_frame_equal(got, wanted, check_dtype=False)
    assert reads  # answered through the indexes
    assert sorted(load_runs(path, where={"ladder": "noise"})["run_id"]) == [f"r{i:04d}" for i in range(12, 18)]


def test_latest_comes_from_the_index_footers_and_matches_the_full_rule(tmp_path, monkeypatch):
    path = _mixed_store(tmp_path, monkeypatch)
    scanned = []
    real = store._scan
    monkeypatch.setattr(store, "_scan", lambda files, *a: scanned.extend(files) or real(files, *a))
    assert store.resolve_sweep(path, "latest") == "s018"  # the newest sweep, loose
    assert not set(scanned) & set(store.part_files(path))  # the parts answered from their indexes' footers
    for f in store.record_files(path):
        Path(f).unlink()
    store._FOOTERS.clear()
    assert store.resolve_sweep(path, "latest") == "s014" == store.resolve_sweep_id(load_runs(path), "latest")
    write_record(_record(200, sweep_id="", timestamp="2027-01-01T00:00:00+0000"), path)  # a plain run: not a sweep
    write_record(_record(201, sweep_id="a-tie", timestamp="2026-11-02T00:29:00+0000"), path)  # ties s014's newest
    assert store.resolve_sweep(path, "latest") == "s014" == store.resolve_sweep_id(load_runs(path), "latest")
    assert list(load_runs(path, sweep="latest")["run_id"]) == [f"r{i:04d}" for i in range(84, 90)]
    assert store.resolve_sweep(path, "s003") == "s003"
    with pytest.raises(ValueError, match="unknown sweep 's777'"):
        store.resolve_sweep(path, "s777")


def test_a_record_without_a_timestamp_makes_latest_read_every_row(tmp_path, monkeypatch):
    path = _mixed_store(tmp_path, monkeypatch)
    write_record(_record(300, timestamp=None, sweep_id="untimed"), path)
    store.compact(path)
    assert store.resolve_sweep(path, "latest") == store.resolve_sweep_id(load_runs(path), "latest")


def _answers(path: Path) -> tuple:
    return (_lookups(path), store.resolve_sweep(path, "latest"),
            sorted(load_runs(path, where={"ladder": "noise"})["run_id"]), sorted(load_runs(path)["run_id"]))


@pytest.mark.parametrize("damage", ["missing", "garbage", "stale", "other part's"])
def test_a_broken_index_falls_back_to_its_part(tmp_path, monkeypatch, damage):
    path = _mixed_store(tmp_path, monkeypatch)
    before = _answers(path)
    parts = store.part_files(path)
    index = store.index_path(parts[0])
    if damage == "missing":
        index.unlink()
    elif damage == "garbage":
        index.write_bytes(b"PAR1 not an index")
    elif damage == "stale":  # the part rewritten by hand after its index was made: its size changed
        table = store.pq.read_table(parts[0])
        store.pq.write_table(table, parts[0], compression="zstd")
    else:
        shutil.copy(store.index_path(parts[1]), index)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the part is fine: nothing is unreadable
        assert _answers(path) == before
    assert store.index_state(parts[0])[0] == {"missing": "missing", "garbage": "unreadable"}.get(damage, "stale")
    text, problems = store_cli.verify(str(path))
    assert problems == [] and "1 part(s) without a usable key index" in text
    assert store.compact(path).indexed == 1 and store.index_state(parts[0])[0] == "ok"
    assert _answers(path) == before and "key index" not in store_cli.verify(str(path))[0]


def test_an_index_that_differs_from_its_part_is_a_problem_that_reindex_repairs(tmp_path, monkeypatch, capsys):
    path = _mixed_store(tmp_path, monkeypatch)
    part = store.part_files(path)[0]
    index = store.index_path(part)
    table = store.pq.read_table(index)
    tampered = table.set_column(3, "config_hash", store.pa.array(["h0"] * table.num_rows))  # same size, other values
    store.pq.write_table(tampered, index, row_group_size=store.INDEX_ROW_GROUP)
    assert store.index_state(part)[0] == "ok"  # its facts fit: only reading it against its part tells
    assert cli.main(["store", "verify", "--results", str(path)]) == 1
    assert f"problem: key index {index} differs from its part {part}" in capsys.readouterr().out
    assert cli.main(["store", "reindex", "--results", str(path)]) == 0
    assert capsys.readouterr().out.strip() == "indexed 3 part(s)"
    assert cli.main(["store", "verify", "--results", str(path)]) == 0
    assert _lookups(path) == _full_scan_lookups(load_runs(path))


def test_an_old_compacted_store_without_indexes_reads_the_same_and_compact_indexes_it(tmp_path, monkeypatch, capsys):
    path = _mixed_store(tmp_path, monkeypatch)
    before = _answers(path)
    shutil.rmtree(store.compacted_dir(path) / store.INDEX_DIR)  # as compacted before indexes existed
    reads = _index_reads(monkeypatch)
    assert _answers(path) == before and reads == []
    assert cli.main(["store", "info", "--results", str(path)]) == 0
    assert "key indexes:     0 of 3 parts (3 missing: those parts are scanned;" in capsys.readouterr().out
    assert store_cli.verify(str(path))[1] == []
    for f in store.record_files(path):
        Path(f).unlink()  # nothing loose: compact only indexes
    assert cli.main(["store", "compact", "--results", str(path)]) == 0
    assert capsys.readouterr().out.strip() == ("nothing to compact: no loose run files; indexed 3 part(s) that had no "
                                               "key index")
    assert cli.main(["store", "info", "--results", str(path)]) == 0
    assert "key indexes:     3 of 3 parts\n" in capsys.readouterr().out
    assert _lookups(path) == _full_scan_lookups(load_runs(path)) and reads


def test_pandas_reads_the_compacted_folder_without_the_indexes(tmp_path, monkeypatch):
    path = _mixed_store(tmp_path, monkeypatch)
    frame = pd.read_parquet(store.compacted_dir(path))
    assert sorted(frame["run_id"]) == [f"r{i:04d}" for i in range(90)] and "samples_per_s" in frame


def test_orphan_indexes_are_never_read_and_compaction_removes_them(tmp_path, monkeypatch):
    path = _mixed_store(tmp_path, monkeypatch)
    orphan = store.index_path(store.compacted_dir(path) / "part-gone.parquet")
    shutil.copy(store.index_path(store.part_files(path)[0]), orphan)
    assert sorted(load_runs(path, where={"config_hash": "h0"})["run_id"]) == [f"r{i:04d}" for i in range(0, 110, 3)]
    assert "1 key index file(s) of parts that are gone" in store_cli.verify(str(path))[0]
    assert store.reindex(path).orphans == 1 and not orphan.exists()


def test_a_table_reads_the_newest_calibration_of_its_environment_and_chooses_as_before(tmp_path):
    from harness.analysis import noise_model

    def cal(i: int, sweep_id: str, env: str, status: str = "ok") -> RunRecord:
        return RunRecord(run_id=f"c{i:03d}", status=status, timestamp=f"2026-11-01T{i // 10:02d}:{i % 10:02d}:00+0000",
                         sweep_id=sweep_id, ladder="noise", env_key=env, device="cpu", cpu_model="EPYC", cpu_count=2,
                         samples_per_s=100.0 + i % 7)

    for i in range(40):  # four calibration sweeps an environment; the newest of env e (cal-05) failed
        env = ENVS[i // 10 % 2]
        write_record(cal(i, f"cal-{i // 5:02d}", env, "error" if 25 <= i < 30 else "ok"), tmp_path)
    store.compact(tmp_path)
    for i in range(3):
        write_record(_record(500 + i, sweep_id="shown", env_key="e", device="cpu", cpu_model="EPYC", cpu_count=2),
                     tmp_path)
    frame = load_runs(tmp_path, sweep="latest")
    everything = pd.concat([frame, load_runs(tmp_path, where={"ladder": "noise"})], ignore_index=True)
    chosen = noise_model.with_calibrations(tmp_path, frame)
    assert set(chosen["sweep_id"]) == {"shown", "cal-04"}  # the newest ok calibration of env e, nothing else
    assert noise_model.noise_for(chosen, frame) == noise_model.noise_for(everything, frame)
    assert noise_model.noise_for(chosen, frame).sweep_id == "cal-04"
    other = frame.assign(env_key="new-env")  # no calibration of its environment: every one is read (hardware match)
    chosen = noise_model.with_calibrations(tmp_path, other)
    assert len(chosen) == 3 + 40 and noise_model.noise_for(chosen, other) == noise_model.noise_for(
        pd.concat([other, load_runs(tmp_path, where={"ladder": "noise"})], ignore_index=True), other)
    shutil.rmtree(store.compacted_dir(tmp_path) / store.INDEX_DIR)  # without indexes: the parts are read
    assert store.newest_ok_sweeps(tmp_path, "noise") == {"e": "cal-04", "other": "cal-07"}
    assert set(noise_model.with_calibrations(tmp_path, frame)["sweep_id"]) == {"shown", "cal-04"}
