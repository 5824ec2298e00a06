"""Settings: the schema, dotted keys, validation, resolution for a machine, and what identifies a measurement.

Nothing here imports Hydra or torch, nor any other part of the harness but its helpers: the command line hands
plain dicts in (OmegaConf's typing converts their values), and the device facts (``cuda_available``) are passed by
the caller. One module per job:

  schema.py     the typed dataclasses of the settings and the choices their names take
  keys.py       dotted keys: known keys, get/set one, a RunConfig from a nested dict (OmegaConf's typing)
  validate.py   bad names, values and contradictions, one function per section
  machine.py    what this machine allows: usable CPUs, the bound on loader workers
  resolution.py every "auto" and unset value made concrete for a device
  identity.py   config_hash, settings_hash (what a gate compares), the settings as a record stores them, env_key
  ladder.py     ladder files: rungs and the guide's claims (read by the sweeps and the analysis; not imported here)
  workload.py   the workload spec: what to train as ``_target_`` nodes, its samples, unit and sizes; the built-ins
  targets.py    ``_target_`` nodes: locate with did-you-mean, instantiate, check, the user's source fingerprint

Why a run cannot act here (and is recorded as skipped) is ``harness.workload.applicability``.
"""

from harness.config.identity import (
    CONFIG_HASH_VERSION, HARDWARE_FIELDS, HASHED_KEYS_V2, NOT_ACTING, NOT_HASHED, SOFTWARE_FIELDS, code_identity,
    config_hash, env_key, measured_settings, record_dict, settings_hash,
)
from harness.config.keys import (
    KNOWN_KEYS, check_key, flatten, from_dict, get_key, known_keys, set_key, to_dict, typed,
)
from harness.config.machine import (
    WORKER_KEYS, WORKERS_PER_CPU, SettingWarning, usable_cpus, workers_over_bound, workers_over_cpus,
)
from harness.config.resolution import per_device_batch, resolve
from harness.config.schema import (
    AUGMENT_PRESETS, AUTO_BOOL, COMM_HOOKS, COMPILE_MODES, CUDAGRAPH_COMPILE_MODES, DATA_CACHES, DATA_SOURCES,
    DEVICES, FAULTS, MATMUL_PRECISIONS, MEASURE_MODES, PAGE_CACHE, PRECISIONS, SCALINGS, SIZES, DataConfig,
    DdpConfig, DebugConfig, MeasureConfig, ModelConfig, OptimizerConfig, ProfileConfig, RunConfig, SweepConfig,
    ValConfig,
)
from harness.config.validate import check_export, validate, validate_one_node, validate_sweep, validate_workload

__all__ = [
    "AUGMENT_PRESETS", "AUTO_BOOL", "COMM_HOOKS", "COMPILE_MODES", "CONFIG_HASH_VERSION", "CUDAGRAPH_COMPILE_MODES",
    "DATA_CACHES", "DATA_SOURCES", "DEVICES", "FAULTS", "HARDWARE_FIELDS", "HASHED_KEYS_V2", "KNOWN_KEYS",
    "MATMUL_PRECISIONS", "MEASURE_MODES", "NOT_ACTING", "NOT_HASHED", "PAGE_CACHE", "PRECISIONS", "SCALINGS", "SIZES",
    "SOFTWARE_FIELDS", "WORKERS_PER_CPU", "WORKER_KEYS", "DataConfig", "DdpConfig", "DebugConfig", "MeasureConfig",
    "ModelConfig", "OptimizerConfig", "ProfileConfig", "RunConfig", "SettingWarning", "SweepConfig", "ValConfig",
    "check_export", "check_key", "code_identity", "config_hash", "env_key", "flatten", "from_dict", "get_key",
    "known_keys", "measured_settings",
    "per_device_batch", "record_dict", "resolve", "set_key", "settings_hash", "to_dict", "typed", "usable_cpus",
    "validate", "validate_one_node", "validate_sweep", "validate_workload", "workers_over_bound", "workers_over_cpus",
]
