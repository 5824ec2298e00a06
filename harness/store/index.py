"""A store's short columns, read once per process and kept while its files stay the same files.

One command reads the store many times: a fully cached sweep of phase2 some fifty (each rung's earlier runs of the
sweep, the cache's candidates, each round's source, the calibration, the table). Each read used to open every
file with pyarrow.dataset: ~35 ms on a small store, seconds on thousands of loose files. Now a process reads the
``KEY_COLUMNS`` of every file once, with the file that holds each row (a :class:`Snapshot`), and each later read

* lists the folders again and stats every file (inode, size, mtime): a file added or changed since is read alone,
  a file gone is dropped, the rest is kept (another process writing or compacting meanwhile is seen at once);
* answers a read of key columns filtered on key columns from memory, without opening a file;
* reads other columns from the files that hold matching rows only (none when no row matches).

Copies (``harness.store.write.store_copy``) join the snapshot as rows whose key columns come from their originals,
and are put back together whole when other columns are asked for.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from harness.store.record import COLUMNS, COPY_COLUMNS, COPY_SCHEMA, SCHEMA
from harness.store.write import copy_files, part_files, record_files, forget_written, written

# The columns every snapshot holds: what the store's own reads filter on and what the cache and a sweep's bookkeeping
# read. All short strings and numbers (a few MB at 50,000 runs).
KEY_COLUMNS = ("run_id", "sweep_id", "campaign_id", "timestamp", "config_hash", "env_key", "status", "cached_from",
               "ladder", "rung", "round", "against_side", "schema_version")
FILE = "_file"  # the file a row was read from (a copy: its original's)
COPY = "_copy"  # whether a row of the snapshot is a copy (stored in copies/)


class Vanished(FileNotFoundError):
    """A file of the snapshot was removed (a compaction moved its runs) while a read was under way."""


Listing = dict[str, tuple[int, int, int]]  # path -> (inode, size, mtime_ns), in reading order


@dataclass(frozen=True)
class Snapshot:
    """The key columns of a store as its files were when listed, and its copies."""

    files: Listing  # runs/ then compacted/, the order duplicates are resolved in (the first read wins)
    copy_files: Listing
    rows: pa.Table  # KEY_COLUMNS + FILE of every row of ``files``, duplicates included
    copies: pa.Table  # COPY_COLUMNS + FILE of every copy
    keys: pa.Table  # one row per run_id: the rows (loose first), then the copies whose original is here; + COPY
    bad: tuple[tuple[str, str], ...] = ()  # files found unreadable while reading this snapshot: (path, why)

    def matching(self, expr) -> pa.Table | None:
        """The key rows matching ``expr``; None when it names a column the snapshot does not hold."""
        if expr is None:
            return self.keys
        try:
            return self.keys.filter(expr)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, KeyError):
            return None


_SNAPSHOTS: dict[str, Snapshot] = {}


def snapshot(results_dir, unreadable=lambda path: False) -> Snapshot:
    """The store's snapshot, brought up to date with its files (each read anew only when it is not the same file);
    ``unreadable(path)``: files to leave out (found unreadable before and unchanged)."""
    where = os.path.abspath(results_dir)
    old = _SNAPSHOTS.get(where)
    files = _listing(record_files(results_dir), unreadable)  # runs/ BEFORE compacted/: see read._Reader
    files.update(_listing(part_files(results_dir), unreadable))
    copies = _listing(copy_files(results_dir), unreadable)
    if old is not None and old.files == files and old.copy_files == copies:
        return old
    rows, bad = _refresh(old.rows if old else None, old.files if old else {}, files, KEY_COLUMNS, SCHEMA)
    copy_rows, bad_copies = _refresh(old.copies if old else None, old.copy_files if old else {}, copies,
                                     COPY_COLUMNS, COPY_SCHEMA)
    # each in one chunk: a table of one chunk per file (a store's records, every sweep's copies) made each filter on
    # it cost milliseconds (2.9 ms on 41 chunks, 0.3 ms joined: a cached sweep filters it some 60 times)
    rows, copy_rows = rows.combine_chunks(), copy_rows.combine_chunks()
    new = Snapshot(files, copies, rows, copy_rows, _keys(rows, copy_rows, files).combine_chunks(),
                   tuple(bad + bad_copies))
    _SNAPSHOTS[where] = new
    return new


def forget(results_dir=None) -> None:
    """Drop the snapshot of ``results_dir`` (its files changed under a read); when None, everything a fresh process
    would not hold: every store's snapshot, the files kept whole and the tables this process wrote (a benchmark
    timing reads, a test counting them, as a fresh process makes them)."""
    if results_dir is None:
        _SNAPSHOTS.clear()
        _WHOLE.clear()
        _JOINED.clear()
        forget_written()
    else:
        _SNAPSHOTS.pop(os.path.abspath(results_dir), None)


def _listing(paths: list[str], unreadable) -> Listing:
    out: Listing = {}
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue  # removed since it was listed: its runs are in a part listed later, or gone
        if not unreadable(path):
            out[path] = (st.st_ino, st.st_size, st.st_mtime_ns)
    return out


def _refresh(old: pa.Table | None, old_files: Listing, files: Listing, columns, schema) -> tuple[pa.Table, list]:
    """``columns`` + FILE of every row of ``files``: the rows of ``old`` of the files still the same, the others
    read (Vanished when one is removed meanwhile)."""
    same = [p for p, ident in files.items() if old_files.get(p) == ident]
    fresh = [p for p in files if old_files.get(p) != files[p]]
    parts = [old.filter(pc.is_in(old[FILE], value_set=pa.array(same, pa.string())))] if old is not None else []
    bad: list = []
    mine = [written(p, files[p]) for p in fresh]
    if fresh and all(t is not None and t.schema == schema for t in mine):  # what this process wrote: not read back
        parts += [t.select(list(columns)).append_column(FILE, pa.array([p] * t.num_rows, pa.string()))
                  for p, t in zip(fresh, mine)]
    elif fresh:
        table, bad, vanished = scan(fresh, list(columns), None, schema, with_file=True)
        if vanished:
            raise Vanished(vanished[0])
        parts.append(table)
    if not parts:
        return _empty(columns, schema), bad
    return pa.concat_tables(parts), bad


def _empty(columns, schema) -> pa.Table:
    return schema.empty_table().select(list(columns)).append_column(FILE, pa.array([], pa.string()))


def _keys(rows: pa.Table, copies: pa.Table, files: Listing) -> pa.Table:
    """One row per run_id, in reading order: the stored rows, then the copies with their originals' key columns
    (a copy whose original is gone from the store is left out, as a copy of a missing row would be)."""
    order = pc.index_in(rows[FILE], value_set=pa.array(list(files), pa.string()))
    stored = drop_duplicates(rows.take(pc.sort_indices(order)))
    stored = stored.append_column(COPY, pa.array([False] * stored.num_rows, pa.bool_()))
    if not copies.num_rows:
        return stored
    at = pc.index_in(copies["cached_from"], value_set=stored["run_id"])
    found = pc.is_valid(at)
    copies, originals = copies.filter(found), stored.take(at.filter(found))
    columns = [copies[c] if c in COPY_COLUMNS else originals[c] for c in KEY_COLUMNS]
    joined = pa.table(columns + [originals[FILE], pa.array([True] * copies.num_rows, pa.bool_())],
                      names=list(KEY_COLUMNS) + [FILE, COPY])
    return drop_duplicates(pa.concat_tables([stored, joined]))


def copied_rows(snap: Snapshot, copy_ids: pa.Array | None, columns: list[str]) -> pa.Table:
    """``columns`` of the copies ``copy_ids`` (all when None) put back together: each its original's row with the
    copy's own columns on top, in the order of the snapshot's copies."""
    refs = snap.copies if copy_ids is None else snap.copies.filter(pc.is_in(snap.copies["run_id"], value_set=copy_ids))
    if not refs.num_rows:
        return SCHEMA.empty_table().select(columns)
    originals_at = snap.keys.filter(pc.invert(snap.keys[COPY]))
    wanted = pc.unique(refs["cached_from"])
    files = _in_order(snap, originals_at.filter(pc.is_in(originals_at["run_id"], value_set=wanted))[FILE])
    read = columns if "run_id" in columns else columns + ["run_id"]
    table, bad, vanished = scan(files, read, pc.field("run_id").isin(wanted))
    if vanished:
        raise Vanished(vanished[0])
    originals = drop_duplicates(table)
    at = pc.index_in(refs["cached_from"], value_set=originals["run_id"])
    found = pc.is_valid(at)
    refs, whole = refs.filter(found), originals.take(at.filter(found))
    return pa.table([refs[c] if c in COPY_COLUMNS else whole[c] for c in columns], names=columns)


AHEAD_FILES = 64  # the most files read ahead at once


def ahead_of(snap: Snapshot, hits: pa.Table | None) -> list[str]:
    """The files holding stored rows of the sweeps among ``hits``: a command reading one run whole (a cached sweep
    copying a rung) reads the others of its sweep next, and one read of them all costs about what one file's does
    (~5 ms on a 2-core CPU, mostly opening it). At most AHEAD_FILES; none for a read of every file."""
    if hits is None or not hits.num_rows:
        return []
    sweeps = pc.unique(hits["sweep_id"])
    stored = snap.keys.filter(pc.invert(snap.keys[COPY]))
    return _in_order(snap, stored.filter(pc.is_in(stored["sweep_id"], value_set=sweeps))[FILE])[:AHEAD_FILES]


def stored_files(snap: Snapshot, hits: pa.Table | None) -> list[str]:
    """The files holding the stored (not copied) rows among ``hits`` (all the snapshot's files when None)."""
    if hits is None:
        return list(snap.files)
    return _in_order(snap, hits.filter(pc.invert(hits[COPY]))[FILE])


def _in_order(snap: Snapshot, paths: pa.Array) -> list[str]:
    chosen = set(pc.unique(paths).to_pylist())
    return [p for p in snap.files if p in chosen]


# Every column of the record files read whole in this process, by path, with what each file was then (inode, size,
# mtime): one command reads the same runs again and again (a fully cached sweep: each round's looks, the table and
# the units table read every original its copies stand for), and each read opened their files anew (~5 ms a file).
# A file changed since is read again; at most KEPT_ROWS rows are kept (a store of thousands of runs reads as before).
_WHOLE: dict[str, tuple[tuple[int, int, int], pa.Table]] = {}
KEPT_ROWS = 20_000


def scan(files: list[str], columns: list[str], expr, schema: pa.Schema = SCHEMA, with_file: bool = False,
         ahead: list[str] = ()) -> tuple[pa.Table, list[tuple[str, str]], list[str]]:
    """One fast read of all files; if it fails, each file on its own: (table, unreadable, vanished). ``with_file``:
    a FILE column names the file each row came from. Record files are read whole once and kept (``_WHOLE``), with
    the files of ``ahead`` not kept yet read beside them (see :func:`ahead_of`)."""
    if files and schema is SCHEMA and not with_file:
        kept = _from_kept(files, ahead)
        if kept is not None:
            return (kept.filter(expr) if expr is not None else kept).select(columns), [], []
    return _scan(files, columns, expr, schema, with_file)


def _from_kept(files: list[str], ahead: list[str] = ()) -> pa.Table | None:
    """Every column of ``files``' rows in their order, from the files kept whole, the others read whole (and kept
    while there is room), in one read with those of ``ahead`` not kept yet; None when one cannot be read or
    vanished (the plain read then says so, as before)."""
    idents = {path: file_identity(path) for path in dict.fromkeys([*files, *ahead])}
    fresh = [p for p in files if idents[p] is None or _WHOLE.get(p, (None,))[0] != idents[p]]
    tables = {p: _WHOLE[p][1] for p in files if p not in fresh}
    if fresh:
        fresh += [p for p in idents if p not in files and idents[p] is not None and _WHOLE.get(p, (None,))[0]
                  != idents[p]]
        table, bad, vanished = _scan(fresh, list(COLUMNS), None, SCHEMA, with_file=True)
        if bad or vanished:
            return None
        rows: dict[str, list[int]] = {p: [] for p in fresh}
        for i, path in enumerate(table[FILE].to_pylist()):
            if path not in rows:  # a file named otherwise than listed: read as before
                return None
            rows[path].append(i)
        whole = table.drop_columns([FILE])
        room = KEPT_ROWS - sum(t.num_rows for _, t in _WHOLE.values())
        for path in fresh:
            tables[path] = whole.take(pa.array(rows[path], pa.int64()))
            if idents[path] is not None and tables[path].num_rows <= room:
                _WHOLE[path] = idents[path], tables[path]
                room -= tables[path].num_rows
    # one chunk per file of every column made each filter on them ~30 ms (fifty files); joined into one, ~1 ms
    key = tuple((p, idents[p]) for p in files)
    if key not in _JOINED:
        joined = pa.concat_tables([tables[p] for p in files]).combine_chunks()
        if any(idents[p] is None for p in files):
            return joined
        _JOINED[key] = joined
        while len(_JOINED) > 1 and (len(_JOINED) > KEPT_JOINED
                                    or sum(t.num_rows for t in _JOINED.values()) > KEPT_ROWS):
            del _JOINED[next(iter(_JOINED))]  # the oldest
    return _JOINED[key]


# The lists of files last read together from _WHOLE (paths and identities), each joined into one table: at most
# KEPT_JOINED lists and KEPT_ROWS rows besides the newest.
_JOINED: dict[tuple, pa.Table] = {}
KEPT_JOINED = 8


def file_identity(path: str) -> tuple[int, int, int] | None:
    """What the file at ``path`` is now (inode, size, mtime in ns), or None where it cannot be seen."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _scan(files: list[str], columns: list[str], expr, schema: pa.Schema,
          with_file: bool) -> tuple[pa.Table, list[tuple[str, str]], list[str]]:
    if not files:
        return (_empty(columns, schema) if with_file else schema.empty_table().select(columns)), [], []
    # here, not at the top: pyarrow.dataset loads pandas with it (~0.4 s), which a command that only writes a
    # record (``harness run``'s parent) never needs
    import pyarrow.dataset as ds

    read = columns + ["__filename"] if with_file else columns

    def one_read(paths):
        # threads for many files only: one file's read took ~9 ms of CPU with them, ~6 without, in the same time
        table = ds.dataset(paths, schema=schema, format="parquet").to_table(columns=read, filter=expr,
                                                                             use_threads=len(paths) > 1)
        return table.rename_columns(columns + [FILE]) if with_file else table

    try:
        return one_read(files), [], []
    except (OSError, ValueError, pa.ArrowException):
        pass
    good, bad, vanished = [], [], []
    for path in files:
        try:
            good.append(one_read([path]))
        except (OSError, ValueError, pa.ArrowException) as exc:
            if not os.path.exists(path):
                vanished.append(path)  # compacted (or removed) since the listing: not a damaged record
            else:
                bad.append((path, str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__))
    empty = _empty(columns, schema) if with_file else schema.empty_table().select(columns)
    return (pa.concat_tables(good) if good else empty), bad, vanished


def drop_duplicates(table: pa.Table) -> pa.Table:
    """One row per run_id, the first one read (loose files are read first)."""
    ids = table.column("run_id")
    if table.num_rows < 2 or pc.count_distinct(ids).as_py() == table.num_rows:
        return table
    indexed = table.select(["run_id"]).append_column("_row", pa.array(range(table.num_rows), type=pa.int64()))
    first = indexed.group_by("run_id", use_threads=False).aggregate([("_row", "min")]).column("_row_min")
    return table.take(pc.take(first, pc.sort_indices(first)))  # the kept row numbers, in reading order


assert set(KEY_COLUMNS) <= set(COLUMNS)
