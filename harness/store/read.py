"""Reading the store: loose and compacted files together, filtered inside pyarrow, one row per run.

Readers read ``runs/`` and ``compacted/`` together and keep one row per ``run_id`` (identical duplicates are the
benign leftovers of an interrupted compaction). After compaction ``pandas.read_parquet("<results_dir>/runs")``
sees only the loose runs: use :func:`load_runs`, or read both folders. A record that cannot be read (copied
half-way, disk error) is named in one warning per process and skipped, and the rest stays usable. Other files
in the folders (temp files, the key indexes an older version wrote in ``compacted/_index/``) are never read.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from harness.store import index
from harness.store.record import COLUMNS, SCHEMA, RunRecord, record_from_row
from harness.registry import unknown_choice

Where = dict[str, Any] | pc.Expression | None  # pc.Expression is pyarrow.dataset's Expression


class UnreadableRecord(UserWarning):
    """A record file in the store that could not be read (it is skipped)."""


def load_runs(results_dir: str | os.PathLike = "results", *, sweep: str | None = None,
              columns: list[str] | tuple[str, ...] | None = None, where: Where = None):
    """Records under ``results_dir`` (loose and compacted, one row per run_id) as a pandas DataFrame
    (empty, with columns, if none).

    ``sweep`` ("latest" or a sweep id) keeps one sweep's records: the sweep is resolved from two
    columns, then only its rows are read (an unknown id is a ValueError listing the valid ones).
    ``columns`` reads only those columns; ``where`` keeps rows whose columns equal the given values
    (``{"sweep_id": "s", "status": ["ok", "oom"]}``; a list, set or tuple means "one of") or that
    match a pyarrow dataset expression. Filters run inside pyarrow, before pandas sees a row.

    A folder that does not exist is a ValueError (a typo must not read as "no sweep yet").
    """
    _require_folder(results_dir)
    reader = _Reader(results_dir)
    expr = _expression(where)
    if sweep is not None:
        expr = _and(expr, pc.field("sweep_id") == resolve_sweep(reader, sweep))
    table = reader.read(columns, expr)
    if table.num_rows == 0:
        return empty_frame(columns)
    return table.to_pandas()


def load_records(results_dir: str | os.PathLike, *, where: Where = None) -> list[RunRecord]:
    """The records matching ``where`` (as :func:`load_runs` filters) as RunRecords, built from arrow rows without
    pandas: copying one cached record costs a fraction of a millisecond instead of ~10 (a frame's to_dict)."""
    return [record_from_row(row) for row in read_table(results_dir, where=where).to_pylist()]


def read_table(results_dir: str | os.PathLike, columns: list[str] | None = None, where: Where = None) -> pa.Table:
    """The rows :func:`load_runs` would give, as an arrow table (no pandas)."""
    _require_folder(results_dir)
    return _Reader(results_dir).read(columns, _expression(where))


def load_parquet_files(files: list[str]):
    """Records from explicit parquet files; columns missing from older files come back empty.

    One fast read of all files; if any file is unreadable, each is read on its own and the bad
    ones are skipped with an ``UnreadableRecord`` warning that names them.
    """
    table, bad, vanished = index.scan(list(files), list(COLUMNS), None)
    _warn_unreadable(bad + [(path, "no such file") for path in vanished])
    if table.num_rows == 0:
        return empty_frame()
    return table.to_pandas()


def records_from_frame(frame) -> list[RunRecord]:
    """Turn DataFrame rows back into RunRecords (for copying cached runs, baselines)."""
    return [record_from_row(row) for row in frame.to_dict(orient="records")]


def newest_ok_sweeps(results_dir: str | os.PathLike, ladder: str) -> dict[str, str] | None:
    """For each environment (env_key), the sweep of its newest ``ok`` run of ``ladder`` (ties: the greatest sweep
    id), read from three columns: the noise calibration a table uses, found without reading every calibration
    whole. None when a record with a sweep has no timestamp (read the rows and decide)."""
    expr = (pc.field("ladder") == ladder) & (pc.field("status") == "ok") & (pc.field("sweep_id") != "")
    table = _Reader(results_dir).read(["env_key", "timestamp", "sweep_id"], expr)
    if table.column("timestamp").null_count:
        return None
    newest: dict[str, list[str]] = {}
    for env, stamp, sweep_id in zip(*(table.column(c).to_pylist() for c in ("env_key", "timestamp", "sweep_id"))):
        newest[env or ""] = max(newest.get(env or "", [stamp, sweep_id]), [stamp, sweep_id])
    return {env: pair[1] for env, pair in newest.items()}


def resolve_id(frame, column: str, wanted: str, what: str, how_to_make: str) -> str:
    """``latest`` (the ``column`` value of the newest record; of equal timestamps, the greatest value) or a value
    that exists; ValueError otherwise."""
    present = frame[frame[column].fillna("") != ""] if column in frame else frame.iloc[0:0]
    if present.empty:
        raise ValueError(f"the store holds no {what} yet: run `{how_to_make}` first")
    if wanted == "latest":
        return str(present.sort_values(["timestamp", column], kind="stable")[column].iloc[-1])
    ids = sorted(present[column].unique())
    if wanted not in ids:
        raise unknown_choice(what, wanted, ids[-20:])
    return wanted


def resolve_sweep_id(frame, sweep: str) -> str:
    """``latest`` (the sweep with the newest record) or a sweep id that exists; ValueError otherwise."""
    return resolve_id(frame, "sweep_id", sweep, "sweep", "python -m harness sweep +ladder=NAME")


def select_sweep(frame, sweep: str):
    """The records of one sweep (``latest`` or an id) in ``frame``; ValueError for a sweep it does not hold."""
    return frame[frame["sweep_id"] == resolve_sweep_id(frame, sweep)]


def resolve_sweep(results_dir, sweep: str) -> str:
    """The id of ``sweep`` ("latest" or an id); ValueError as ``table`` words it. An id is found from the rows
    that carry it (parts are sorted by sweep, so their statistics skip the rest); ``latest``, or an unknown id
    (whose error lists the valid ones), reads the sweep_id and timestamp of every row."""
    reader = results_dir if isinstance(results_dir, _Reader) else _Reader(results_dir)
    if sweep != "latest" and reader.read(["sweep_id"], pc.field("sweep_id") == sweep).num_rows:
        return sweep
    ids = reader.read(["sweep_id", "timestamp"], pc.field("sweep_id") != "")
    frame = ids.to_pandas() if ids.num_rows else empty_frame(["sweep_id", "timestamp"])
    return resolve_sweep_id(frame, sweep)


_EMPTY = []  # the empty frame, built once: building ~80 typed Series costs ~50 ms, a copy far less


def empty_frame(columns=None):
    """A DataFrame with no rows and the store's columns (or ``columns``), typed as a read would type them."""
    import pandas as pd

    if not _EMPTY:
        _EMPTY.append(pd.DataFrame({name: pd.Series(dtype=_pandas_dtype(t)) for name, t in zip(COLUMNS, SCHEMA.types)}))
    return _EMPTY[0][list(COLUMNS if columns is None else columns)].copy()


def _pandas_dtype(arrow_type: pa.DataType) -> str:
    if pa.types.is_string(arrow_type):
        return "object"
    if pa.types.is_integer(arrow_type):
        return "Int64"
    if pa.types.is_floating(arrow_type):
        return "float64"
    if pa.types.is_boolean(arrow_type):
        return "boolean"
    return "object"


def _require_folder(results_dir) -> None:
    if not Path(results_dir).is_dir():
        raise ValueError(f"no such results folder: {str(results_dir)!r} (give --results the folder that holds runs/)")


def _expression(where: Where):
    if where is None or isinstance(where, pc.Expression):
        return where
    expr = None
    for name, value in where.items():
        if name not in COLUMNS:
            raise ValueError(f"unknown column {name!r} in a store filter; valid choices: {', '.join(COLUMNS)}")
        if isinstance(value, (list, tuple, set, frozenset)):
            term = pc.field(name).isin(pa.array(sorted(value), type=SCHEMA.field(name).type))
        else:
            term = pc.field(name) == pa.scalar(value, type=SCHEMA.field(name).type)
        expr = _and(expr, term)
    return expr


def _and(a, b):
    return b if a is None else a if b is None else a & b


class _Reader:
    """Reads a store's loose and compacted files together, and its copies, through the process's snapshot of its
    short columns (``harness.store.index``): a read of those alone opens no file, any other reads only the files
    that hold matching rows.

    Lists ``runs/`` BEFORE ``compacted/``: a run that a concurrent compaction moves is then either in a part this
    listing sees, or its loose file vanishes while being read, which makes the read start over with fresh listings
    (a vanished file is never called unreadable). Files found unreadable are left out of later listings while they
    stay the same file (see :func:`_known_unreadable`).
    """

    def __init__(self, results_dir):
        self.results_dir = results_dir

    def read(self, columns=None, expr=None) -> pa.Table:
        """``columns`` (all if None) of the rows matching ``expr``, one row per run_id."""
        wanted = list(COLUMNS if columns is None else columns)
        unknown = [c for c in wanted if c not in COLUMNS]
        if unknown:
            raise ValueError(f"unknown column {unknown[0]!r}; valid choices: {', '.join(COLUMNS)}")
        for _attempt in range(4):  # a compaction per attempt would have to finish within one read: 5 is plenty
            try:
                return self._read_once(wanted, expr)
            except index.Vanished:
                index.forget(self.results_dir)
        return self._read_once(wanted, expr)

    def _read_once(self, wanted: list[str], expr) -> pa.Table:
        snap = index.snapshot(self.results_dir, _known_unreadable)
        _warn_unreadable(list(snap.bad))
        return _answer(snap, wanted, expr)


def _answer(snap: index.Snapshot, wanted: list[str], expr) -> pa.Table:
    """The rows of ``snap`` matching ``expr``: from memory when it has the columns, else read from the files that
    hold them (every file when ``expr`` names another column), copies put back together from their originals."""
    read_cols = wanted if "run_id" in wanted else wanted + ["run_id"]  # run_id drops duplicates
    hits = snap.matching(expr)
    if hits is not None and (set(read_cols) <= set(index.KEY_COLUMNS) or not hits.num_rows):
        return hits.select(wanted) if hits.num_rows else SCHEMA.empty_table().select(wanted)
    files, ahead = index.stored_files(snap, hits), index.ahead_of(snap, hits)
    stored, bad, vanished = index.scan(files, read_cols, expr, ahead=ahead)
    if vanished:
        raise index.Vanished(vanished[0])
    _warn_unreadable(bad)
    copy_ids = None if hits is None else hits.filter(hits[index.COPY])["run_id"]
    if copy_ids is not None and not len(copy_ids):
        return index.drop_duplicates(stored).select(wanted)
    if hits is None:  # a filter on a column the snapshot lacks: every copy whole, then filtered
        copies = index.copied_rows(snap, None, list(COLUMNS))
        copies = (copies.filter(expr) if expr is not None else copies).select(read_cols)
    else:
        copies = index.copied_rows(snap, copy_ids.combine_chunks(), read_cols)
    return index.drop_duplicates(pa.concat_tables([stored, copies])).select(wanted)


# Files found unreadable in this process, by path, with what they were then (inode, size, mtime): one command
# reads the store many times (a cached sweep once per rung), and one bad file is one warning, not one a read.
# A file replaced or rewritten since (copied again whole, say) is read again.
_UNREADABLE: dict[str, tuple[int, int, int]] = {}


def _known_unreadable(path: str) -> bool:
    """Whether ``path`` was found unreadable in this process and is still that same file."""
    seen = _UNREADABLE.get(path)
    if seen is None:
        return False
    if index.file_identity(path) == seen:
        return True
    del _UNREADABLE[path]
    return False


def _warn_unreadable(bad: list[tuple[str, str]]) -> None:
    """One ``UnreadableRecord`` warning per unreadable file and process (until the file changes)."""
    for path, why in bad:
        identity = index.file_identity(path)
        if identity is not None and _UNREADABLE.get(path) == identity:
            continue
        if identity is not None:
            _UNREADABLE[path] = identity
        warnings.warn(f"skipped unreadable record {path}: {why}", UnreadableRecord, stacklevel=4)
