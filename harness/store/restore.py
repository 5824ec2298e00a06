"""``store import``: a record that its results folder refused, put back into a store.

When a write fails after a measurement, the record goes to the fallback folder (a parquet file) or, if that fails
too, is printed as JSON (see :func:`harness.store.write.store_record`). :func:`import_record` takes either, checks
that it reads as a run record, writes each run as a loose file of the store durably, and reads it back.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from harness.store.read import read_table
from harness.store.record import COLUMNS, SCHEMA, STATUSES, RunRecord, conform, same_values
from harness.store.write import parquet_files, runs_dir, write_table

HOW = "give a record file from the fallback folder, or the JSON a failed write printed"
KINDS = {"str": "a string", "int": "an integer", "int | None": "an integer or null", "float | None": "a number or null",
         "bool | None": "true, false or null", "list[float]": "a list of numbers"}


@dataclass
class Imported:
    """What :func:`import_record` did."""

    written: list[str] = field(default_factory=list)  # the loose files written, one a run
    already: list[str] = field(default_factory=list)  # run_ids the store held with the same values: not written

    def summary(self, source: str) -> str:
        """One line for the user."""
        text = (f"imported {len(self.written)} run(s) into {', '.join(self.written)}, read back equal"
                if self.written else "imported nothing")
        if self.already:
            text += f"; already in the store with the same values: {', '.join(self.already)}"
        if os.path.isfile(source):
            text += f"; {source} can be deleted"
        return text


def import_record(source: str, results_dir: str | os.PathLike) -> Imported:
    """Put the record(s) of ``source`` (a parquet file, a file holding a record's JSON, or that JSON itself) into
    the store at ``results_dir``. ValueError, one line, when ``source`` is not a record or the store holds one
    of its runs with other values; nothing is written then."""
    table = _check_records(_read_source(source), source)
    done = Imported()
    held = _held(results_dir, table.column("run_id").to_pylist())
    fresh = []
    for i, row in enumerate(table.select(list(COLUMNS)).to_pylist()):
        if row["run_id"] not in held:
            fresh.append(i)
        elif same_values(held[row["run_id"]], row):
            done.already.append(row["run_id"])
        else:
            raise ValueError(f"run {row['run_id']!r} of {_name(source)} is already in {str(results_dir)!r} with "
                             "other values; nothing imported (`python -m harness store verify` compares stored copies)")
    for i in fresh:
        path = runs_dir(results_dir) / f"{table.column('run_id')[i].as_py()}.parquet"
        if path.exists():  # a file of that name that no read could use: never overwritten
            raise ValueError(f"{path} exists but is not readable as run {path.stem!r}; nothing imported "
                             f"(`python -m harness store verify --results {results_dir}` names it)")
    for i in fresh:
        done.written.append(str(_write_checked(table.slice(i, 1), results_dir)))
    return done


def _name(source: str) -> str:
    return repr(source) if os.path.exists(source) or len(source) <= 60 else "the JSON given"


def _read_source(source: str) -> pa.Table:
    """The table of ``source``: a parquet file, or a record's JSON (in a file or given as is)."""
    path = Path(source)
    if os.path.isdir(source):
        inside = (parquet_files(runs_dir(path)) or parquet_files(path))[:3]
        raise ValueError(f"{source!r} is a folder; give one of its record files"
                         + (f", e.g. {', '.join(inside)}" if inside else " (it holds none)"))
    if os.path.isfile(source):
        try:
            with open(path, "rb") as head:
                magic = head.read(4)
            if magic == b"PAR1":
                return pq.read_table(path)
            text = path.read_text()
        except (OSError, ValueError, pa.ArrowException) as exc:
            raise ValueError(f"{source!r} is not a readable record: {str(exc).splitlines()[0][:200]}; {HOW}") from None
    elif source.lstrip().startswith("{"):
        text = source
    else:
        raise ValueError(f"no such file, and not a record's JSON: {_name(source)}; {HOW}")
    return _from_json(text, source)


def _from_json(text: str, source: str) -> pa.Table:
    """One record's JSON (as a failed write prints it: every field by name) as a one-row table of the schema."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{_name(source)} is neither parquet nor JSON ({exc}); {HOW}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{_name(source)} is JSON but not one record (an object of its fields); {HOW}")
    unknown = sorted(set(data) - set(COLUMNS))
    if unknown:
        raise ValueError(f"{_name(source)} has fields that are not record columns: {', '.join(unknown[:5])}; "
                         "a record of a newer harness imports with that harness")
    defaults = RunRecord(run_id="", status="ok", timestamp="")
    columns = {}
    for f in fields(RunRecord):
        value = data.get(f.name, getattr(defaults, f.name))
        try:
            columns[f.name] = pa.array([value], type=SCHEMA.field(f.name).type)
        except (pa.ArrowException, TypeError, ValueError):
            raise ValueError(f"field {f.name!r} of {_name(source)} is {value!r}, not {KINDS[f.type]}") from None
    return pa.table(columns, schema=SCHEMA)


def _check_records(table: pa.Table, source: str) -> pa.Table:
    """``table`` in the store's schema (newer columns kept), if every row is a run record; ValueError if not."""
    missing = [c for c in ("run_id", "status", "timestamp") if c not in table.column_names]
    if missing:
        raise ValueError(f"{_name(source)} is not a run record: no {', '.join(missing)} column; {HOW}")
    try:
        table = conform(table)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise ValueError(f"{_name(source)} does not fit the record's columns: {str(exc).splitlines()[0][:200]}") \
            from None
    if not table.num_rows:
        raise ValueError(f"{_name(source)} holds no record; {HOW}")
    for row in table.select(["run_id", "status"]).to_pylist():
        run_id, status = row["run_id"], row["status"]
        if not run_id or "/" in run_id or run_id.startswith(".") or run_id != run_id.strip():
            raise ValueError(f"{_name(source)} has run_id {run_id!r}, which cannot name a record file")
        if status not in STATUSES:
            raise ValueError(f"{_name(source)} has status {status!r} for run {run_id!r}; valid choices: "
                             f"{', '.join(STATUSES)}")
    ids = table.column("run_id").to_pylist()
    if len(set(ids)) < len(ids):
        raise ValueError(f"{_name(source)} holds a run_id twice; {HOW}")
    return table


def _held(results_dir, run_ids: list[str]) -> dict[str, dict]:
    """The store's rows of these runs, by run_id."""
    return {row["run_id"]: row for row in read_table(results_dir, where={"run_id": run_ids}).to_pylist()}


def _write_checked(row: pa.Table, results_dir) -> Path:
    """Write one run's row as its loose file, then read the file back: it must hold that very row."""
    expected = row.select(list(COLUMNS)).to_pylist()[0]
    path = write_table(row, runs_dir(results_dir) / f"{expected['run_id']}.parquet")
    try:
        back = conform(pq.read_table(path)).select(list(COLUMNS)).to_pylist()
    except (OSError, ValueError, pa.ArrowException) as exc:
        back, why = [], str(exc).splitlines()[0][:200]
    else:
        why = "it reads back with other values"
    if len(back) != 1 or not same_values(back[0], expected):
        path.unlink(missing_ok=True)
        raise ValueError(f"run {expected['run_id']!r} was written to {path} but {why}; the file is removed")
    return path
