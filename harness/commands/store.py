"""``python -m harness store compact|info|verify|reindex [--results DIR]``: look after the results store.

  compact  merge loose run files (runs/) into compacted parts (compacted/), each with its key index,
           under a lock; safe while sweeps write (they never wait; new files are left for the next
           compaction); also indexes the parts that have no key index
  info     runs, sweeps, size on disk, loose and compacted files, key indexes, oldest and newest timestamp
  verify   every file readable, no run_id twice with different values (identical copies are the
           benign leftovers of an interrupted compaction), schema versions, every key index equal
           to its part; exit 1 on a problem (a missing or stale index is a note: readers scan the part)
  reindex  rebuild the key index of every part (compacted/_index/), under the compaction lock

Exit codes: 0 fine, 1 verify found a problem, 2 bad input. No torch, no Hydra.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from harness import store

ACTIONS = ("compact", "info", "verify", "reindex")


def main(command: str, argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m harness {command}", description=__doc__.split("\n\n")[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", help=f"one of: {', '.join(ACTIONS)}")
    parser.add_argument("--results", default="results", help="results folder (default: results)")
    parser.add_argument("--no-wait", action="store_true", help="compact, reindex: skip if another compaction is "
                        "running")
    args = parser.parse_args(argv)
    if args.action not in ACTIONS:
        from harness.registry import unknown_choice

        print(f"error: {unknown_choice('store action', args.action, ACTIONS)}", file=sys.stderr)
        return 2
    if not Path(args.results).is_dir():
        print(f"error: no such results folder: {args.results!r} (give --results the folder that holds runs/)",
              file=sys.stderr)
        return 2
    if args.action == "compact":
        print(store.compact(args.results, wait=not args.no_wait).summary())
        return 0
    if args.action == "reindex":
        print(store.reindex(args.results, wait=not args.no_wait, every=True).summary())
        return 0
    if args.action == "info":
        print(info(args.results))
        return 0
    text, problems = verify(args.results)
    print(text)
    return 1 if problems else 0


def _size(files: list[str]) -> int:
    total = 0
    for f in files:
        try:
            total += Path(f).stat().st_size
        except OSError:
            pass
    return total


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} KiB"


def info(results_dir: str) -> str:
    """A few lines about a store, read from four columns."""
    loose, parts = store.record_files(results_dir), store.part_files(results_dir)
    frame = store.load_runs(results_dir, columns=["run_id", "sweep_id", "timestamp", "schema_version"])
    sweeps = frame["sweep_id"].fillna("")
    stamps = sorted(t for t in frame["timestamp"].fillna("") if t)
    versions = Counter(int(v) for v in frame["schema_version"].dropna())
    lines = [f"store {results_dir}",
             f"  runs:            {len(frame)} ({int((sweeps == '').sum())} outside any sweep)",
             f"  sweeps:          {sweeps[sweeps != ''].nunique()}",
             f"  loose files:     {len(loose)} in {store.runs_dir(results_dir)} ({_mib(_size(loose))})",
             f"  compacted files: {len(parts)} in {store.compacted_dir(results_dir)} ({_mib(_size(parts))})",
             f"  key indexes:     {_index_line(parts, results_dir)}",
             f"  size on disk:    {_mib(_size(loose) + _size(parts))}",
             f"  oldest, newest:  {stamps[0] if stamps else '-'}, {stamps[-1] if stamps else '-'}",
             f"  schema versions: {', '.join(f'{v} ({n} runs)' for v, n in sorted(versions.items())) or '-'}"]
    if len(loose) >= store.AUTO_COMPACT_LOOSE:
        lines.append(f"  {len(loose)} loose files: `python -m harness store compact --results {results_dir}` "
                     "makes reading faster")
    return "\n".join(lines)


def _index_line(parts: list[str], results_dir: str) -> str:
    states = Counter(store.index_state(part)[0] for part in parts)
    line = f"{states['ok']} of {len(parts)} parts"
    if states["ok"] < len(parts):
        line += (" (" + ", ".join(f"{n} {state}" for state, n in sorted(states.items()) if state != "ok")
                 + f": those parts are scanned; `python -m harness store reindex --results {results_dir}`)")
    return line


def _verify_indexes(results_dir: str) -> tuple[list[str], list[str]]:
    """(problems, notes) of the key indexes: one that readers would use but that differs from its part is a
    problem (wrong answers); a missing, stale or unreadable one is a note (readers scan the part instead)."""
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    problems, unusable = [], []
    columns = list(store.INDEX_COLUMNS)
    order = [(c, "ascending") for c in columns]
    parts = store.part_files(results_dir)
    for part in parts:
        state, _facts = store.index_state(part)
        if state != "ok":
            unusable.append(f"{part} ({state})")
            continue
        try:
            index = pq.read_table(store.index_path(part)).select(columns)
            keys = ds.dataset([part], schema=store.SCHEMA, format="parquet").to_table(columns=columns)
        except (OSError, ValueError, pa.ArrowException):
            continue  # an unreadable part is named above; an unreadable index is "unreadable", not "ok"
        if not index.sort_by(order).equals(keys.sort_by(order)):
            problems.append(f"key index {store.index_path(part)} differs from its part {part}: lookups would answer "
                            f"from it; `python -m harness store reindex --results {results_dir}` rebuilds it")
    notes = []
    if unusable:
        notes.append(f"{len(unusable)} part(s) without a usable key index, which readers scan instead (same answers, "
                     f"slower): {', '.join(unusable[:3])}; `python -m harness store reindex --results {results_dir}` "
                     "writes them")
    folder = store.compacted_dir(results_dir) / store.INDEX_DIR
    kept = {store.index_path(part).name for part in parts}
    orphans = [p for p in sorted(folder.glob("*.keys.parquet")) if p.name not in kept] if folder.is_dir() else []
    if orphans:
        notes.append(f"{len(orphans)} key index file(s) of parts that are gone (left by an interrupted compaction; "
                     f"never read; the next compaction removes them): {', '.join(str(p) for p in orphans[:3])}")
    return problems, notes


def verify(results_dir: str) -> tuple[str, list[str]]:
    """Read every file on its own; (report, problems). Identical duplicates are noted, not problems."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = store.record_files(results_dir) + store.part_files(results_dir)
    problems, notes = [], []
    rows: dict[str, list[tuple[str, dict]]] = {}
    versions: Counter = Counter()
    for path in files:
        try:
            table = pq.ParquetFile(path).read()
        except (OSError, ValueError, pa.ArrowException) as exc:
            problems.append(f"unreadable: {path}: {str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}")
            continue
        if "run_id" not in table.column_names:
            problems.append(f"not a run record (no run_id column): {path}")
            continue
        table = store._conform(table).select(list(store.COLUMNS))
        for row in table.to_pylist():
            rows.setdefault(row["run_id"], []).append((path, row))
            versions[row["schema_version"]] += 1
    benign = 0
    for run_id, copies in rows.items():
        if len(copies) < 2:
            continue
        if all(store._same(copies[0][1], row) for _, row in copies[1:]):
            benign += 1
        else:
            problems.append(f"run_id {run_id!r} is stored {len(copies)} times with different values: "
                            + ", ".join(path for path, _ in copies))
    if benign:
        notes.append(f"{benign} run(s) stored twice with identical values (left by an interrupted compaction; "
                     f"readers count them once; `python -m harness store compact --results {results_dir}` removes "
                     "the loose copies)")
    index_problems, index_notes = _verify_indexes(results_dir)
    problems += index_problems
    notes += index_notes
    folders = (store.runs_dir(results_dir), store.compacted_dir(results_dir),
               store.compacted_dir(results_dir) / store.INDEX_DIR)
    temps = [p for folder in folders if folder.is_dir() for p in folder.glob(".tmp-*.parquet")]
    if temps:
        notes.append(f"{len(temps)} temp file(s) of interrupted writes (ignored by readers, safe to delete once no "
                     f"writer runs): {', '.join(str(p) for p in temps[:3])}")
    listed = sorted(versions.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))
    head = [f"verified {len(files)} files ({len(rows)} runs) in {results_dir}",
            "schema versions: " + (", ".join(f"{v} ({n} rows)" for v, n in listed) or "-")]
    tail = [f"problem: {p}" for p in problems] + [f"note: {n}" for n in notes]
    tail.append(f"{len(problems)} problem(s) found" if problems else "ok: no problem found")
    return "\n".join(head + tail), problems
