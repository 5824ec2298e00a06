"""The results store: one parquet file per run, written atomically, read back in one call.

Layout: ``<results_dir>/runs/<run_id>.parquet``. Every file carries the same explicit schema
(``SCHEMA``), so ``pandas.read_parquet("<results_dir>/runs")`` works as well as :func:`load_runs`.

Schema history (bump ``SCHEMA_VERSION`` when a column changes meaning or type):
  1 - first version: metrics, environment, config, sweep fields, raw step times.
  2 - config_hash version 2 (config.CONFIG_HASH_VERSION); env_key covers code_fingerprint and
      threads (new columns); run ids and timestamps in UTC.
  3 - the guide's claims travel with the records: claim_low/high/label/source of the rung,
      total_claim_low/high/label/source of the ladder, and ladder_sha (the ladder file's text hash),
      set at sweep time so that editing a ladder never rewrites old verdicts. Also campaign_id (the
      `sweep -m` campaign a sweep belongs to; a new column, read as "" from older files), and
      group_claims_json (claims for several rungs together, JSON; a new column, "" in older files).
  4 - multi-device runs (``devices`` >= 2, DDP): world_size, dist_backend, samples_per_s_per_device (the slowest
      rank's; samples_per_s is global), slowest_rank, per-rank rank_step_ms_p50/p90, rank_measured_s,
      rank_peak_vram_bytes (peak_vram_bytes is their maximum), omp_num_threads. New columns, empty in older files.

A store must survive what databases survive: a writer killed mid-write leaves only a dot-prefixed
temp file, which readers skip; a record is fsynced before it is renamed into place (and the folder
after), so a crash never leaves a half-written record under a record's name; a record that cannot
be read anyway (copied half-way, disk error) is named in a warning and skipped, and the rest stays
usable. Files get the permissions the umask allows (a results folder is often shared by a team).

Compaction (``python -m harness store compact``, and by itself at the end of a sweep once
``AUTO_COMPACT_LOOSE`` loose files pile up) merges loose run files into
``<results_dir>/compacted/part-<id>.parquet``: reading one file of 10,000 rows costs what reading a few
loose files costs, and every file more costs a footer to parse on every read, so each compaction
rewrites the parts that are not full yet (``PART_ROWS``) together with the loose runs; a full part is
never rewritten. It runs under an exclusive ``flock`` on ``<results_dir>/.compact.lock``, writes each
part durably (fsync + rename) BEFORE it deletes the parts and loose files it merged, and never
touches files that appear while it runs, so a writer never waits and a kill at any point leaves every
run in at least one place. Readers read loose and compacted files together and keep one row per
``run_id`` (identical duplicates are the benign leftovers of an interrupted compaction). After
compaction ``pandas.read_parquet("<results_dir>/runs")`` sees only the loose runs: use
:func:`load_runs`, or read both folders.

Key indexes: beside each part, ``compacted/_index/<part>.keys.parquet`` holds its short key columns
(``INDEX_COLUMNS``) sorted by config_hash in small row groups, so an equality filter on them (the sweep
cache's lookup, the noise calibrations) reads one row group per part instead of a column of every row;
its footer names the part it indexes (name, size, rows), the part's newest sweep (``--sweep latest``)
and its range of sweep ids. It is written durably before its part is renamed into place and deleted
after its part, under the compaction lock; an index that is missing, unreadable or made for another
file of that name is never used: the part itself is scanned (same answers, slower).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from harness.fileio import fsync_dir, umask

SCHEMA_VERSION = 4
STATUSES = ("ok", "oom", "nan", "timeout", "error", "skipped")


@dataclass
class RunRecord:
    """One measured (or attempted) run. Metric names carry their units."""

    run_id: str
    status: str
    timestamp: str
    schema_version: int = SCHEMA_VERSION
    error: str = ""
    # what was run
    workload: str = ""
    size: str = ""
    device: str = ""
    config_hash: str = ""
    config_json: str = "{}"
    env_key: str = ""
    # sweep membership (empty for a plain `run`)
    sweep_id: str = ""
    campaign_id: str = ""  # the campaign (``sweep -m``) the sweep belongs to, "" for a lone sweep
    ladder: str = ""
    rung: int | None = None
    change: str = ""
    round: int | None = None
    cached_from: str = ""
    # the guide's claims at sweep time (schema 2; empty for runs outside a ladder, and in older records)
    claim_low: float | None = None
    claim_high: float | None = None
    claim_label: str = ""
    claim_source: str = ""
    total_claim_low: float | None = None
    total_claim_high: float | None = None
    total_claim_label: str = ""
    total_claim_source: str = ""
    group_claims_json: str = ""  # [{first, last, low, high, label, source}]: claims over several rungs together
    ladder_sha: str = ""  # sha256 (16 hex) of conf/ladder/NAME.yaml's text when the sweep ran
    # units of throughput and model cost
    unit: str = ""  # what units_per_s counts: "voxels" or "images"
    samples_per_step: int | None = None
    flops_per_sample: float | None = None
    # measurement
    warmup_steps: int | None = None
    measured_steps: int | None = None
    samples_per_s: float | None = None
    units_per_s: float | None = None
    step_ms_p50: float | None = None
    step_ms_p90: float | None = None
    step_ms_mean: float | None = None
    data_wait_frac: float | None = None
    data_wait_ms_p50: float | None = None
    compile_s: float | None = None
    first_step_s: float | None = None
    measured_s: float | None = None
    # when the measured window opened (UNIX seconds; it ran measured_s from there): to line a run up with what
    # else the machine did then (other jobs' logs, a monitor's series, a paired process)
    window_start_unix: float | None = None
    peak_vram_bytes: float | None = None
    peak_host_rss_bytes: float | None = None
    peak_main_rss_bytes: float | None = None
    peak_worker_rss_bytes: float | None = None  # the largest loader worker
    worker_rss_bytes: list[float] = field(default_factory=list)  # peak RSS of every loader worker seen
    gpu_util_pct: float | None = None
    gpu_mem_used_bytes: float | None = None
    gpu_power_w: float | None = None
    cpu_util_pct: float | None = None
    other_cpu_pct: float | None = None  # CPU used by other processes during the measured window
    mfu: float | None = None
    peak_flops: float | None = None
    loss_first: float | None = None
    loss_last: float | None = None
    step_ms: list[float] = field(default_factory=list)
    data_wait_ms: list[float] = field(default_factory=list)
    mode: str = "train"  # measure.mode: train, loader (no model) or model (no loader)
    # environment
    torch_version: str = ""
    cuda_version: str = ""
    cudnn_version: str = ""
    monai_version: str = ""
    torchvision_version: str = ""
    python_version: str = ""
    harness_version: str = ""
    gpu_name: str = ""
    gpu_count: int | None = None
    gpu_driver: str = ""
    gpu_mem_total_bytes: float | None = None
    cpu_model: str = ""
    cpu_count: int | None = None
    hostname: str = ""
    git_commit: str = ""
    git_dirty: bool | None = None
    code_fingerprint: str = ""  # hash of the measuring code (harness + models sources), part of env_key
    threads: str = ""  # thread-count variables and CPU affinity the run had, part of env_key
    # GPU memory apart (issue 16): peak_vram_bytes is the measured window's allocated peak; the warm-up
    # (cuDNN benchmark trials, autotuning, graph capture) has its own peaks; reserved = the allocator's cache,
    # what must fit in the device. gpu_mem_used_bytes (NVML) is device-wide.
    peak_vram_reserved_bytes: float | None = None
    warmup_peak_vram_bytes: float | None = None
    warmup_peak_vram_reserved_bytes: float | None = None
    gpu_sample_note: str = ""  # NVML metrics that could not be read (MIG, GPU gone), and why
    # CUDA events (issue 11): per measured step, the device time from the first batch in hand to the optimizer
    # step's end, read after the window's closing sync; device_step_frac = their sum / the measured window
    # (below 1: the stream idled between steps, the host was late).
    device_step_ms: list[float] = field(default_factory=list)
    device_step_ms_p50: float | None = None
    device_step_frac: float | None = None
    # NVML, sampled by the parent in the measured window: mean SM clock, the clock-event (throttle) reasons seen,
    # and GPM's SM activity (Hopper and newer; the share of SM time with a warp resident, window mean).
    gpu_sm_clock_mhz: float | None = None
    gpu_throttle_reasons: str = ""
    gpu_sm_active_pct: float | None = None
    # what the harness itself spent (issue 11): the parent process's CPU time (all its threads: polls, sampling,
    # the progress display) over the measured window as it saw it, in % of one CPU; empty if it missed an edge
    parent_cpu_pct: float | None = None
    backend_flags: str = ""  # JSON: the TF32 / cuDNN settings the run applied, and through which API
    # multi-device runs (schema 4): every rank timed its own window; the slowest sets samples_per_s (global)
    world_size: int | None = None  # ranks (devices); 1 for a single-device run, empty in older records
    dist_backend: str = ""  # nccl (CUDA) or gloo (CPU); "" for a single-device run
    samples_per_s_per_device: float | None = None  # the slowest rank's samples/s
    slowest_rank: int | None = None
    rank_step_ms_p50: list[float] = field(default_factory=list)  # per rank, in rank order
    rank_step_ms_p90: list[float] = field(default_factory=list)
    rank_measured_s: list[float] = field(default_factory=list)
    rank_peak_vram_bytes: list[float] = field(default_factory=list)
    omp_num_threads: int | None = None  # what the launcher gave each rank (torchrun would force 1)


_ARROW_TYPES = {
    "str": pa.string(),
    "int": pa.int64(),
    "int | None": pa.int64(),
    "float | None": pa.float64(),
    "bool | None": pa.bool_(),
    "list[float]": pa.list_(pa.float64()),
}

SCHEMA = pa.schema([pa.field(f.name, _ARROW_TYPES[f.type]) for f in fields(RunRecord)])
COLUMNS = tuple(SCHEMA.names)


class UnreadableRecord(UserWarning):
    """A record file in the store that could not be read (it is skipped)."""


def new_id(prefix: str = "") -> str:
    """A sortable id that cannot collide: UTC time to the microsecond plus 32 random bits."""
    now = time.time()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now)) + f"{int(now % 1 * 1e6):06d}"
    return f"{prefix}{stamp}-{secrets.token_hex(4)}"


def utc_timestamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime())


def runs_dir(results_dir: str | os.PathLike) -> Path:
    return Path(results_dir) / "runs"


def write_record(record: RunRecord, results_dir: str | os.PathLike) -> Path:
    """Write one record as ``runs/<run_id>.parquet`` atomically (temp file + rename)."""
    if record.status not in STATUSES:
        raise ValueError(f"status {record.status!r} is not one of {STATUSES}")
    return write_records([record], runs_dir(results_dir) / f"{record.run_id}.parquet")


MIN_FREE_BYTES = 64 * 2**20  # a record is ~10-200 KB; refuse to start a measurement on a nearly full disk


def check_writable(results_dir: str | os.PathLike) -> None:
    """Before anything is measured: the results folder can take records (ValueError naming why not)."""
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
        raise ValueError(f"results folder {str(results_dir)!r} has {free / 2**20:.0f} MiB free; a sweep needs at least "
                         f"{MIN_FREE_BYTES / 2**20:.0f} MiB. Free some space or choose results_dir=PATH")


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
    import sys
    from dataclasses import asdict

    log = log or (lambda text: print(text, file=sys.stderr))
    try:
        return write_record(record, results_dir)
    except OSError as first:
        reason = f"{first.strerror or first} ({type(first).__name__})"
    for folder in (fallback_dir(), Path(tempfile.gettempdir()) / "harness-unsaved"):
        try:
            path = write_record(record, folder)
        except OSError:
            continue
        log(f"warning: could not write to results folder {str(results_dir)!r}: {reason}. The record of run "
            f"{record.run_id} is saved in {path}; read it with --results {folder}, or copy {path.name} into "
            f"{runs_dir(results_dir)}/ once there is room.")
        return path
    log(f"warning: could not write record {record.run_id} anywhere ({reason}); here it is in full:\n"
        + json.dumps(asdict(record), default=str))
    return None


def write_records(records: list[RunRecord], path: str | os.PathLike) -> Path:
    """Write records with the store's schema to ``path`` atomically (temp file in the folder + rename)."""
    table = pa.table({name: [getattr(r, name) for r in records] for name in COLUMNS}, schema=SCHEMA)
    return _write_table(table, path)


def _write_table(table: pa.Table, path: str | os.PathLike, before_rename=None, **options) -> Path:
    """Write ``table`` to ``path`` atomically and durably: temp file, fsync, rename, fsync of the folder.
    ``before_rename(temp_path)`` runs once the temp file is durable (compaction writes a part's index then)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".parquet")
    try:
        os.fchmod(fd, 0o666 & ~umask())  # mkstemp makes 0600; a shared results folder needs the umask's mode
        with os.fdopen(fd, "wb") as sink:
            pq.write_table(table, sink, **options)
            sink.flush()
            os.fsync(sink.fileno())
        if before_rename:
            before_rename(tmp)
        os.replace(tmp, path)
        fsync_dir(path.parent)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def _parquet_files(folder: Path) -> list[str]:
    """Finished parquet files of a folder, without writers' temp files (dot-prefixed) or anything else."""
    if not folder.is_dir():
        return []
    return sorted(str(p) for p in folder.glob("*.parquet") if not p.name.startswith("."))


def record_files(results_dir: str | os.PathLike) -> list[str]:
    """The loose record files of a store (``runs/``), without writers' temp files or anything else."""
    return _parquet_files(runs_dir(results_dir))


def compacted_dir(results_dir: str | os.PathLike) -> Path:
    return Path(results_dir) / "compacted"


def part_files(results_dir: str | os.PathLike) -> list[str]:
    """The compacted part files of a store (``compacted/``)."""
    return _parquet_files(compacted_dir(results_dir))


Where = dict[str, Any] | ds.Expression | None


def load_runs(results_dir: str | os.PathLike = "results", *, sweep: str | None = None,
              columns: list[str] | tuple[str, ...] | None = None, where: Where = None):
    """Records under ``results_dir`` (loose and compacted, one row per run_id) as a pandas DataFrame
    (empty, with columns, if none).

    ``sweep`` ("latest" or a sweep id) keeps one sweep's records: the sweep is resolved from two
    columns, then only its rows are read (an unknown id is a ValueError listing the valid ones).
    ``columns`` reads only those columns; ``where`` keeps rows whose columns equal the given values
    (``{"sweep_id": "s", "status": ["ok", "oom"]}``; a list, set or tuple means "one of") or that
    match a pyarrow dataset expression. Filters run inside pyarrow, before pandas sees a row; a dict
    ``where`` on the key columns (``INDEX_COLUMNS``) is answered from the parts' key indexes.

    A folder that does not exist is a ValueError (a typo must not read as "no sweep yet").
    """
    if not Path(results_dir).is_dir():
        raise ValueError(f"no such results folder: {str(results_dir)!r} (give --results the folder that holds runs/)")
    reader = _Reader(results_dir)
    expr, terms = _expression(where), _terms(where)
    if sweep is not None:
        sweep_id = resolve_sweep(reader, sweep)
        expr = _and(expr, pc.field("sweep_id") == sweep_id)
        terms = None if terms is None else {**terms, "sweep_id": [sweep_id]}
    table = reader.read(columns, expr, terms)
    if table.num_rows == 0:
        return empty_frame(columns)
    return table.to_pandas()


def newest_ok_sweeps(results_dir: str | os.PathLike, ladder: str) -> dict[str, str] | None:
    """For each environment (env_key), the sweep of its newest ``ok`` run of ``ladder`` (ties: the greatest sweep
    id), from the indexes' footers and the loose files: the noise calibration a table uses, found without reading
    every calibration. None when a record with a sweep has no timestamp (read the rows and decide)."""
    return _Reader(results_dir).newest_ok_sweeps(ladder)


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
        from harness.registry import unknown_choice

        raise unknown_choice(what, wanted, ids[-20:])
    return wanted


def resolve_sweep_id(frame, sweep: str) -> str:
    """``latest`` (the sweep with the newest record) or a sweep id that exists; ValueError otherwise."""
    return resolve_id(frame, "sweep_id", sweep, "sweep", "python -m harness sweep +ladder=NAME")


def resolve_sweep(results_dir, sweep: str) -> str:
    """The id of ``sweep`` ("latest" or an id); ValueError as ``table`` words it.

    Without reading every row: ``latest`` from the loose files and each indexed part's newest sweep (in its
    index's footer), an id from the rows that carry it (parts are sorted by sweep). Only what the footers
    cannot answer (parts without an index, records without a timestamp) or an unknown id (whose error lists
    the valid ones) reads the sweep_id and timestamp of every row."""
    reader = results_dir if isinstance(results_dir, _Reader) else _Reader(results_dir)
    if sweep == "latest":
        newest = reader.newest_sweep()
        if newest != _UNTIMED:
            return resolve_sweep_id(empty_frame(["sweep_id", "timestamp"]), sweep) if newest is None else newest
    elif reader.read(["sweep_id"], pc.field("sweep_id") == sweep, {"sweep_id": [sweep]}).num_rows:
        return sweep
    ids = reader.read(["sweep_id", "timestamp"], pc.field("sweep_id") != "")
    frame = ids.to_pandas() if ids.num_rows else empty_frame(["sweep_id", "timestamp"])
    return resolve_sweep_id(frame, sweep)


_EMPTY = []  # the empty frame, built once: building ~80 typed Series costs ~50 ms, a copy far less


def empty_frame(columns=None):
    import pandas as pd

    if not _EMPTY:
        _EMPTY.append(pd.DataFrame({name: pd.Series(dtype=_pandas_dtype(t)) for name, t in zip(COLUMNS, SCHEMA.types)}))
    return _EMPTY[0][list(COLUMNS if columns is None else columns)].copy()


def _expression(where: Where):
    if where is None or isinstance(where, ds.Expression):
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


Terms = dict[str, list]  # a dict ``where`` as column -> the values it may take; None for an expression


def _terms(where: Where) -> Terms | None:
    if where is None:
        return {}
    if isinstance(where, ds.Expression):
        return None
    return {name: sorted(value) if isinstance(value, (set, frozenset)) else
            list(value) if isinstance(value, (list, tuple)) else [value] for name, value in where.items()}


def _may_hold_sweep(part: str, terms: Terms | None) -> bool:
    """False when ``part``'s index says none of the sweeps asked for is in it (parts are sorted by sweep, so a
    sweep sits in one or two): the part's own footer, far bigger than its index's, is then never parsed."""
    facts = index_facts(part) if terms and "sweep_id" in terms else None
    if not facts or not facts.get("sweeps"):
        return True
    low, high = facts["sweeps"]
    return any(not isinstance(v, str) or low <= v <= high for v in terms["sweep_id"])


def _index_helps(terms: Terms | None) -> bool:
    """A filter on a key column the parts are not sorted by (their own statistics already prune on sweep_id)."""
    return terms is not None and "sweep_id" not in terms and any(name in INDEX_COLUMNS for name in terms)


_UNTIMED = "\0untimed"  # newest_sweep's answer when a sweep's record has no timestamp: the full rule decides


class _Reader:
    """Reads a store's loose and compacted files together, once per file listing.

    Lists ``runs/`` BEFORE ``compacted/``: a run that a concurrent compaction moves is then either
    in a part this listing sees, or its loose file vanishes while being read, which makes the read
    start over with fresh listings (a vanished file is never called unreadable). Unreadable files are
    named in one warning each and skipped by later reads through the same reader. A part's key index
    is used only when it names this very part (name and size, see :func:`index_of`); otherwise, or if
    it cannot be read, the part itself is scanned.
    """

    def __init__(self, results_dir):
        self.results_dir = results_dir
        self.bad: set[str] = set()

    def read(self, columns=None, expr=None, terms: Terms | None = None) -> pa.Table:
        """``columns`` of the rows matching ``expr``; ``terms`` (the same filter as a dict, if it is one) lets
        the key indexes answer."""
        wanted = list(COLUMNS if columns is None else columns)
        unknown = [c for c in wanted if c not in COLUMNS]
        if unknown:
            raise ValueError(f"unknown column {unknown[0]!r}; valid choices: {', '.join(COLUMNS)}")
        read_cols = wanted if "run_id" in wanted else wanted + ["run_id"]  # run_id drops duplicates
        use_index = _index_helps(terms)

        def attempt(loose, parts):
            parts = [p for p in parts if _may_hold_sweep(p, terms)]
            indexed = {p: i for p in parts if use_index and (i := index_of(p)) is not None}
            table, bad, vanished = _scan(loose + [p for p in parts if p not in indexed], read_cols, expr)
            if indexed:
                more, more_bad, more_vanished = _scan_indexed(indexed, read_cols, expr, terms)
                table = pa.concat_tables([table, more])
                bad, vanished = bad + more_bad, vanished + more_vanished
            return table, bad, vanished

        return _drop_duplicates(self._listed(attempt)).select(wanted)

    def newest_sweep(self) -> str | None:
        """The sweep of the newest record (ties: the greatest id), None if no record has a sweep, ``_UNTIMED``
        if a record with a sweep has no timestamp. Loose files and parts without a usable index are read (two
        columns); an indexed part answers from its index's footer."""

        def attempt(loose, parts):
            facts = {p: index_facts(p) for p in parts}
            scanned = loose + [p for p in parts if facts[p] is None]
            table, bad, vanished = _scan(scanned, ["sweep_id", "timestamp"], pc.field("sweep_id") != "")
            stamps = table.column("timestamp")
            if stamps.null_count or any(f["untimed"] for f in facts.values() if f):
                return _UNTIMED, bad, vanished
            newest = [(t, s) for t, s in zip(stamps.to_pylist(), table.column("sweep_id").to_pylist())]
            newest += [tuple(f["newest"]) for f in facts.values() if f and f["newest"]]
            return (max(newest)[1] if newest else None), bad, vanished

        return self._listed(attempt)

    def newest_ok_sweeps(self, ladder: str) -> dict[str, str] | None:
        """{env_key: the sweep of its newest ok run of ``ladder``}; None if a record with a sweep has no timestamp.
        Read as :meth:`newest_sweep` is: indexed parts answer from their index's footer."""

        def attempt(loose, parts):
            facts = {p: index_facts(p) for p in parts}
            scanned = loose + [p for p in parts if facts[p] is None]
            expr = (pc.field("ladder") == ladder) & (pc.field("status") == "ok") & (pc.field("sweep_id") != "")
            table, bad, vanished = _scan(scanned, ["env_key", "timestamp", "sweep_id"], expr)
            if table.column("timestamp").null_count or any(f["untimed"] for f in facts.values() if f):
                return None, bad, vanished
            rows = zip(*(table.column(c).to_pylist() for c in ("env_key", "timestamp", "sweep_id")))
            pairs = [(env or "", [stamp, sweep_id]) for env, stamp, sweep_id in rows]
            pairs += [(env, pair) for f in facts.values() if f for env, pair in f["newest_ok"].get(ladder, {}).items()]
            newest: dict[str, list[str]] = {}
            for env, pair in pairs:
                newest[env] = max(newest.get(env, pair), pair)
            return {env: pair[1] for env, pair in newest.items()}, bad, vanished

        return self._listed(attempt)

    def _listed(self, attempt):
        """``attempt(loose files, parts)`` on fresh listings until no file vanished while it read; warns of the
        unreadable files (once per reader)."""
        for _attempt in range(5):  # a compaction per attempt would have to finish within one read: 5 is plenty
            loose = [f for f in record_files(self.results_dir) if f not in self.bad]
            parts = [f for f in part_files(self.results_dir) if f not in self.bad]
            result, bad, vanished = attempt(loose, parts)
            if not vanished:
                break
        for path, why in bad:
            self.bad.add(path)
            warnings.warn(f"skipped unreadable record {path}: {why}", UnreadableRecord, stacklevel=4)
        return result


def _scan(files: list[str], columns: list[str], expr) -> tuple[pa.Table, list[tuple[str, str]], list[str]]:
    """One fast read of all files; if it fails, each file on its own: (table, unreadable, vanished)."""
    empty = SCHEMA.empty_table().select(columns)
    if not files:
        return empty, [], []
    try:
        return ds.dataset(files, schema=SCHEMA, format="parquet").to_table(columns=columns, filter=expr), [], []
    except (OSError, ValueError, pa.ArrowException):
        pass
    good, bad, vanished = [], [], []
    for path in files:
        try:
            good.append(ds.dataset([path], schema=SCHEMA, format="parquet").to_table(columns=columns, filter=expr))
        except (OSError, ValueError, pa.ArrowException) as exc:
            if not os.path.exists(path):
                vanished.append(path)  # compacted (or removed) since the listing: not a damaged record
            else:
                bad.append((path, str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__))
    return (pa.concat_tables(good) if good else empty), bad, vanished


def _drop_duplicates(table: pa.Table) -> pa.Table:
    """One row per run_id, the first one read (loose files are read first)."""
    ids = table.column("run_id")
    if table.num_rows < 2 or pc.count_distinct(ids).as_py() == table.num_rows:
        return table
    indexed = table.select(["run_id"]).append_column("_row", pa.array(range(table.num_rows), type=pa.int64()))
    first = indexed.group_by("run_id", use_threads=False).aggregate([("_row", "min")]).column("_row_min")
    return table.take(pc.take(first, pc.sort_indices(first)))  # the kept row numbers, in reading order


def load_parquet_files(files: list[str]):
    """Records from explicit parquet files; columns missing from older files come back empty.

    One fast read of all files; if any file is unreadable, each is read on its own and the bad
    ones are skipped with an ``UnreadableRecord`` warning that names them.
    """
    table, bad, vanished = _scan(list(files), list(COLUMNS), None)
    for path, why in bad:
        warnings.warn(f"skipped unreadable record {path}: {why}", UnreadableRecord, stacklevel=2)
    for path in vanished:
        warnings.warn(f"skipped unreadable record {path}: no such file", UnreadableRecord, stacklevel=2)
    if table.num_rows == 0:
        return empty_frame()
    return table.to_pandas()


def load_records(results_dir: str | os.PathLike, *, where: Where = None) -> list[RunRecord]:
    """The records matching ``where`` (as :func:`load_runs` filters) as RunRecords, built from arrow rows without
    pandas: copying one cached record costs a fraction of a millisecond instead of ~10 (a frame's to_dict)."""
    if not Path(results_dir).is_dir():
        raise ValueError(f"no such results folder: {str(results_dir)!r} (give --results the folder that holds runs/)")
    table = _Reader(results_dir).read(None, _expression(where), _terms(where))
    return [RunRecord(**{f.name: _from_pandas(row.get(f.name), f.type) for f in fields(RunRecord)})
            for row in table.to_pylist()]


def records_from_frame(frame) -> list[RunRecord]:
    """Turn DataFrame rows back into RunRecords (for copying cached runs, baselines)."""
    out = []
    for row in frame.to_dict(orient="records"):
        kwargs = {}
        for f in fields(RunRecord):
            value = row.get(f.name)
            kwargs[f.name] = _from_pandas(value, f.type)
        out.append(RunRecord(**kwargs))
    return out


def _from_pandas(value: Any, type_name: str) -> Any:
    import math

    if type_name == "list[float]":
        return [float(v) for v in value] if value is not None else []
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "" if type_name == "str" else None
    if type_name == "str":
        return str(value)
    if type_name.startswith("int"):
        return int(value)
    if type_name.startswith("float"):
        return float(value)
    if type_name.startswith("bool"):
        return bool(value)
    return value


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


# ------------------------------------------------------------------------------------------
# Key indexes

INDEX_DIR = "_index"  # in compacted/: pyarrow's dataset discovery (pandas.read_parquet) skips names starting with _
INDEX_COLUMNS = ("run_id", "sweep_id", "timestamp", "config_hash", "env_key", "status", "cached_from", "ladder")
INDEX_SCHEMA = pa.schema([SCHEMA.field(name) for name in INDEX_COLUMNS])
INDEX_ROW_GROUP = 256  # rows per row group of an index: a config_hash's few rows sit in one, which its statistics find
INDEX_VERSION = 1
_INDEX_KEY = b"harness.index"  # the index's facts (JSON) in its footer's key-value metadata
_FACTS = ("version", "part", "part_bytes", "part_rows", "newest", "untimed", "sweeps", "newest_ok")
_FOOTERS: dict[str, tuple[tuple[int, int, int], Any]] = {}  # path -> (inode, size, mtime, parsed footer)


def index_path(part: str | os.PathLike) -> Path:
    """Where the key index of a compacted part lives: ``compacted/_index/<part>.keys.parquet``."""
    part = Path(part)
    return part.parent / INDEX_DIR / f"{part.stem}.keys.parquet"


def _footer(path: str | os.PathLike):
    """The parsed parquet footer of ``path``, kept while the file is the same one (same inode, size and mtime):
    parts and indexes are never rewritten in place, so a process reading the store again parses nothing twice."""
    st = os.stat(path)
    key = (st.st_ino, st.st_size, st.st_mtime_ns)
    hit = _FOOTERS.get(str(path))
    if hit and hit[0] == key:
        return hit[1]
    metadata = pq.read_metadata(path)
    if len(_FOOTERS) > 4096:  # parts are few (20,000 runs each); a bound anyway
        _FOOTERS.clear()
    _FOOTERS[str(path)] = (key, metadata)
    return metadata


def index_state(part: str | os.PathLike) -> tuple[str, dict | None]:
    """("ok", facts) when ``part``'s key index is there, readable and made for this very part (its name and
    size, and as many rows); else ("missing" | "unreadable" | "stale", None): readers then scan the part."""
    path = index_path(part)
    if not path.exists():
        return "missing", None
    try:
        metadata = _footer(path)
        facts = json.loads((metadata.metadata or {})[_INDEX_KEY])
        size = os.stat(part).st_size
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException):
        return ("unreadable" if path.exists() else "missing"), None
    fits = (isinstance(facts, dict) and facts.get("version") == INDEX_VERSION and facts.get("part") == Path(part).name
            and facts.get("part_bytes") == size and facts.get("part_rows") == metadata.num_rows
            and metadata.schema.names == list(INDEX_COLUMNS) and all(k in facts for k in _FACTS))
    return ("ok", facts) if fits else ("stale", None)


def index_facts(part: str | os.PathLike) -> dict | None:
    """The facts (``_FACTS``, see :func:`_index_table`) of ``part``'s usable key index, or None."""
    return index_state(part)[1]


def index_of(part: str | os.PathLike) -> Path | None:
    """``part``'s key index if it can be used, else None (the part itself is scanned)."""
    return index_path(part) if index_facts(part) is not None else None


def _index_table(part: pa.Table, part_name: str, part_bytes: int) -> pa.Table:
    """The key columns of a part, sorted by config_hash, with the facts that let readers trust and skip it:
    which part (name, size, rows) it indexes, the part's newest sweep (what ``--sweep latest`` needs), the
    range of its sweep ids (a sweep's reads skip the parts that cannot hold it), and the newest ok sweep of
    each ladder and environment (the noise calibration a table uses)."""
    keys = part.select(list(INDEX_COLUMNS)).sort_by([("config_hash", "ascending"), ("timestamp", "ascending")])
    swept = keys.filter(pc.field("sweep_id") != "")
    pairs = list(zip(swept.column("timestamp").to_pylist(), swept.column("sweep_id").to_pylist()))
    timed = [pair for pair in pairs if pair[0] is not None]
    sweeps = pc.min_max(keys.column("sweep_id"))
    facts = dict(version=INDEX_VERSION, part=part_name, part_bytes=part_bytes, part_rows=keys.num_rows,
                 newest=list(max(timed)) if timed else None, untimed=len(pairs) - len(timed),
                 sweeps=[sweeps["min"].as_py(), sweeps["max"].as_py()] if sweeps["min"].is_valid else None,
                 newest_ok=_newest_ok(swept.filter(pc.field("status") == "ok")))
    return keys.replace_schema_metadata({_INDEX_KEY: json.dumps(facts)})


def _newest_ok(keys: pa.Table) -> dict[str, dict[str, list[str]]]:
    """{ladder: {env_key: [timestamp, sweep_id] of its newest run}} of ok runs with a sweep and a timestamp:
    what :func:`newest_ok_sweeps` needs of a part (a few entries: ladders x environments)."""
    newest: dict[str, dict[str, list[str]]] = {}
    columns = (keys.column(c).to_pylist() for c in ("ladder", "env_key", "timestamp", "sweep_id"))
    for ladder, env, stamp, sweep_id in zip(*columns):
        by_env = newest.setdefault(ladder or "", {})
        if stamp is not None and [stamp, sweep_id] > by_env.get(env or "", ["", ""]):
            by_env[env or ""] = [stamp, sweep_id]
    return newest


def _write_index(part: pa.Table, part_path: Path, part_bytes: int) -> Path:
    """Write ``part``'s key index atomically (it names the part and its size: a stale index is never used)."""
    table = _index_table(_conform(part), Path(part_path).name, part_bytes)
    return _write_table(table, index_path(part_path), row_group_size=INDEX_ROW_GROUP)


def _may_hold(statistics, values: list) -> bool:
    """Whether a row group whose column has these statistics may hold one of ``values`` (True if unsure)."""
    if statistics is None or not statistics.has_min_max:
        return True
    low, high = statistics.min, statistics.max
    try:
        if len(values) > 16:  # many values (compaction's run ids): their range against the row group's
            present = [v for v in values if v is not None]
            return len(present) < len(values) or not present or not (max(present) < low or min(present) > high)
        return any(v is None or low <= v <= high for v in values)
    except TypeError:
        return True


def _index_rows(index: Path, terms: Terms, expr, columns: list[str]) -> pa.Table:
    """``columns`` of the rows of an index matching ``expr`` (over index columns), reading only the row groups
    whose statistics may hold ``terms``."""
    metadata = _footer(index)
    names = metadata.schema.names
    groups = [g for g in range(metadata.num_row_groups)
              if all(_may_hold(metadata.row_group(g).column(names.index(name)).statistics, values)
                     for name, values in terms.items())]
    if not groups:
        return INDEX_SCHEMA.empty_table().select(columns)
    with pq.ParquetFile(index, metadata=metadata) as source:
        table = source.read_row_groups(groups, columns=sorted(set(columns) | set(terms)), use_threads=False)
    return (table.filter(expr) if expr is not None else table).select(columns)


def _scan_indexed(indexed: dict[str, Path], columns: list[str], expr,
                  terms: Terms) -> tuple[pa.Table, list[tuple[str, str]], list[str]]:
    """Rows of indexed parts: the index finds the matching runs; only if more than the key columns are asked
    for (or filtered on) is the part read, and then only for those runs. An index that cannot be read falls
    back to scanning its part. (table, unreadable, vanished) as :func:`_scan`."""
    key_terms = {name: values for name, values in terms.items() if name in INDEX_COLUMNS}
    key_expr = _expression({name: values[0] if len(values) == 1 else values for name, values in key_terms.items()})
    from_index = set(columns) <= set(INDEX_COLUMNS) and set(terms) <= set(INDEX_COLUMNS)
    tables, narrowed, fallback, vanished = [], [], [], []
    for part, index in indexed.items():
        try:
            keys = _index_rows(index, key_terms, key_expr, columns if from_index else ["run_id", "sweep_id"])
        except (OSError, ValueError, pa.ArrowException):
            (fallback if os.path.exists(part) and os.path.exists(index) else vanished).append(part)
            continue
        if keys.num_rows and from_index:
            tables.append(keys)
        elif keys.num_rows:
            ids, sweeps = pc.unique(keys.column("run_id")), pc.unique(keys.column("sweep_id"))
            narrowed.append((part, _and(expr, pc.field("sweep_id").isin(sweeps) & pc.field("run_id").isin(ids))))
    bad = []
    for part, part_expr in narrowed + [(part, expr) for part in fallback]:
        table, part_bad, part_vanished = _scan([part], columns, part_expr)
        tables.append(table)
        bad += part_bad
        vanished += part_vanished
    empty = SCHEMA.empty_table().select(columns)
    return (pa.concat_tables([t.cast(empty.schema) for t in tables]) if tables else empty), bad, vanished


@dataclass
class Reindexing:
    """What :func:`reindex` did."""

    indexed: list[str] = field(default_factory=list)  # parts given a (new) key index
    orphans: int = 0  # indexes of parts that are gone, removed
    unreadable: list[str] = field(default_factory=list)  # parts that could not be read: left without an index
    busy: bool = False

    def summary(self) -> str:
        if self.busy:
            return "another compaction is running; skipped"
        text = f"indexed {len(self.indexed)} part(s)" if self.indexed else "every part has its key index"
        if self.orphans:
            text += f"; removed {self.orphans} index file(s) of parts that are gone"
        if self.unreadable:
            text += f"; could not read {len(self.unreadable)} part(s): {', '.join(self.unreadable[:3])}"
        return text


def reindex(results_dir: str | os.PathLike, wait: bool = True, every: bool = False) -> Reindexing:
    """Give every compacted part without a usable key index (an older store, a damaged index) a new one, or with
    ``every`` each part (an index that ``store verify`` found unequal to its part), and remove the indexes of
    parts that are gone; under the compaction lock (``wait=False``: skip if busy)."""
    with _compaction_lock(results_dir, wait) as locked:
        return _reindex_locked(results_dir, every) if locked else Reindexing(busy=True)


def _reindex_locked(results_dir, every: bool = False) -> Reindexing:
    done = Reindexing()
    parts = part_files(results_dir)
    for part in parts:
        if not every and index_facts(part) is not None:
            continue
        try:
            keys = ds.dataset([part], schema=SCHEMA, format="parquet").to_table(columns=list(INDEX_COLUMNS))
            _write_index(keys, Path(part), os.stat(part).st_size)
            done.indexed.append(part)
        except (OSError, ValueError, pa.ArrowException):
            done.unreadable.append(part)  # `store verify` names it
    folder = compacted_dir(results_dir) / INDEX_DIR
    kept = {index_path(part).name for part in parts}
    for index in sorted(folder.glob("*.keys.parquet")) if folder.is_dir() else []:
        if index.name not in kept:  # under the lock no part is being written: its part is gone for good
            index.unlink(missing_ok=True)
            done.orphans += 1
    if done.indexed or done.orphans:
        fsync_dir(folder)
    return done


# ------------------------------------------------------------------------------------------
# Compaction

AUTO_COMPACT_LOOSE = 500  # loose files that make the end of a sweep compact the store (a few seconds of work)
PART_ROW_GROUP = 1024  # rows per row group: a sweep's rows sit in one or two, which a sweep_id filter picks out
PART_ROWS = 20_000  # a part this full is sealed: later compactions leave it alone, which bounds their rewriting
LOCK_NAME = ".compact.lock"


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
    indexed: int = 0  # parts that had no usable key index and were given one
    already: int = 0  # of the removed loose files, those whose runs were all in parts already

    def summary(self) -> str:
        if self.busy:
            return "another compaction is running; skipped"
        indexed = f"; indexed {self.indexed} part(s) that had no key index" if self.indexed else ""
        if not (self.merged or self.removed or self.unreadable or self.conflicts):
            return "nothing to compact: no loose run files" + indexed
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
        return text + indexed


def compact(results_dir: str | os.PathLike, wait: bool = True, min_loose: int = 1) -> Compaction:
    """Merge the loose run files of ``results_dir``, and the parts not full yet, into compacted part files,
    each with its key index; then index the parts that have none (older stores, a kill midway).

    Under an exclusive lock on ``<results_dir>/.compact.lock``; with ``wait=False`` a busy lock means
    "skip" (``busy=True``). Merges nothing unless at least ``min_loose`` loose files are there.
    """
    with _compaction_lock(results_dir, wait) as locked:
        if not locked:
            return Compaction(busy=True)
        loose = record_files(results_dir)  # files that appear from now on are left for the next compaction
        done = _compact_locked(results_dir, loose) if len(loose) >= max(min_loose, 1) else Compaction()
        done.indexed = len(_reindex_locked(results_dir).indexed)
        return done


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


def _compact_locked(results_dir, loose: list[str]) -> Compaction:
    done = Compaction()
    tables, sources = [], []
    for path in loose:
        try:
            tables.append(pq.ParquetFile(path).read())  # its own schema: columns newer than this code are kept
            sources.append(path)
        except (OSError, ValueError, pa.ArrowException):
            if os.path.exists(path):
                done.unreadable.append(path)
    if not tables:
        return done
    table = _conform(pa.concat_tables(tables, promote_options="permissive"))
    ids_of = {path: t.column("run_id").to_pylist() for path, t in zip(sources, tables)}
    # runs a part already holds (an interrupted compaction): remove their loose copy if identical, never merge twice
    already = _read_parts(results_dir, sorted({r for ids in ids_of.values() for r in ids}))
    in_parts, conflicting = set(), set()
    if already.num_rows:
        held = {r["run_id"]: r for r in already.select(list(COLUMNS)).to_pylist()}
        keep_rows = []
        for i, row in enumerate(table.select(list(COLUMNS)).to_pylist()):
            if row["run_id"] not in held:
                keep_rows.append(i)
            else:
                (in_parts if _same(held[row["run_id"]], row) else conflicting).add(row["run_id"])
        table = table.take(pa.array(keep_rows, type=pa.int64()))
    done.conflicts = [p for p in sources if set(ids_of[p]) & conflicting]
    _sealed, open_parts = _open_parts(results_dir)
    open_tables = []
    for path in list(open_parts):
        try:
            open_tables.append(pq.ParquetFile(path).read())
        except (OSError, ValueError, pa.ArrowException):
            open_parts.remove(path)  # left alone; `store verify` names it
    merged_loose = set(table.column("run_id").to_pylist())
    if open_tables:
        table = _conform(pa.concat_tables([table] + open_tables, promote_options="permissive"))
    table = _drop_duplicates(table)
    # sorted by sweep: a sweep's rows share a row group or two, and a sweep_id filter skips the others
    table = table.sort_by([("sweep_id", "ascending"), ("timestamp", "ascending")])
    for start in range(0, table.num_rows, PART_ROWS):
        path = compacted_dir(results_dir) / f"part-{new_id()}.parquet"
        part = table.slice(start, PART_ROWS)
        _write_table(part, path, row_group_size=PART_ROW_GROUP,
                     before_rename=lambda tmp, p=path, t=part: _index_new_part(t, p, tmp))
        done.parts.append(str(path))
        _compaction_step("part-written", path=path)
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
        index_path(path).unlink(missing_ok=True)  # after its part: a listed part's index is there or never was
        _compaction_step("index-removed", path=path)
    fsync_dir(compacted_dir(results_dir))
    if open_parts:
        fsync_dir(compacted_dir(results_dir) / INDEX_DIR)
    settled = merged_loose | in_parts
    remove = [p for p in sources if p not in done.conflicts and all(r in settled for r in ids_of[p])]
    for path in remove:
        try:
            os.unlink(path)
            done.removed += 1
            done.already += all(r in in_parts for r in ids_of[path])
        except FileNotFoundError:
            pass
        _compaction_step("loose-removed", path=path)
    fsync_dir(runs_dir(results_dir))
    return done


def _index_new_part(part: pa.Table, path: Path, tmp: str) -> None:
    """Between a new part's durable temp file and its rename: its index is written first, so a part is never
    seen without the index it was made with (a kill here leaves an index of no part, which is never read)."""
    _compaction_step("part-temp-written", path=path)
    _write_index(part, path, os.path.getsize(tmp))
    _compaction_step("index-written", path=path)


def _open_parts(results_dir) -> tuple[list[str], list[str]]:
    """(sealed or unreadable parts, parts with room): a part's row count is in its footer."""
    sealed, room = [], []
    for path in part_files(results_dir):
        try:
            rows = pq.ParquetFile(path).metadata.num_rows
        except (OSError, ValueError, pa.ArrowException):
            rows = PART_ROWS
        (sealed if rows >= PART_ROWS else room).append(path)
    return sealed, room


def _conform(table: pa.Table) -> pa.Table:
    """The store's columns first with the store's types (missing ones empty), then any newer columns as they are."""
    out = []
    for f in SCHEMA:
        out.append(table.column(f.name).cast(f.type) if f.name in table.column_names
                   else pa.nulls(table.num_rows, type=f.type))
    extra = [n for n in table.column_names if n not in COLUMNS]
    names = list(COLUMNS) + extra
    return pa.table(out + [table.column(n) for n in extra], names=names)


def _read_parts(results_dir, run_ids: list[str]) -> pa.Table:
    """The rows of the parts that hold these runs (the key indexes find them without reading every part)."""
    parts = part_files(results_dir)
    if not parts or not run_ids:
        return SCHEMA.empty_table()
    expr = pc.field("run_id").isin(pa.array(run_ids, pa.string()))
    indexed = {p: i for p in parts if (i := index_of(p)) is not None}
    table, _bad, _vanished = _scan([p for p in parts if p not in indexed], list(COLUMNS), expr)
    more, _bad, _vanished = _scan_indexed(indexed, list(COLUMNS), expr, {"run_id": run_ids})
    return pa.concat_tables([table, more])


def _same(a: dict, b: dict) -> bool:
    """Two rows equal, NaN equal to NaN (a record copied by compaction compares equal to its source)."""
    import math

    def norm(v):
        return None if isinstance(v, float) and math.isnan(v) else v

    return all(norm(a.get(k)) == norm(b.get(k)) for k in COLUMNS)


def maybe_compact(results_dir: str | os.PathLike, threshold: int | None = None) -> Compaction | None:
    """Compact if at least ``threshold`` (``AUTO_COMPACT_LOOSE``) loose files are there and no one else is
    compacting (never waits)."""
    threshold = AUTO_COMPACT_LOOSE if threshold is None else threshold
    if len(record_files(results_dir)) < threshold:
        return None
    return compact(results_dir, wait=False, min_loose=threshold)
