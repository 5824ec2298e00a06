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
      `sweep -m` campaign a sweep belongs to; a new column, read as "" from older files).

A store must survive what databases survive: a writer killed mid-write leaves only a dot-prefixed
temp file, which readers skip; a record is fsynced before it is renamed into place (and the folder
after), so a crash never leaves a half-written record under a record's name; a record that cannot
be read anyway (copied half-way, disk error) is named in a warning and skipped, and the rest stays
usable. Files get the permissions the umask allows (a results folder is often shared by a team).
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
import time
import warnings
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

SCHEMA_VERSION = 3
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
    backend_flags: str = ""  # JSON: the TF32 / cuDNN settings the run applied, and through which API


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
    import json
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
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table({name: [getattr(r, name) for r in records] for name in COLUMNS}, schema=SCHEMA)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".parquet")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; a shared results folder needs the umask's mode
        with os.fdopen(fd, "wb") as sink:
            pq.write_table(table, sink)
            sink.flush()
            os.fsync(sink.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_dir(folder: Path) -> None:
    """Make the rename itself durable (POSIX); a no-op where folders cannot be opened."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def record_files(results_dir: str | os.PathLike) -> list[str]:
    """The record files of a store, without writers' temp files (dot-prefixed) or anything else."""
    folder = runs_dir(results_dir)
    if not folder.is_dir():
        return []
    return sorted(str(p) for p in folder.glob("*.parquet") if not p.name.startswith("."))


def load_runs(results_dir: str | os.PathLike = "results"):
    """All records under ``results_dir`` as a pandas DataFrame (empty, with columns, if none).

    A folder that does not exist is a ValueError (a typo must not read as "no sweep yet").
    """
    if not Path(results_dir).is_dir():
        raise ValueError(f"no such results folder: {str(results_dir)!r} (give --results the folder that holds runs/)")
    files = record_files(results_dir)
    if not files:
        return empty_frame()
    return load_parquet_files(files)


def empty_frame():
    import pandas as pd

    return pd.DataFrame({name: pd.Series(dtype=_pandas_dtype(t)) for name, t in zip(COLUMNS, SCHEMA.types)})


def load_parquet_files(files: list[str]):
    """Records from explicit parquet files; columns missing from older files come back empty.

    One fast read of all files; if any file is unreadable, each is read on its own and the bad
    ones are skipped with an ``UnreadableRecord`` warning that names them.
    """
    try:
        return ds.dataset(files, schema=SCHEMA, format="parquet").to_table().to_pandas()
    except (OSError, ValueError, pa.ArrowException):
        pass
    good = []
    for path in files:
        try:
            good.append(ds.dataset([path], schema=SCHEMA, format="parquet").to_table())
        except (OSError, ValueError, pa.ArrowException) as exc:
            warnings.warn(f"skipped unreadable record {path}: {str(exc).splitlines()[0][:200]}", UnreadableRecord,
                          stacklevel=2)
    if not good:
        return empty_frame()
    return pa.concat_tables(good).to_pandas()


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
