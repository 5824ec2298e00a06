"""The run record: one measured (or attempted) run, its columns and their parquet types.

Every record file carries the same explicit schema (``SCHEMA``), so ``pandas.read_parquet("<results_dir>/runs")``
works as well as :func:`harness.store.load_runs`; a file written by an older version lacks the newer columns,
which read back empty.

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
      Also noise_calibration_id, noise_cv, noise_df: the noise calibration a sweep chose when it started (new
      columns; noise_df is empty in older files, 0 where the sweep had none), so a later calibration never
      rewrites an old verdict; auto_max_rounds, the round budget of a sweep.repeats=auto sweep.
      Later, new columns in version 4: memory_limit_gb (the run's memory.limit_gb), cuda_alloc_retries and cuda_ooms
      (the CUDA caching allocator's counters); empty in older files. cpu_bf16: the CPU's bf16 units as its flags
      name them ("avx512_bf16 amx_bf16"), "none" (bf16 emulated), "" unknown and in older files. Then settings_hash
      (what a gate compares a config by: config_hash without the user's own code; read as config_hash where empty),
      user_code_fingerprint and user_code_files (the user's code a run ran, beside code_fingerprint); empty in older
      files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import pyarrow as pa

from harness.metrics import Metrics

SCHEMA_VERSION = 4
STATUSES = ("ok", "oom", "nan", "timeout", "error", "skipped")


@dataclass
class RunIdentity:
    """What was run, the sweep or paired check it belongs to, and the guide's claims at sweep time (a record's first
    columns)."""

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
    # what a gate compares a config by: config_hash with the user's own code left out (config.settings_hash); "" in
    # older records, read as their config_hash
    settings_hash: str = ""
    # memory.limit_gb: the device memory (GiB) the run's allocator was capped at, a smaller card's on a bigger one;
    # None: no cap (and in records older than it)
    memory_limit_gb: float | None = None
    # sweep membership (empty for a plain `run`)
    sweep_id: str = ""
    campaign_id: str = ""  # the campaign (``sweep -m``) the sweep belongs to, "" for a lone sweep
    ladder: str = ""
    rung: int | None = None
    change: str = ""
    round: int | None = None
    cached_from: str = ""
    # `check --against REF` (empty otherwise): which side of the paired check the run measured ("ref": REF's code,
    # "work": the working tree's), and that side's commit of the measured repository (40 hex; "-dirty" appended when
    # the working tree had uncommitted changes). The measured repository is the user's, not the harness's own:
    # git_commit stays the harness's.
    against_side: str = ""
    against_commit: str = ""
    # the guide's claims at sweep time (schema 2; empty for runs outside a ladder, and in older records)
    claim_low: float | None = None
    claim_high: float | None = None
    claim_label: str = ""
    claim_source: str = ""
    # the part of the step the rung's claim is about: "" the whole step; data, compute or validation (a guide's
    # "2-3x in data loading", "1.5x on matmul", "2x during validation"); "" in older records
    claim_component: str = ""
    total_claim_low: float | None = None
    total_claim_high: float | None = None
    total_claim_label: str = ""
    total_claim_source: str = ""
    # [{first, last, low, high, label, source[, component]}]: claims over several rungs together; a claim with no
    # figure ("minor") has a label and null low/high, as claim_low/claim_high are empty beside claim_label
    group_claims_json: str = ""
    ladder_sha: str = ""  # sha256 (16 hex) of conf/ladder/NAME.yaml's text when the sweep ran
    # the noise calibration (``python -m harness noise``) the sweep chose when it started: its sweep id, its CV of
    # samples/s and degrees of freedom (runs - 1); noise_df 0 when none fitted, None in records older than these
    noise_calibration_id: str = ""
    noise_cv: float | None = None
    noise_df: float | None = None
    auto_max_rounds: int | None = None  # sweep.repeats=auto: the round budget its looks spent alpha over; else None
    # units of throughput and model cost
    unit: str = ""  # what units_per_s counts: "voxels" or "images"


@dataclass
class RunRecord(Metrics, RunIdentity):
    """One measured (or attempted) run: what was run (``RunIdentity``), what it measured (``Metrics``, the one
    declaration of every metric, which the child's summary shares), then how it ran, the environment and where its
    wall time went. Columns in that order; metric names carry their units."""

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
    cpu_bf16: str = ""  # the CPU's bf16 units ("avx512_bf16 amx_bf16"), "none": emulated; "" unknown (older records)
    # how ranks talk where two machines of one model can differ (run/parent/env.topology): GPU links, NCCL's
    # version, NCCL_* settings; "" for one GPU or a CPU without such settings (and in older records)
    topology: str = ""
    hostname: str = ""
    git_commit: str = ""
    git_dirty: bool | None = None
    code_fingerprint: str = ""  # hash of the code the child runs (run/parent/fingerprint.py), part of env_key
    # the user's own code the workload's targets live in (config.code_identity): its fingerprint (the workload's
    # source_sha, part of config_hash) and {file: hash} as JSON; "" for code that is all the harness's or installed
    user_code_fingerprint: str = ""
    user_code_files: str = ""
    threads: str = ""  # thread-count variables and CPU affinity the run had, part of env_key
    # where the run's wall time went, in seconds (harness.run.parent.phases; empty in older records, and where the run
    # did not reach a phase): the parent's start of the child to its first marker (a fresh interpreter's start and
    # imports, or the fork), the model and optimizer built (FLOPs count included), the data set up and the loader
    # started, the warm-up (first_step_s and compile_s are within it); the window is measured_s; its teardown to
    # every process gone; the whole; and the parent's own time since the sweep's previous run ended
    phase_launch_s: float | None = None
    phase_model_s: float | None = None
    phase_data_s: float | None = None
    phase_warmup_s: float | None = None
    phase_teardown_s: float | None = None
    phase_wall_s: float | None = None
    phase_gap_s: float | None = None
    # the model phase's parts (the workload's imports, the device's context, the FLOP count, the build, the move to
    # the device) and the warm-up's (its first step, the rest); empty where the run did not reach them
    phase_imports_s: float | None = None
    phase_context_s: float | None = None
    phase_flops_s: float | None = None
    phase_build_s: float | None = None
    phase_to_device_s: float | None = None
    # one CUDA device: the thread that created the context while the imports ran, its own time (phase_context_s is
    # then what the main thread waited for it); empty on a CPU, under DDP, and in older records
    phase_context_thread_s: float | None = None
    phase_first_step_s: float | None = None
    phase_warmup_rest_s: float | None = None
    launched_by: str = ""  # "fork": forked from the sweep's warm launcher; "exec": a fresh interpreter
    # a forked run: what it waited for its launcher to be ready (its imports) before the fork, within phase_launch_s;
    # ~0 where the launcher was ready (a steady run); empty for exec and in older records
    phase_launcher_wait_s: float | None = None
    launcher_preloaded: str = ""  # a forked run: the packages its launcher had imported (top-level names, sorted)


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

# What a sweep (or climb) sets on a run it copies from the store instead of measuring it
# (``harness.store.write.copy_of``): the copy's own id and time, the original's id, and the sweep's fields.
# Every other column is the original's, so a copy is stored as these columns alone
# (``harness.store.write.store_copy``) and read back whole.
COPY_COLUMNS = ("run_id", "timestamp", "cached_from", "sweep_id", "campaign_id", "ladder", "rung", "change", "round",
                "claim_low", "claim_high", "claim_label", "claim_source", "claim_component", "total_claim_low",
                "total_claim_high", "total_claim_label", "total_claim_source", "group_claims_json", "ladder_sha",
                "noise_calibration_id", "noise_cv", "noise_df", "auto_max_rounds")
COPY_SCHEMA = pa.schema([SCHEMA.field(name) for name in COPY_COLUMNS])


def conform(table: pa.Table) -> pa.Table:
    """The store's columns first with the store's types (missing ones empty), then any newer columns as they are."""
    out = []
    for f in SCHEMA:
        out.append(table.column(f.name).cast(f.type) if f.name in table.column_names
                   else pa.nulls(table.num_rows, type=f.type))
    extra = [n for n in table.column_names if n not in COLUMNS]
    names = list(COLUMNS) + extra
    return pa.table(out + [table.column(n) for n in extra], names=names)


def same_values(a: dict, b: dict) -> bool:
    """Two rows equal in the store's columns, NaN equal to NaN, in lists too (a record copied by compaction equals
    its source)."""

    def norm(v):
        if isinstance(v, list):
            return [norm(x) for x in v]
        return None if isinstance(v, float) and math.isnan(v) else v

    return all(norm(a.get(k)) == norm(b.get(k)) for k in COLUMNS)


def record_from_row(row: dict) -> RunRecord:
    """A RunRecord from a row of arrow or pandas values (NaN and None read as the field's empty value)."""
    return RunRecord(**{f.name: from_value(row.get(f.name), f.type) for f in fields(RunRecord)})


def from_value(value: Any, type_name: str) -> Any:
    """``value`` as a RunRecord field of type ``type_name`` wants it (pandas gives NaN for None, numpy scalars)."""
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
