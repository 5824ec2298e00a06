"""``python -m harness store compact|info|verify|import [--results DIR]``: look after the results store.

  compact  merge loose run files (runs/) into compacted parts (compacted/) under a lock; safe while sweeps
           write (they never wait; new files are left for the next compaction); also removes the temp files
           of killed compactions and the key indexes an older version wrote (compacted/_index/)
  info     runs, sweeps, size on disk, loose and compacted files, oldest and newest timestamp
  verify   every file readable, no run_id twice with different values (identical copies are the
           benign leftovers of an interrupted compaction), schema versions; exit 1 on a problem
  import   FILE_OR_JSON: put back a record its results folder refused, a file of the fallback folder or the
           JSON a failed write printed; it must read as a record, and reads back equal once written

Exit codes: 0 fine, 1 verify found a problem, 2 bad input. No torch, no Hydra.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from pathlib import Path

from harness import shell, store
from harness.store.verify import verify
from harness.registry import unknown_choice

ACTIONS = ("compact", "info", "verify", "import")


def main(command: str, argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m harness {command}", description=__doc__.split("\n\n")[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", nargs="?", help=f"one of: {', '.join(ACTIONS)}")
    parser.add_argument("source", nargs="?", metavar="FILE_OR_JSON", help="import: the record to put back")
    parser.add_argument("--results", default="results", help="results folder (default: results)")
    parser.add_argument("--no-wait", action="store_true", help="compact: skip if another compaction is running")
    args = parser.parse_args(argv)
    problem = _bad_input(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    if args.action == "compact":
        return _emit(store.compact(args.results, wait=not args.no_wait).summary())
    if args.action == "info":
        return _emit(info(args.results))
    if args.action == "import":
        try:
            done = store.import_record(args.source, args.results)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return _emit(done.summary(args.source))
    text, problems = verify(args.results)
    return _emit(text, 1 if problems else 0)


def _bad_input(args) -> str | None:
    """The one-line error for a mistake in the command line, before anything runs; None if it is fine."""
    if args.action is None:
        return f"store needs an action; valid choices: {', '.join(sorted(ACTIONS))}"
    if args.action not in ACTIONS:
        return str(unknown_choice("store action", args.action, ACTIONS))
    if args.action == "import" and not args.source:
        return "store import needs the record to put back: a file of the fallback folder, or the JSON a failed write " \
               "printed"
    if args.action != "import" and args.source is not None:
        return f"store {args.action} takes no argument, got {args.source[:60]!r}; only import takes FILE_OR_JSON"
    if not Path(args.results).is_dir():
        return f"no such results folder: {args.results!r} (give --results the folder that holds runs/)"
    return None


def _emit(text: str, code: int = 0) -> int:
    """Print ``text`` and return ``code``; a reader that stopped early (``store info | head``) ends it quietly,
    without a traceback or an 'Exception ignored' at exit."""
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # the interpreter's last flush at exit then goes nowhere
            os.close(devnull)
        except (OSError, ValueError):
            pass  # a stdout without a file descriptor has nothing left to flush into a closed pipe
    return code


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
    loose, parts, copies = store.record_files(results_dir), store.part_files(results_dir), store.copy_files(results_dir)
    frame = store.load_runs(results_dir, columns=["run_id", "sweep_id", "timestamp", "schema_version", "cached_from"])
    sweeps = frame["sweep_id"].fillna("")
    stamps = sorted(t for t in frame["timestamp"].fillna("") if t)
    versions = Counter(int(v) for v in frame["schema_version"].dropna())
    lines = [f"store {results_dir}",
             f"  runs:            {len(frame)} ({int((sweeps == '').sum())} outside any sweep)",
             f"  sweeps:          {sweeps[sweeps != ''].nunique()}",
             f"  loose files:     {len(loose)} in {store.runs_dir(results_dir)} ({_mib(_size(loose))})",
             f"  compacted files: {len(parts)} in {store.compacted_dir(results_dir)} ({_mib(_size(parts))})",
             f"  copies:          {int((frame['cached_from'].fillna('') != '').sum())} runs copied from the store by "
             f"sweeps, {len(copies)} files in {store.copies_dir(results_dir)} ({_mib(_size(copies))})",
             f"  size on disk:    {_mib(_size(loose) + _size(parts) + _size(copies))}",
             f"  oldest, newest:  {stamps[0] if stamps else '-'}, {stamps[-1] if stamps else '-'}",
             f"  schema versions: {', '.join(f'{v} ({n} runs)' for v, n in sorted(versions.items())) or '-'}"]
    if len(loose) >= store.AUTO_COMPACT_LOOSE:
        lines.append(f"  {len(loose)} loose files: `{shell.command('store', 'compact', '--results', results_dir)}` "
                     "makes reading faster")
    return "\n".join(lines)
