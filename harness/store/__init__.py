"""The results store: one parquet file per run, written atomically, read back in one call.

``<results_dir>/runs/<run_id>.parquet`` holds the runs as they are measured, ``<results_dir>/compacted/`` the
parts compaction merged them into, ``<results_dir>/copies/`` the runs sweeps copied from the store instead of
measuring them (a few columns each); readers read all three, one row per ``run_id``.

  record   the ``RunRecord`` schema, ``SCHEMA_VERSION`` and the schema's history
  write    ids, durable writes, the fallback folder for a record its results folder refuses
  index    the process's snapshot of a store's short columns, which most reads answer from
  read     filters, ``latest``, :func:`load_runs` and friends
  compact  merging loose files into parts under a lock
  verify   ``store verify``: every file read on its own
  restore  ``store import``: a fallback record put back

Import the names from here (``from harness.store import load_runs``). Tests that replace a module's global
(``PART_ROWS``, ``_compaction_step``) must set it on that module, e.g.
``importlib.import_module("harness.store.compact")``: ``harness.store.compact`` is the function.
"""

from harness.store.record import COLUMNS, COPY_COLUMNS, SCHEMA, SCHEMA_VERSION, STATUSES, RunRecord
from harness.store.write import (MIN_FREE_BYTES, check_writable, compacted_dir, copies_dir, copies_locked, copy_files,
                                 copy_of, copy_parts_dir, fallback_dir, new_id, part_files, record_files, runs_dir,
                                 store_copy, store_record, sweep_copy_files, utc_timestamp, write_record, write_records)
from harness.store.read import (UnreadableRecord, Where, empty_frame, load_parquet_files, load_records, load_runs,
                                newest_ok_sweeps, read_table, records_from_frame, resolve_id, resolve_sweep,
                                resolve_sweep_id, select_sweep)
from harness.store.compact import AUTO_COMPACT_LOOSE, LOCK_NAME, PART_ROWS, Compaction, compact, maybe_compact
from harness.store.restore import Imported, import_record

__all__ = [
    "AUTO_COMPACT_LOOSE", "COLUMNS", "COPY_COLUMNS", "LOCK_NAME", "MIN_FREE_BYTES", "PART_ROWS", "SCHEMA",
    "SCHEMA_VERSION", "STATUSES", "Compaction", "Imported", "RunRecord", "UnreadableRecord", "Where",
    "check_writable", "compact", "compacted_dir", "copies_dir", "copies_locked", "copy_files", "copy_of",
    "copy_parts_dir",
    "empty_frame", "fallback_dir",
    "import_record", "load_parquet_files", "load_records", "load_runs", "maybe_compact", "new_id",
    "newest_ok_sweeps", "part_files", "read_table", "record_files", "records_from_frame", "resolve_id",
    "resolve_sweep", "resolve_sweep_id", "runs_dir", "select_sweep", "store_copy", "store_record", "sweep_copy_files",
    "utc_timestamp", "write_record", "write_records",
]
