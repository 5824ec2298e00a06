"""``store verify``: every file of a store read on its own, duplicates compared, copies matched to their originals,
leftovers named.

A problem (exit 1) is what makes answers wrong or runs unreadable: a file that cannot be read, a run_id stored
twice with different values. A note is what readers already handle: identical copies left by an interrupted
compaction, temp files of killed writers, key index files an older version wrote (never read now).
"""

from __future__ import annotations

import os
import shlex
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq

from harness.store.compact import OLD_INDEX_DIR
from harness.store.record import COLUMNS, conform, same_values
from harness.store.write import compacted_dir, copy_files, part_files, record_files, runs_dir

Rows = dict[str, list[tuple[str, dict]]]  # run_id -> (file, row) of every copy


def verify(results_dir: str | os.PathLike) -> tuple[str, list[str]]:
    """Read every file on its own; (report, problems). Identical duplicates are noted, not problems."""
    files = record_files(results_dir) + part_files(results_dir)
    rows, versions, problems = _read_every_file(files)
    conflicts, benign = _duplicates(rows)
    problems += conflicts + _check_copies(copy_files(results_dir), rows)
    notes = []
    if benign:
        notes.append(f"{benign} run(s) stored twice with identical values (left by an interrupted compaction; "
                     f"readers count them once; `{_compact_command(results_dir)}` removes the loose copies)")
    notes += _leftovers(results_dir)
    listed = sorted(versions.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))
    head = [f"verified {len(files)} files ({len(rows)} runs) and {len(copy_files(results_dir))} files of copies in "
            f"{results_dir}",
            "schema versions: " + (", ".join(f"{v} ({n} rows)" for v, n in listed) or "-")]
    tail = [f"problem: {p}" for p in problems] + [f"note: {n}" for n in notes]
    tail.append(f"{len(problems)} problem(s) found" if problems else "ok: no problem found")
    return "\n".join(head + tail), problems


def _read_table(path: str, problems: list[str]) -> pa.Table | None:
    """The parquet file at ``path``, or None with its problem added (a file that cannot be read)."""
    try:
        return pq.ParquetFile(path).read()
    except (OSError, ValueError, pa.ArrowException) as exc:
        problems.append(f"unreadable: {path}: {str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}")
        return None


def _read_every_file(files: list[str]) -> tuple[Rows, Counter, list[str]]:
    """(the rows of every file by run_id, rows per schema version, problems of the files that are no records)."""
    rows: Rows = {}
    versions: Counter = Counter()
    problems = []
    for path in files:
        table = _read_table(path, problems)
        if table is None:
            continue
        if "run_id" not in table.column_names:
            problems.append(f"not a run record (no run_id column): {path}")
            continue
        for row in conform(table).select(list(COLUMNS)).to_pylist():
            rows.setdefault(row["run_id"], []).append((path, row))
            versions[row["schema_version"]] += 1
    return rows, versions, problems


def _check_copies(files: list[str], rows: Rows) -> list[str]:
    """Problems of the copies sweeps stored (``copies/``): a file that cannot be read, a copy whose original run is
    not in the store (readers leave it out)."""
    problems = []
    for path in files:
        table = _read_table(path, problems)
        if table is None:
            continue
        if not {"run_id", "cached_from"} <= set(table.column_names):
            problems.append(f"not a file of copies (no run_id and cached_from columns): {path}")
            continue
        for run_id, original in zip(table["run_id"].to_pylist(), table["cached_from"].to_pylist()):
            if original not in rows:
                problems.append(f"copy {run_id!r} in {path} names run {original!r}, which is not in the store: "
                                "readers leave the copy out")
    return problems


def _duplicates(rows: Rows) -> tuple[list[str], int]:
    """(problems: run_ids stored with different values, runs stored more than once identically)."""
    problems, benign = [], 0
    for run_id, copies in rows.items():
        if len(copies) < 2:
            continue
        if all(same_values(copies[0][1], row) for _, row in copies[1:]):
            benign += 1
        else:
            problems.append(f"run_id {run_id!r} is stored {len(copies)} times with different values: "
                            + ", ".join(path for path, _ in copies))
    return problems, benign


def _leftovers(results_dir) -> list[str]:
    """Notes on the files readers skip: temp files of interrupted writes, an older version's key indexes."""
    notes = []
    loose_temps = sorted(runs_dir(results_dir).glob(".tmp-*.parquet")) if runs_dir(results_dir).is_dir() else []
    if loose_temps:
        notes.append(f"{len(loose_temps)} temp file(s) of interrupted writes in {runs_dir(results_dir)} (ignored by "
                     f"readers, safe to delete once no writer runs): {', '.join(str(p) for p in loose_temps[:3])}")
    folder = compacted_dir(results_dir)
    part_temps = sorted(folder.glob(".tmp-*.parquet")) if folder.is_dir() else []
    old = folder / OLD_INDEX_DIR
    old_files = sorted(p for p in old.iterdir() if p.is_file()) if old.is_dir() else []
    if part_temps or old_files:
        what = [f"{len(part_temps)} temp file(s) of an interrupted compaction"] if part_temps else []
        what += [f"{len(old_files)} key index file(s) of an older version in {old}"] if old_files else []
        notes.append(f"{' and '.join(what)} (never read; `{_compact_command(results_dir)}` removes them)")
    return notes


def _compact_command(results_dir) -> str:
    return f"python -m harness store compact --results {shlex.quote(str(results_dir))}"
