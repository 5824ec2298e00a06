"""Compaction: loose run files merged into a few part files, under a lock, losing and duplicating nothing.

``python -m harness store compact``, and by itself at the end of a sweep once ``AUTO_COMPACT_LOOSE`` loose files
pile up, merges loose run files into ``<results_dir>/compacted/part-<id>.parquet``: reading one file of 10,000
rows costs what reading a few loose files costs, and every file more costs a footer to parse on every read, so
each compaction rewrites the parts that are not full yet (``PART_ROWS``) together with the loose runs; a full part
is never rewritten. It runs under an exclusive ``flock`` on ``<results_dir>/.compact.lock``, writes each part
durably (fsync + rename) BEFORE it deletes the parts and loose files it merged, and never touches files that
appear while it runs, so a writer never waits and a kill at any point leaves every run in at least one place.
Under the lock, nothing else writes to ``compacted/``: the temp files there are those of a killed compaction, and
the key indexes an older version kept in ``compacted/_index/`` are no longer read; both are removed.

The sweeps' files of copies (``copies/<sweep_id>.parquet``, one a sweep that copied runs from the store) are merged
the same way into ``copies/compacted/part-<id>.parquet``, under the copies' own lock (``write.copies_locked``), which
a sweep adding a copy takes too: a copy written while they are merged waits for the merge and then starts its
sweep's file anew. A kill between a part and the removals leaves duplicates, which readers count once.
"""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from harness.fileio import fsync_dir
from harness.store.index import drop_duplicates, scan
from harness.store.record import COLUMNS, COPY_SCHEMA, SCHEMA, conform, same_values
from harness.store.write import (compacted_dir, copies_dir, copies_locked, copy_parts_dir, new_id, parquet_files,
                                 part_files, record_files, runs_dir, sweep_copy_files, write_table)

AUTO_COMPACT_LOOSE = 500  # loose files that make the end of a sweep compact the store (a few seconds of work)
PART_ROW_GROUP = 1024  # rows per row group: a sweep's rows sit in one or two, which a sweep_id filter picks out
PART_ROWS = 20_000  # a part this full is sealed: later compactions leave it alone, which bounds their rewriting
LOCK_NAME = ".compact.lock"
OLD_INDEX_DIR = "_index"  # compacted/_index/<part>.keys.parquet: key indexes an older version wrote, unused now


def _compaction_step(step: str, **info) -> None:
    """Called at each step of :func:`compact`; tests replace it to kill compaction at an exact point."""


@dataclass
class Compaction:
    """What one :func:`compact` did."""

    merged: int = 0  # loose runs now in new parts
    rewritten: int = 0  # parts that were not full, merged into the new ones
    removed: int = 0  # loose files deleted (merged now, or already in a part from an interrupted compaction)
    parts: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)  # left in place, named
    conflicts: list[str] = field(default_factory=list)  # loose files whose run_id a part holds with other values
    busy: bool = False  # another compaction held the lock and we did not wait
    already: int = 0  # of the removed loose files, those whose runs were all in parts already
    temps: int = 0  # temp files of killed compactions, removed
    copy_files: int = 0  # sweeps' files of copies merged into parts (and removed)
    copy_parts: list[str] = field(default_factory=list)
    old_indexes: int = 0  # files of compacted/_index/ (an older version's key indexes), removed

    def summary(self) -> str:
        """One line for the user."""
        if self.busy:
            return "another compaction is running; skipped"
        if not (self.merged or self.removed or self.unreadable or self.conflicts):
            if self.copy_files:
                return self._copies().removeprefix("; ") + "; no loose run files" + self._cleanup()
            return "nothing to compact: no loose run files" + self._cleanup()
        text = f"compacted {self.merged} loose runs into {len(self.parts)} part file(s)"
        if self.rewritten:
            text += f" (with the {self.rewritten} part(s) that were not full)"
        if self.already:
            text += f"; removed {self.already} loose files already in compacted parts"
        if self.unreadable:
            text += f"; left {len(self.unreadable)} unreadable file(s) in place: {', '.join(self.unreadable[:3])}"
        if self.conflicts:
            text += (f"; left {len(self.conflicts)} loose file(s) whose run_id a part holds with different values "
                     f"(see `python -m harness store verify`): {', '.join(self.conflicts[:3])}")
        return text + self._copies() + self._cleanup()

    def _copies(self) -> str:
        return (f"; merged the copies of {self.copy_files} sweep file(s) into {len(self.copy_parts)} part file(s)"
                if self.copy_files else "")

    def _cleanup(self) -> str:
        text = f"; removed {self.temps} temp file(s) of an interrupted compaction" if self.temps else ""
        if self.old_indexes:
            text += f"; removed {self.old_indexes} key index file(s) of an older version (no longer read)"
        return text


def compact(results_dir: str | os.PathLike, wait: bool = True, min_loose: int = 1,
            min_copies: int = 1) -> Compaction:
    """Merge the loose run files of ``results_dir``, and the parts not full yet, into compacted part files; and
    the sweeps' files of copies into parts of copies.

    Under an exclusive lock on ``<results_dir>/.compact.lock``; with ``wait=False`` a busy lock means
    "skip" (``busy=True``). Merges no runs unless at least ``min_loose`` loose files are there, no copies unless
    ``min_copies`` sweeps' files are; removes the temp files of killed compactions and an older version's key
    indexes either way.
    """
    with _compaction_lock(results_dir, wait) as locked:
        if not locked:
            return Compaction(busy=True)
        temps, old_indexes = _remove_dead_files(results_dir)
        loose = record_files(results_dir)  # files that appear from now on are left for the next compaction
        done = _compact_locked(results_dir, loose) if len(loose) >= max(min_loose, 1) else Compaction()
        if len(sweep_copy_files(results_dir)) >= max(min_copies, 1):
            _compact_copies(results_dir, done)
        done.temps, done.old_indexes = temps, old_indexes
        return done


def maybe_compact(results_dir: str | os.PathLike, threshold: int | None = None) -> Compaction | None:
    """Compact if at least ``threshold`` (``AUTO_COMPACT_LOOSE``) loose files, or sweeps' files of copies, are
    there and no one else is compacting (never waits)."""
    threshold = AUTO_COMPACT_LOOSE if threshold is None else threshold
    if len(record_files(results_dir)) < threshold and len(sweep_copy_files(results_dir)) < threshold:
        return None
    return compact(results_dir, wait=False, min_loose=threshold, min_copies=threshold)


def _compact_copies(results_dir, done: Compaction) -> None:
    """Merge the sweeps' files of copies, and the parts of copies not full yet, into new parts; then remove them.
    A file that cannot be read is left in place (``store verify`` names it)."""
    with copies_locked(results_dir):
        open_parts = [p for p in parquet_files(copy_parts_dir(results_dir)) if _rows(p) < PART_ROWS]
        tables, sources = [], []
        for path in sweep_copy_files(results_dir) + open_parts:
            try:
                tables.append(pq.read_table(path, schema=COPY_SCHEMA))
                sources.append(path)
            except (OSError, ValueError, pa.ArrowException):
                continue
        if not tables:
            return
        table = drop_duplicates(pa.concat_tables(tables)).sort_by([("sweep_id", "ascending"), ("run_id", "ascending")])
        for start in range(0, table.num_rows, PART_ROWS):
            path = copy_parts_dir(results_dir) / f"part-{new_id()}.parquet"
            write_table(table.slice(start, PART_ROWS), path, row_group_size=PART_ROW_GROUP)
            done.copy_parts.append(str(path))
            _compaction_step("copies-part-written", path=path)
        for path in sources:
            Path(path).unlink(missing_ok=True)
            done.copy_files += path not in open_parts
            _compaction_step("copies-removed", path=path)
        fsync_dir(copies_dir(results_dir))
        fsync_dir(copy_parts_dir(results_dir))


def _rows(path: str) -> int:
    """A parquet file's row count, from its footer (one that cannot be read counts as full: it is left alone)."""
    try:
        return pq.ParquetFile(path).metadata.num_rows
    except (OSError, ValueError, pa.ArrowException):
        return PART_ROWS


@contextmanager
def _compaction_lock(results_dir, wait: bool):
    """Hold ``<results_dir>/.compact.lock`` exclusively; yields False instead if it is busy and ``wait`` is off."""
    import fcntl

    if not Path(results_dir).is_dir():
        raise ValueError(f"no such results folder: {str(results_dir)!r} (give --results the folder that holds runs/)")
    fd = os.open(Path(results_dir) / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o666)  # 0o666 & ~umask, like the records
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # releases the lock


def _remove_dead_files(results_dir) -> tuple[int, int]:
    """Under the lock: (temp files of killed compactions, files of an older version's key indexes) removed.
    Only compaction writes to ``compacted/`` and it holds the lock, so no temp file there is being written."""
    folder = compacted_dir(results_dir)
    temps = 0
    folders = [d for d in (folder, copy_parts_dir(results_dir)) if d.is_dir()]
    for tmp in [p for d in folders for p in sorted(d.glob(".tmp-*.parquet"))]:
        tmp.unlink(missing_ok=True)  # copies/compacted/ too: only compaction writes there, under this lock
        temps += 1
    old = folder / OLD_INDEX_DIR
    old_files = sum(1 for p in old.iterdir() if p.is_file()) if old.is_dir() else 0
    if old.is_dir():
        shutil.rmtree(old, ignore_errors=True)
    if temps or old_files:
        for each in folders + ([folder] if old_files and folder not in folders else []):
            fsync_dir(each)
    return temps, old_files


def _compact_locked(results_dir, loose: list[str]) -> Compaction:
    done = Compaction()
    tables, sources = _read_loose(loose, done)
    if not tables:
        return done
    table = conform(pa.concat_tables(tables, promote_options="permissive"))
    ids_of = {path: t.column("run_id").to_pylist() for path, t in zip(sources, tables)}
    table, in_parts, conflicting = _drop_runs_in_parts(results_dir, table, ids_of)
    done.conflicts = [p for p in sources if set(ids_of[p]) & conflicting]
    merged_loose = set(table.column("run_id").to_pylist())
    table, open_parts = _with_open_parts(results_dir, table)
    _write_parts(results_dir, table, done)
    done.merged = len(merged_loose)
    # only now, with every new part durable, do the merged parts and loose copies go; a kill in between leaves
    # identical duplicates that readers drop and the next compaction merges away
    for path in open_parts:
        try:
            os.unlink(path)
            done.rewritten += 1
        except FileNotFoundError:
            pass
        _compaction_step("part-removed", path=path)
    fsync_dir(compacted_dir(results_dir))
    settled = merged_loose | in_parts
    for path in [p for p in sources if p not in done.conflicts and all(r in settled for r in ids_of[p])]:
        try:
            os.unlink(path)
            done.removed += 1
            done.already += all(r in in_parts for r in ids_of[path])
        except FileNotFoundError:
            pass
        _compaction_step("loose-removed", path=path)
    fsync_dir(runs_dir(results_dir))
    return done


def _read_loose(loose: list[str], done: Compaction) -> tuple[list[pa.Table], list[str]]:
    """(tables, their files) of the loose files that read; the others are named in ``done.unreadable``."""
    tables, sources = [], []
    for path in loose:
        try:
            tables.append(pq.ParquetFile(path).read())  # its own schema: columns newer than this code are kept
            sources.append(path)
        except (OSError, ValueError, pa.ArrowException):
            if os.path.exists(path):
                done.unreadable.append(path)
    return tables, sources


def _drop_runs_in_parts(results_dir, table: pa.Table, ids_of: dict[str, list]) -> tuple[pa.Table, set, set]:
    """Runs a part already holds (an interrupted compaction) are never merged twice: (the loose rows left,
    run_ids held identically, run_ids held with other values)."""
    already = _read_parts(results_dir, sorted({r for ids in ids_of.values() for r in ids}))
    in_parts, conflicting = set(), set()
    if not already.num_rows:
        return table, in_parts, conflicting
    held = {r["run_id"]: r for r in already.select(list(COLUMNS)).to_pylist()}
    keep_rows = []
    for i, row in enumerate(table.select(list(COLUMNS)).to_pylist()):
        if row["run_id"] not in held:
            keep_rows.append(i)
        else:
            (in_parts if same_values(held[row["run_id"]], row) else conflicting).add(row["run_id"])
    return table.take(pa.array(keep_rows, type=pa.int64())), in_parts, conflicting


def _with_open_parts(results_dir, table: pa.Table) -> tuple[pa.Table, list[str]]:
    """``table`` with the rows of the parts that are not full (read), sorted by sweep; and those parts."""
    open_parts, open_tables = [], []
    for path in _open_parts(results_dir):
        try:
            open_tables.append(pq.ParquetFile(path).read())
            open_parts.append(path)
        except (OSError, ValueError, pa.ArrowException):
            pass  # left alone; `store verify` names it
    if open_tables:
        table = conform(pa.concat_tables([table] + open_tables, promote_options="permissive"))
    table = drop_duplicates(table)
    # sorted by sweep: a sweep's rows share a row group or two, and a sweep_id filter skips the others
    return table.sort_by([("sweep_id", "ascending"), ("timestamp", "ascending")]), open_parts


def _write_parts(results_dir, table: pa.Table, done: Compaction) -> None:
    for start in range(0, table.num_rows, PART_ROWS):
        path = compacted_dir(results_dir) / f"part-{new_id()}.parquet"
        write_table(table.slice(start, PART_ROWS), path, row_group_size=PART_ROW_GROUP,
                    before_rename=lambda tmp, p=path: _compaction_step("part-temp-written", path=p))
        done.parts.append(str(path))
        _compaction_step("part-written", path=path)


def _open_parts(results_dir) -> list[str]:
    """The parts with room (a part's row count is in its footer; one that cannot be read is left alone)."""
    return [path for path in part_files(results_dir) if _rows(path) < PART_ROWS]


def _read_parts(results_dir, run_ids: list[str]) -> pa.Table:
    """The rows of the parts that hold these runs."""
    parts = part_files(results_dir)
    if not parts or not run_ids:
        return SCHEMA.empty_table()
    table, _bad, _vanished = scan(parts, list(COLUMNS), pc.field("run_id").isin(pa.array(run_ids, pa.string())))
    return table
