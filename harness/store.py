"""The results store: one parquet file per run, written atomically, read back in one call.

Layout: ``<results_dir>/runs/<run_id>.parquet``. Every file carries the same explicit schema
(``SCHEMA``), so ``pandas.read_parquet("<results_dir>/runs")`` works as well as :func:`load_runs`.

Schema history (bump ``SCHEMA_VERSION`` when a column changes meaning or type):
  1 - first version: metrics, environment, config, sweep fields, raw step times.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

SCHEMA_VERSION = 1
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
    ladder: str = ""
    rung: int | None = None
    change: str = ""
    round: int | None = None
    cached_from: str = ""
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


def runs_dir(results_dir: str | os.PathLike) -> Path:
    return Path(results_dir) / "runs"


def write_record(record: RunRecord, results_dir: str | os.PathLike) -> Path:
    """Write one record as ``runs/<run_id>.parquet`` atomically (temp file + rename)."""
    if record.status not in STATUSES:
        raise ValueError(f"status {record.status!r} is not one of {STATUSES}")
    return write_records([record], runs_dir(results_dir) / f"{record.run_id}.parquet")


def write_records(records: list[RunRecord], path: str | os.PathLike) -> Path:
    """Write records with the store's schema to ``path`` atomically (temp file in the folder + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table({name: [getattr(r, name) for r in records] for name in COLUMNS}, schema=SCHEMA)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".parquet")
    os.close(fd)
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def load_runs(results_dir: str | os.PathLike = "results"):
    """All records under ``results_dir`` as a pandas DataFrame (empty, with columns, if none)."""
    import pandas as pd

    folder = runs_dir(results_dir)
    files = sorted(str(p) for p in folder.glob("*.parquet")) if folder.is_dir() else []
    if not files:
        return pd.DataFrame({name: pd.Series(dtype=_pandas_dtype(t)) for name, t in zip(COLUMNS, SCHEMA.types)})
    return load_parquet_files(files)


def load_parquet_files(files: list[str]):
    """Records from explicit parquet files; columns missing from older files come back empty."""
    table = ds.dataset(files, schema=SCHEMA, format="parquet").to_table()
    return table.to_pandas()


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
