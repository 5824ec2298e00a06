"""Where records go and how they get there: ids, durable writes, the fallback folder.

Layout: ``<results_dir>/runs/<run_id>.parquet`` (one loose file per run, written by whoever measured it),
``<results_dir>/compacted/part-<id>.parquet`` (many runs a file, written by compaction),
``<results_dir>/copies/<sweep_id>.parquet`` (the runs a sweep copied from the store, a few columns each) and
``<results_dir>/copies/compacted/part-<id>.parquet`` (many sweeps' copies, merged by compaction).

A store must survive what databases survive: a writer killed mid-write leaves only a dot-prefixed temp file,
which readers skip; a record is fsynced before it is renamed into place (and the folder after), so a crash never
leaves a half-written record under a record's name. Files get the permissions the umask allows (a results
folder is often shared by a team). A record its results folder refuses (full, read-only, gone) goes to the
fallback folder, or is printed whole; ``python -m harness store import`` puts it back.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import shlex
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from harness.fileio import fsync_dir, umask
from harness.store.record import COLUMNS, COPY_COLUMNS, COPY_SCHEMA, SCHEMA, STATUSES, RunRecord

MIN_FREE_BYTES = 64 * 2**20  # a record is ~10-200 KB; refuse to start a measurement on a nearly full disk
COPIES_LOCK = ".lock"  # in copies/: see copies_locked
KEPT_ELSEWHERE: list[str] = []  # how to put back each record this process could not write to its results folder


def new_id(prefix: str = "") -> str:
    """A sortable id that cannot collide: UTC time to the microsecond plus 32 random bits."""
    now = time.time()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now)) + f"{int(now % 1 * 1e6):06d}"
    return f"{prefix}{stamp}-{secrets.token_hex(4)}"


def utc_timestamp() -> str:
    """Now, in UTC, as records store it."""
    return time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime())


def runs_dir(results_dir: str | os.PathLike) -> Path:
    """The folder of a store's loose record files."""
    return Path(results_dir) / "runs"


def compacted_dir(results_dir: str | os.PathLike) -> Path:
    """The folder of a store's compacted part files."""
    return Path(results_dir) / "compacted"


def parquet_files(folder: Path) -> list[str]:
    """Finished parquet files of a folder, without writers' temp files (dot-prefixed) or anything else."""
    if not folder.is_dir():
        return []
    return sorted(str(p) for p in folder.glob("*.parquet") if not p.name.startswith("."))


def record_files(results_dir: str | os.PathLike) -> list[str]:
    """The loose record files of a store (``runs/``), without writers' temp files or anything else."""
    return parquet_files(runs_dir(results_dir))


def part_files(results_dir: str | os.PathLike) -> list[str]:
    """The compacted part files of a store (``compacted/``)."""
    return parquet_files(compacted_dir(results_dir))


def copies_dir(results_dir: str | os.PathLike) -> Path:
    """The folder of a store's copies: one file per sweep of the runs it copied instead of measuring them."""
    return Path(results_dir) / "copies"


def copy_parts_dir(results_dir: str | os.PathLike) -> Path:
    """The folder of the parts compaction merged sweeps' copies into."""
    return copies_dir(results_dir) / "compacted"


def sweep_copy_files(results_dir: str | os.PathLike) -> list[str]:
    """The files of copies sweeps write, one a sweep (``copies/<sweep_id>.parquet``)."""
    return parquet_files(copies_dir(results_dir))


def copy_files(results_dir: str | os.PathLike) -> list[str]:
    """Every file of copies of a store: the sweeps' own (``copies/``), then the parts (``copies/compacted/``)."""
    return sweep_copy_files(results_dir) + parquet_files(copy_parts_dir(results_dir))


@contextmanager
def copies_locked(results_dir: str | os.PathLike):
    """An exclusive ``flock`` on a store's copies (``copies/.lock``): a sweep adding a copy (milliseconds) and a
    compaction merging the sweeps' files take turns, so that no copy written meanwhile is merged away."""
    folder = copies_dir(results_dir)
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / COPIES_LOCK, os.O_RDWR | os.O_CREAT, 0o666)  # 0o666 & ~umask, like the records
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def write_record(record: RunRecord, results_dir: str | os.PathLike) -> Path:
    """Write one record as ``runs/<run_id>.parquet`` atomically (temp file + rename)."""
    if record.status not in STATUSES:
        raise ValueError(f"status {record.status!r} is not one of {STATUSES}")
    return write_records([record], runs_dir(results_dir) / f"{record.run_id}.parquet")


def write_records(records: list[RunRecord], path: str | os.PathLike) -> Path:
    """Write records with the store's schema to ``path`` atomically (temp file in the folder + rename)."""
    table = pa.table({name: [getattr(r, name) for r in records] for name in COLUMNS}, schema=SCHEMA)
    return write_table(table, path)


def write_table(table: pa.Table, path: str | os.PathLike, before_rename=None, **options) -> Path:
    """Write ``table`` to ``path`` atomically and durably: temp file, fsync, rename, fsync of the folder.
    ``before_rename(temp_path)`` runs once the temp file is durable (a test hook of compaction). The table is
    remembered with what the file is (:func:`written`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".parquet")
    try:
        os.fchmod(fd, 0o666 & ~umask())  # mkstemp makes 0600; a shared results folder needs the umask's mode
        with os.fdopen(fd, "wb") as sink:
            pq.write_table(table, sink, **options)
            sink.flush()
            os.fsync(sink.fileno())
            st = os.fstat(sink.fileno())  # the file as it will be under ``path``: a rename keeps all three
        if before_rename:
            before_rename(tmp)
        os.replace(tmp, path)
        fsync_dir(path.parent)
        _remember(str(path), (st.st_ino, st.st_size, st.st_mtime_ns), table)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


# The files this process wrote last, each with what it was when written (inode, size, mtime in ns) and its table: a
# reader bringing its snapshot of the store up to date takes a changed file's rows from here while the file is still
# that very file, instead of reading back what was just written (a cached sweep rewrites its file of copies once a
# rung, and read it back each time: ~5 ms a read on a 2-core CPU). Small tables only: a compaction's parts are read.
_WRITTEN: dict[str, tuple[tuple[int, int, int], pa.Table]] = {}
KEPT_WRITTEN = 32  # files
KEPT_WRITTEN_ROWS = 10_000  # rows a file


def _remember(path: str, identity: tuple[int, int, int], table: pa.Table) -> None:
    _WRITTEN.pop(path, None)
    if table.num_rows <= KEPT_WRITTEN_ROWS:
        _WRITTEN[path] = identity, table
    while len(_WRITTEN) > KEPT_WRITTEN:
        del _WRITTEN[next(iter(_WRITTEN))]  # the oldest


def forget_written() -> None:
    """Forget every table this process wrote (a fresh process's view of the store)."""
    _WRITTEN.clear()


def written(path: str, identity: tuple[int, int, int]) -> pa.Table | None:
    """The table this process wrote to ``path`` if the file there is still the one it wrote (``identity``: what the
    file is now), else None: read it."""
    kept = _WRITTEN.get(path)
    return kept[1] if kept is not None and kept[0] == identity else None


def copy_of(original: RunRecord, **labels) -> RunRecord:
    """The copy a session stores of ``original`` instead of measuring it again: a new id and time, the turn's labels
    (what ``COPY_COLUMNS`` holds: every other column is the original's, so :func:`store_copy` keeps the copy as those
    alone). ValueError for a label beyond them."""
    beyond = sorted(set(labels) - set(COPY_COLUMNS))
    if beyond:
        raise ValueError(f"a copy sets only the store's COPY_COLUMNS; not {', '.join(beyond)}")
    return replace(original, run_id=new_id(), timestamp=utc_timestamp(), cached_from=original.run_id, **labels)


def store_copy(record: RunRecord, results_dir: str | os.PathLike, log=None) -> Path | None:
    """Store a run a sweep copied from the store (``cached_from`` names the original) as its ``COPY_COLUMNS`` alone,
    one row added to its sweep's file of copies (``copies/<sweep_id>.parquet``, read and written again whole,
    atomically: a sweep's runs are made one after another by one process). Readers put it back together from its
    original. Where that file cannot be written, the whole record goes where any record goes (``store_record``)."""
    if not record.cached_from:
        raise ValueError(f"run {record.run_id} is no copy (its cached_from is empty): store it with store_record")
    path = copies_dir(results_dir) / f"{record.sweep_id or 'no-sweep'}.parquet"
    row = pa.table({name: [getattr(record, name)] for name in COPY_COLUMNS}, schema=COPY_SCHEMA)
    try:
        with copies_locked(results_dir):  # a compaction may merge the file away: read and write in one turn
            table = pa.concat_tables([pq.read_table(path, schema=COPY_SCHEMA), row]) if path.exists() else row
            return write_table(table, path)
    except (OSError, pa.ArrowException):
        return store_record(record, results_dir, log)


def check_writable(results_dir: str | os.PathLike, command: str = "a measurement") -> None:
    """Before anything is measured: the results folder can take records (ValueError naming why not);
    ``command``: what is about to run, as the refusal names it."""
    folder = runs_dir(results_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".probe-")
        try:
            os.write(fd, b"\0" * 4096)
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(probe)
        free = shutil.disk_usage(folder).free
    except OSError as exc:
        raise ValueError(f"results folder {str(results_dir)!r} cannot take records: {exc.strerror or exc} "
                         f"({type(exc).__name__}); choose another with results_dir=PATH") from None
    if free < MIN_FREE_BYTES:
        raise ValueError(f"results folder {str(results_dir)!r} has {free / 2**20:.0f} MiB free; {command} needs at "
                         f"least {MIN_FREE_BYTES / 2**20:.0f} MiB. Free some space or choose results_dir=PATH")


def fallback_dir() -> Path:
    """Where a record goes when its results folder refuses it (``HARNESS_FALLBACK_DIR`` to choose)."""
    chosen = os.environ.get("HARNESS_FALLBACK_DIR")
    if chosen:
        return Path(chosen)
    return Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state")) / "harness" / "unsaved"


def store_record(record: RunRecord, results_dir: str | os.PathLike, log=None) -> Path | None:
    """Write a record; if the results folder refuses it (full, read-only, gone), save it to the
    fallback folder instead, and if that fails too print it whole: a finished measurement is never lost.
    Returns where it was written (None if only printed)."""
    log = log or (lambda text: print(text, file=sys.stderr))
    try:
        return write_record(record, results_dir)
    except OSError as first:
        reason = f"{first.strerror or first} ({type(first).__name__})"
    put_back = f"python -m harness store import {{}} --results {shlex.quote(str(results_dir))}"
    for folder in (fallback_dir(), Path(tempfile.gettempdir()) / "harness-unsaved"):
        try:
            path = write_record(record, folder)
        except OSError:
            continue
        log(f"warning: could not write to results folder {str(results_dir)!r}: {reason}. The record of run "
            f"{record.run_id} is saved in {path}; read it with --results {shlex.quote(str(folder))}, or once there "
            f"is room put it back with `{put_back.format(shlex.quote(str(path)))}`.")
        KEPT_ELSEWHERE.append(put_back.format(shlex.quote(str(path))))
        return path
    whole = json.dumps(asdict(record), default=str)
    log(f"warning: could not write record {record.run_id} anywhere ({reason}); here it is in full, as the command "
        f"that puts it back once there is room:\n{put_back.format(shlex.quote(whole))}")
    KEPT_ELSEWHERE.append(f"the `store import` of record {record.run_id} printed above")
    return None
