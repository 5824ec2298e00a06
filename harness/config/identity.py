"""What identifies a measurement: the settings' hash (``config_hash``), the settings as a record stores them,
and the environment's key (``env_key``). A cached result is reused only when both keys match, so the two live
together: what one leaves out, the other must cover.

``env_key`` hashes what makes two measurements comparable: the hardware, the software stack, the code that
measures (a fingerprint of the harness and model sources) and the CPU threads a run may use. The user's own code
(``settings_hash``, ``code_identity``) is in config_hash, so in the cache's key, but not in the key a gate compares
configs by: a change of it is a change under a config, as the harness's own code is. The fields are
collected in the measuring environment (``harness.run.parent.env.collect``); only their hash is here.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from typing import Any

from harness.config.keys import flatten, to_dict
from harness.config.schema import RunConfig
from harness.config import targets
from harness.config import workload as workloads_mod
from harness.names import with_old_models_name

# Settings that do not change what is measured: left out of config_hash.
# profile: the profiled steps run after the measured window has closed, so a profiled run measures what an
# unprofiled one does (the cache serves either; a sweep that profiles asks for a profiled one, see sweeps.rungs).
# dist: where the nodes meet, not what they run (`nodes` is hashed; the topology is in the environment's key).
NOT_HASHED = ("debug", "sweep", "results_dir", "timeout_s", "measure.sample_interval_s", "profile", "dist")

# config_hash, history (bump CONFIG_HASH_VERSION when the same settings must hash apart):
#   1 - every schema field, values as given (1 and 1.0 apart; any new setting changed every hash).
#   2 - values in their schema type; settings that do not act are left out (disk-data fields on
#       synthetic data, and the reverse); settings added after version 2 are hashed only when they
#       differ from their default, so adding a setting whose default keeps the old behaviour keeps
#       every hash (and every saved baseline) valid. The keys below are those of version 2: always hashed.
#       (So devices=1, the default, hashes as before devices existed; scaling acts only with devices >= 2.)
CONFIG_HASH_VERSION = 2
HASHED_KEYS_V2 = frozenset((
    "workload", "size", "device", "precision", "tf32", "cudnn_benchmark", "channels_last", "compile",
    "activation_checkpointing", "batch_size", "accumulate_grad_batches", "log_every_n_steps", "seed",
    "model.width", "model.deep_supervision", "model.mednext_size", "model.kernel_size",
    "data.source", "data.num_workers", "data.prefetch_factor", "data.persistent_workers", "data.pin_memory",
    "data.non_blocking", "data.patch_size", "data.epoch_steps", "data.num_volumes", "data.cache", "data.num_items",
    "data.cache_dir", "data.augment", "data.flip", "data.noise", "data.rotate", "data.elastic", "data.mixup",
    "optimizer.fused", "optimizer.foreach", "optimizer.zero_grad_set_to_none",
    "measure.warmup_steps", "measure.steps", "measure.mode",
))
NOT_ACTING = {"synthetic": ("data.cache", "data.num_items", "data.cache_dir"), "disk": ("data.num_volumes",)}


def measured_settings(cfg: RunConfig) -> dict[str, Any]:
    """The resolved settings that can change the measurement (what config_hash covers)."""
    values = flatten(to_dict(cfg))
    defaults = _defaults(type(cfg))
    idle = NOT_ACTING.get(cfg.data.source, ()) + (("scaling",) if cfg.devices == 1 else ())
    # A shipped workload is its name, as before workloads were config files (so the hashes of version 2 hold);
    # any other, or a shipped one changed, adds everything it is made of, its user source files' hash included.
    out = {"workload": cfg.workload.name}
    if not workloads_mod.is_builtin(cfg.workload):
        # the reference models named as before they moved to harness_models: a setting hashes as it did then
        out["workload.spec"] = with_old_models_name(cfg.workload.hashed())
    values.pop("workload")
    for key, value in sorted(values.items()):
        if any(key == n or key.startswith(n + ".") for n in NOT_HASHED) or key in idle:
            continue
        if key not in HASHED_KEYS_V2 and value == defaults.get(key):
            continue
        out[key] = value
    return out


@functools.lru_cache(maxsize=4)
def _defaults(cls: type) -> dict[str, Any]:
    """The flattened default settings of ``cls`` (the same each time: built once, only read)."""
    return flatten(to_dict(cls()))


def config_hash(cfg: RunConfig) -> str:
    """16 hex digits of the measured settings (``measured_settings``), versioned by ``CONFIG_HASH_VERSION``."""
    blob = json.dumps({"v": CONFIG_HASH_VERSION, **measured_settings(cfg)}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def settings_hash(cfg: RunConfig) -> str:
    """What a gate compares a config by: ``config_hash`` with the user's source fingerprint left out, so that a
    change of the user's model code is a change under the same config (as a new torch is), not a new config. Equal
    to config_hash where the workload has no code of the user's (every shipped one)."""
    if not cfg.workload.source_sha:
        return config_hash(cfg)
    return config_hash(dataclasses.replace(cfg, workload=dataclasses.replace(cfg.workload, source_sha="")))


def code_identity(cfg: RunConfig) -> dict[str, str]:
    """A record's ``settings_hash`` and the user's code it ran: ``user_code_fingerprint`` (the workload's
    source_sha, part of config_hash: the cache's key) and ``user_code_files`` (JSON, each file's own hash, so that
    a check names the files that changed)."""
    sha = cfg.workload.source_sha
    files = json.dumps(targets.user_sources(cfg.workload), sort_keys=True) if sha else ""
    return {"settings_hash": settings_hash(cfg), "user_code_fingerprint": sha, "user_code_files": files}


def record_dict(cfg: RunConfig) -> dict[str, Any]:
    """The settings as a record stores them (``config_json``): a built-in workload as shipped by its name alone,
    as records stored it before workloads were config files, so old and new records read and compare alike."""
    values = to_dict(cfg)
    if workloads_mod.is_builtin(cfg.workload):
        values["workload"] = cfg.workload.name
    return values


HARDWARE_FIELDS = ("device", "gpu_name", "gpu_count", "cpu_model", "cpu_count")
SOFTWARE_FIELDS = ("torch_version", "cuda_version", "cudnn_version", "monai_version", "torchvision_version",
                   "python_version", "harness_version", "code_fingerprint", "threads")


def env_key(env: dict, device: str) -> str:
    """The key of an environment (``harness.run.parent.env.collect``'s fields) for runs on ``device``."""
    fields = {"device": device, **{k: env.get(k) for k in HARDWARE_FIELDS + SOFTWARE_FIELDS if k != "device"}}
    if env.get("topology"):  # hashed where there is one: the keys of one-GPU and CPU environments stay as they were
        fields["topology"] = env["topology"]
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:16]
