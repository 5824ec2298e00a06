"""Validation: bad names, values and contradictions rejected before anything runs, one function per section of the
settings. Every error is one line (ValueError) that names the bad value and what would be valid.
"""

from __future__ import annotations

import dataclasses
import math
import multiprocessing
from typing import Any

from harness.config.schema import (
    AUGMENT_PRESETS, AUTO_BOOL, CHECKPOINT_POLICIES, COMM_HOOKS, COMPILE_CACHES, COMPILE_MODES, DATA_CACHES,
    DATA_SOURCES, DEVICES, FAULTS, FSDP_MIXED_PRECISIONS, MATMUL_PRECISIONS, MEASURE_MODES, MEMORY_LIMIT_GB,
    MP_CONTEXTS, PAGE_CACHE, PRECISIONS, SCALINGS, SDPA_BACKENDS, SIZES, DataConfig, DebugConfig, MeasureConfig,
    MemoryConfig, ModelConfig,
    OptimizerConfig, ProfileConfig, RunConfig, SweepConfig, ValConfig,
)
from harness.config import axes as axes_mod
from harness.config import targets
from harness.config import workload as workloads_mod
from harness.config.workload import WorkloadSpec
from harness.names import target_of
from harness.registry import check_choice


def validate(cfg: RunConfig) -> None:
    """Reject bad names, values and contradictions before anything runs (ValueError)."""
    validate_workload(cfg.workload)
    _validate_run(cfg)
    _validate_debug(cfg.debug)
    _validate_data(cfg.data, cfg.workload)
    _validate_loader(cfg.data)
    _validate_measure(cfg.measure)
    _validate_devices(cfg)
    _validate_model(cfg.model, cfg.workload)
    _validate_val(cfg.val)
    _validate_optimizer(cfg.optimizer)
    _validate_profile(cfg.profile)
    validate_memory(cfg.memory)
    validate_sweep(cfg.sweep)
    _validate_lm(cfg)


def _validate_run(cfg: RunConfig) -> None:
    """The top-level settings: names, backend flags, step counts."""
    check_choice("size", cfg.size, SIZES)
    check_choice("device", cfg.device, DEVICES)
    check_choice("precision", cfg.precision, PRECISIONS)
    check_choice("compile mode", cfg.compile, COMPILE_MODES)
    if cfg.float32_matmul_precision is not None:
        check_choice("float32_matmul_precision", cfg.float32_matmul_precision, MATMUL_PRECISIONS)
        if cfg.tf32 is not None:
            raise ValueError(f"float32_matmul_precision={cfg.float32_matmul_precision} and "
                             f"tf32={str(cfg.tf32).lower()} both set the matmul precision: choose one (tf32=null or "
                             "float32_matmul_precision=null)")
    _auto_bool("cudnn_benchmark", cfg.cudnn_benchmark)
    _positive(cfg, "", "cpus", "batch_size", allow_none=True)
    for key in ("memory_cleanup_every_n_steps", "visualize_every_n_steps"):
        if getattr(cfg, key) < 0:
            raise ValueError(f"{key}={getattr(cfg, key)} must be 0 (never) or a positive number of steps")
    _positive(cfg, "", "accumulate_grad_batches", "log_every_n_steps")
    if cfg.timeout_s <= 0:
        raise ValueError(f"timeout_s={cfg.timeout_s} must be positive")


def validate_one_node(nodes: int, command: str) -> None:
    """``nodes`` >= 2 is measured by ``run`` and ``sweep`` alone: another command of many runs would have to keep
    every node's runs in step (the same run next on each, none served from one node's cache while another measures),
    which only a sweep does (node 0 drives, the others follow)."""
    if nodes > 1:
        raise ValueError(f"nodes={nodes} is measured by `python -m harness run nodes={nodes} ...` or `python -m "
                         f"harness sweep +ladder=NAME nodes={nodes} ...` started on every node (docs/ddp.md, several "
                         f"nodes); `{command}` runs on one node (nodes=1)")


def validate_sweep(sweep: SweepConfig) -> None:
    """``sweep.repeats``: a whole number >= 1 or auto; with auto, a positive budget and at least 2 rounds."""
    repeats = sweep.repeats
    whole = isinstance(repeats, int) and not isinstance(repeats, bool)
    if not (repeats == "auto" or (whole and repeats >= 1)):
        raise ValueError(f"sweep.repeats={repeats} must be at least 1 (a whole number of rounds: each rung is measured "
                         "that many times) or auto (rounds until every verdict is decided)")
    check_export(sweep.export, "sweep.export")
    if not (isinstance(sweep.budget_min, (int, float)) and sweep.budget_min > 0):
        raise ValueError(f"sweep.budget_min={sweep.budget_min!r} must be a positive number of minutes")
    if not (isinstance(sweep.max_repeats, int) and sweep.max_repeats >= 2):
        raise ValueError(f"sweep.max_repeats={sweep.max_repeats!r} must be a whole number of rounds >= 2 (a first "
                         "verdict without a calibration needs two)")


def _validate_debug(debug: DebugConfig) -> None:
    check_choice("debug.fault", debug.fault, FAULTS)
    if debug.slowdown_ms < 0:
        raise ValueError(f"debug.slowdown_ms={debug.slowdown_ms} must be 0 or more")


def _validate_data(data: DataConfig, workload: WorkloadSpec) -> None:
    """Where the samples come from, how they are augmented and cut."""
    check_choice("data.source", data.source, DATA_SOURCES)
    check_choice("data.cache", data.cache, DATA_CACHES)
    check_choice("data.augment", data.augment, AUGMENT_PRESETS)
    check_choice("data.page_cache", data.page_cache, PAGE_CACHE)
    if data.page_cache == "drop" and (data.source, data.cache) != ("disk", "none"):
        raise ValueError(f"data.page_cache=drop needs files read per item: data.source=disk data.cache=none (now "
                         f"data.source={data.source} data.cache={data.cache})")
    if data.read_latency_ms < 0:
        raise ValueError(f"data.read_latency_ms={data.read_latency_ms} must be 0 or more")
    if not (data.storage_items_per_s == 0 or 0 < data.storage_items_per_s < math.inf):
        raise ValueError(f"data.storage_items_per_s={data.storage_items_per_s} must be 0 (no ceiling) or a positive, "
                         "finite number of items a second")
    if data.source == "synthetic" and data.cache == "none":
        raise ValueError("data.cache=none needs data.source=disk: synthetic data is generated in RAM")
    if data.source == "disk" and (workload.synthetic in ("tensors", "tokens") or workload.dataset is not None):
        own = "its own dataset" if workload.dataset is not None else f"synthetic: {workload.synthetic}"
        raise ValueError(f"data.source=disk writes volumes or images for the built-in pipelines; workload "
                         f"{workload.name!r} has {own} (give your own data as workload.dataset)")
    for name, dims in {"rotate": 3, "elastic": 3, "mixup": 2}.items():
        if getattr(data, name) and workload.sample_shape() and workload.spatial_dims != dims:
            raise ValueError(f"data.{name}=true applies to {dims}D workloads only; {workload.name!r} is "
                             f"{workload.spatial_dims}D")
    _positive(data, "data.", "num_volumes", "num_items")
    _positive(data, "data.", "epoch_steps", allow_none=True)
    if data.patch_size is not None and workload.sample_shape():  # else the dataset's first item says, once resolved
        _check_patch(data.patch_size, workload)


def _validate_loader(data: DataConfig) -> None:
    """The loader's workers, prefetching and copies to the device."""
    if data.num_workers < 0:
        raise ValueError(f"data.num_workers={data.num_workers} must be 0 or more")
    if data.num_workers == 0 and data.prefetch_factor is not None:
        raise ValueError(f"data.prefetch_factor={data.prefetch_factor} needs data.num_workers > 0: with 0 workers "
                         "the main process loads each batch when asked, so nothing is prefetched")
    if data.num_workers == 0 and data.persistent_workers:
        raise ValueError("data.persistent_workers=true needs data.num_workers > 0: there are no workers to keep")
    if data.prefetch_factor is not None and data.prefetch_factor < 1:
        raise ValueError(f"data.prefetch_factor={data.prefetch_factor} must be at least 1")
    _auto_bool("data.pin_memory", data.pin_memory)
    _validate_mp_context(data)


def _validate_mp_context(data: DataConfig) -> None:
    """``data.multiprocessing_context``: one of :data:`MP_CONTEXTS` that this platform offers, with workers to start."""
    context = data.multiprocessing_context
    if context is None:
        return
    check_choice("data.multiprocessing_context", context, MP_CONTEXTS)
    offered = multiprocessing.get_all_start_methods()
    if context not in offered:
        raise ValueError(f"data.multiprocessing_context={context} is not offered on this platform; valid here: "
                         f"{', '.join(offered)} (or leave it unset for the platform's default)")
    if data.num_workers == 0:
        raise ValueError(f"data.multiprocessing_context={context} needs data.num_workers > 0: with 0 workers the "
                         "main process loads each batch, so no worker starts")


def _validate_measure(measure: MeasureConfig) -> None:
    check_choice("measure.mode", measure.mode, MEASURE_MODES)
    if measure.steps != "auto":
        _positive(measure, "measure.", "steps", allow_none=True)
    _positive(measure, "measure.", "max_steps", "max_s")
    if measure.warmup_steps not in (None, "auto") and measure.warmup_steps < 1:
        raise ValueError(f"measure.warmup_steps={measure.warmup_steps} must be at least 1 (the first step is never "
                         "measured)")


def _validate_devices(cfg: RunConfig) -> None:
    """Data parallel: how many devices, how the batch scales, DistributedDataParallel's own arguments."""
    check_choice("scaling", cfg.scaling, SCALINGS)
    check_choice("ddp.comm_hook", cfg.ddp.comm_hook, COMM_HOOKS)
    _positive(cfg, "", "devices")
    _positive(cfg.ddp, "ddp.", "bucket_cap_mb", allow_none=True)
    _positive(cfg, "", "nodes")
    ranks = cfg.devices * cfg.nodes
    what = f"devices={cfg.devices}" + (f" nodes={cfg.nodes}" if cfg.nodes > 1 else "")
    if ranks > 1 and cfg.measure.mode == "loader":
        raise ValueError(f"{what} needs measure.mode=train or model: measure.mode=loader runs no "
                         "model to distribute")
    if ranks > 1 and cfg.measure.steps == "auto":
        raise ValueError(f"measure.steps=auto with {what} is not supported: each rank would close its "
                         "window at its own step and their all-reduces would no longer pair up; use a whole number "
                         "of steps (or leave measure.steps unset: the size's own)")
    if not 0 <= cfg.debug.fault_rank < ranks:
        raise ValueError(f"debug.fault_rank={cfg.debug.fault_rank} is not a rank of {what}: use 0 "
                         f"to {ranks - 1}")
    _validate_dist(cfg)


def _validate_dist(cfg: RunConfig) -> None:
    """Where the nodes meet: a port that is one, a node rank among the nodes, a timeout that is positive."""
    dist = cfg.dist
    if not 0 <= dist.master_port <= 65535:
        raise ValueError(f"dist.master_port={dist.master_port} is not a TCP port: use 1 to 65535 (0: from the "
                         "scheduler's environment)")
    if dist.node_rank is not None and not 0 <= dist.node_rank < cfg.nodes:
        raise ValueError(f"dist.node_rank={dist.node_rank} is not a node of nodes={cfg.nodes}: use 0 to "
                         f"{cfg.nodes - 1}")
    _positive(dist, "dist.", "rdzv_timeout_s")


def _validate_model(model: ModelConfig, workload: WorkloadSpec) -> None:
    """The model's settings, as far as the workload's model takes them."""
    if model.depth is not None and not 2 <= model.depth <= 5:
        raise ValueError(f"model.depth={model.depth} is not valid: a UNet of 2 to 5 levels (null: the workload's "
                         "own)")
    _positive(model, "model.", "width")
    if model.features is not None and (len(model.features) != 6 or min(model.features) < 1):
        raise ValueError(f"model.features={model.features} is not valid: BasicUNet takes six positive feature counts "
                         "(five levels down, then the last level up), e.g. [32,64,128,256,512,32]")
    if model.deep_supervision and not workload.deep_supervision:
        supported = [n for n in workloads_mod.available() if workloads_mod.builtin(n).deep_supervision]
        raise ValueError(f"model.deep_supervision=true is not available for workload {workload.name!r}; it is for: "
                         f"{supported} (a workload passes it on with model_settings: {{ARG: model.deep_supervision}})")
    if workload.mednext_options:
        check_choice("model.mednext_size", model.mednext_size, ("S", "B", "M", "L"))
        check_choice("model.kernel_size", str(model.kernel_size), ("3", "5"))


def _validate_val(val: ValConfig) -> None:
    """The validation loop: its counts, and no setting of a loop that never runs."""
    for key, least in (("every_n_steps", 0), ("steps", 1), ("num_workers", 0)):
        if getattr(val, key) < least:
            raise ValueError(f"val.{key}={getattr(val, key)} must be {least} or more"
                             + (" (0: no validation)" if key == "every_n_steps" else ""))
    if not val.every_n_steps:
        changed = [f"val.{k}={v}" for k, v in dataclasses.asdict(val).items() if v != getattr(ValConfig(), k)]
        if changed:
            raise ValueError(f"{changed[0]} sets up a validation loop that never runs: add val.every_n_steps=N")


def _validate_optimizer(optimizer: OptimizerConfig) -> None:
    if optimizer.fused and optimizer.foreach:
        raise ValueError("optimizer.fused=true and optimizer.foreach=true exclude each other: choose one")


def _validate_profile(profile: ProfileConfig) -> None:
    """The profile taken after the measured window: its step count and its trace's cap."""
    if profile.steps < 1:
        raise ValueError(f"profile.steps={profile.steps} must be at least 1 (the profiled steps, after the window)")
    if profile.trace_limit_mb <= 0:
        raise ValueError(f"profile.trace_limit_mb={profile.trace_limit_mb:g} must be a positive size in MiB (the "
                         "gzipped trace's cap)")
    if not profile.enabled:
        changed = [f"profile.{k}={v:g}" for k, v in dataclasses.asdict(profile).items()
                   if k != "enabled" and v != getattr(ProfileConfig(), k)]
        if changed:
            raise ValueError(f"{changed[0]} sets up a profile that is never taken: add profile.enabled=true")


def validate_memory(memory: MemoryConfig) -> None:
    """``memory.limit_gb``: unset, or a number of GiB within :data:`MEMORY_LIMIT_GB`."""
    limit, (low, high) = memory.limit_gb, MEMORY_LIMIT_GB
    if limit is None:
        return
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not low <= limit <= high:
        raise ValueError(f"memory.limit_gb={limit!r} is not valid: a number of GiB from {low:g} to {high:g} (the "
                         "device memory the run may use, e.g. 24 for an A5000), or null for no limit")


def _auto_bool(key: str, value: Any) -> None:
    if value not in AUTO_BOOL:
        raise ValueError(f"{key}={value!r} is not valid: use true, false or auto")


def _positive(section: Any, prefix: str, *names: str, allow_none: bool = False) -> None:
    """Each of ``names`` of ``section`` (its keys: ``prefix`` + name) is a positive number (or None, if allowed)."""
    for name in names:
        value = getattr(section, name)
        if value is None and allow_none:
            continue
        if value is None or value <= 0:
            raise ValueError(f"{prefix}{name}={value!r} must be a positive number")


def _check_patch(patch: list[int], workload: WorkloadSpec) -> None:
    if len(patch) != workload.spatial_dims and axes_mod.SEQUENCE in workload.axes:
        raise ValueError(f"data.patch_size={list(patch)} has {len(patch)} sides; workload {workload.name!r} is one "
                         f"sequence: data.patch_size=[LENGTH], e.g. {workload.sample_shape()[1:]}")
    if len(patch) != workload.spatial_dims:
        raise ValueError(f"data.patch_size={list(patch)} has {len(patch)} dimensions; workload {workload.name!r} is "
                         f"{workload.spatial_dims}D, e.g. {workload.sample_shape()[1:]}")
    bad = [s for s in patch if s < workload.min_side or s % workload.patch_multiple]
    if bad:
        multiple = f" and a multiple of {workload.patch_multiple}" if workload.patch_multiple > 1 else ""
        raise ValueError(f"data.patch_size={list(patch)}: every side must be at least {workload.min_side}{multiple} "
                         f"for {workload.name!r} (its downsampling depth)")


def validate_workload(spec: WorkloadSpec) -> None:
    """A workload's own fields; its targets imported and found unless it is a built-in as shipped."""
    _validate_workload_nodes(spec)
    _validate_workload_shapes(spec)
    if not workloads_mod.is_builtin(spec):
        targets.check_targets(spec)


def _validate_workload_nodes(spec: WorkloadSpec) -> None:
    """What the workload builds (its ``_target_`` nodes) and which harness settings it hands them."""
    if not target_of(spec.model_node):
        raise ValueError(f"workload {spec.name!r} names no model: set workload.model._target_=pkg.module.Class "
                         "(a class or a function returning a torch.nn.Module), or "
                         "workload.lightning_module._target_=pkg.module.MyLightningModule")
    if target_of(spec.model) and spec.lightning_module is not None:
        raise ValueError(f"workload {spec.name!r} names both workload.model._target_={target_of(spec.model)!r} and "
                         f"workload.lightning_module._target_={target_of(spec.lightning_module)!r}; only one is "
                         "measured: keep the LightningModule (its training_step) and set workload.model=null, or "
                         "keep the model and set workload.lightning_module=null")
    for name in ("loss", "optimizer", "dataset", *workloads_mod.OWN_TRAINING_NODES):
        node = getattr(spec, name)
        if node is not None and not target_of(node):
            raise ValueError(f"workload.{name} has no _target_: name a class or function, or set "
                             f"workload.{name}=null")
    check_choice("workload.target", spec.target, workloads_mod.TARGET_KINDS)
    check_choice("workload.synthetic", spec.synthetic, workloads_mod.SYNTHETIC_KINDS)
    for arg, source in {**spec.model_settings, **spec.loss_settings, **spec.dataset_settings}.items():
        check_choice(f"harness setting for argument {arg!r}", source, workloads_mod.SETTING_SOURCES)
    _validate_val_dataset(spec)


def _validate_val_dataset(spec: WorkloadSpec) -> None:
    """``val_dataset`` changes arguments the workload's dataset node sets, and only those (a misspelt one would
    otherwise reach the dataset's constructor only when the first validation pass builds its loader)."""
    if not spec.val_dataset:
        return
    if not isinstance(spec.dataset, dict):
        raise ValueError(f"workload.val_dataset={spec.val_dataset} changes the arguments of workload.dataset, but "
                         f"workload {spec.name!r} has none: give workload.dataset, or set workload.val_dataset={{}}")
    arguments = [k for k in spec.dataset if k not in targets.SPECIAL_KEYS]
    for key in spec.val_dataset:
        check_choice("workload.val_dataset key (an argument workload.dataset sets)", key, arguments)


def check_shape(spec: WorkloadSpec) -> None:
    """Every size of the workload has an input shape, channels first, all sides positive."""
    for name in spec.sizes:
        shape = spec.sample_shape(name)
        if not shape:
            data = (" (its dataset is handed data.patch_size, so the shape cannot be read from it)"
                    if spec.dataset is not None else " (or give your own data as workload.dataset: its first item's "
                    "shape is read)")
            raise ValueError(f"workload {spec.name!r} has no input shape: set workload.input_shape=[C, ...] (one "
                             f"sample, channels first, e.g. [1,64,64,64] for a 3D image with one channel){data}")
        if len(shape) < 2 or min(shape) < 1:
            raise ValueError(f"workload.input_shape={shape} is not valid: channels first, then 1 to 3 spatial "
                             "sides, all positive (e.g. [1,64,64,64], [3,224,224] or [8,1024])")
    axes_mod.check(spec)


def _validate_workload_shapes(spec: WorkloadSpec) -> None:
    """The workload's sizes and sample shapes, and what its synthetic samples can be."""
    units = spec.units_per_sample
    if units not in ("spatial", "sequence") and not (isinstance(units, int) and units > 0):
        raise ValueError(f"workload.units_per_sample={units!r} is not valid: use a positive whole number, spatial "
                         "(the product of the sample's spatial sides) or sequence (its length: tokens)")
    missing = [n for n in SIZES[1:] if n not in spec.sizes]
    if missing:
        raise ValueError(f"workload {spec.name!r} has no sizes.{missing[0]}: every workload gives a full and a "
                         "smoke size (batch_size, warmup_steps, steps, epoch_steps)")
    if not workloads_mod.shape_from_data(spec):  # else read from the dataset's first item when resolved
        check_shape(spec)
    else:
        axes_mod.check(spec)
    need = {"volumes": ("segmentation", 3, 1), "images": ("class", 2, 3)}.get(spec.synthetic)
    if need and spec.sample_shape() and (spec.target, spec.spatial_dims, spec.in_channels) != need:
        raise ValueError(f"workload.synthetic={spec.synthetic} makes {need[1]}D samples with {need[2]} channel(s) "
                         f"for a {need[0]} target; workload {spec.name!r} has {spec.sample_shape()} and target "
                         f"{spec.target}: use synthetic: tensors")


EXPORT_TARGETS = ("tb", "mlflow", "wandb")  # harness.export's writers


def check_export(spec: str, name: str) -> None:
    """``TARGET:DEST`` (``tb:runs/harness``, ``mlflow:http://127.0.0.1:5000``, ``wandb:wandb-runs``) or ""."""
    if not spec:
        return
    target, _, dest = str(spec).partition(":")
    if target not in EXPORT_TARGETS or not dest:
        raise ValueError(f"{name}={spec!r}: TARGET:DEST with TARGET one of {', '.join(EXPORT_TARGETS)}, such as "
                         "tb:runs/harness or mlflow:http://127.0.0.1:5000")


def _validate_lm(cfg: RunConfig) -> None:
    """A language model's knobs' names, and compile's cache."""
    check_choice("lm.sdpa_backend", cfg.lm.sdpa_backend, SDPA_BACKENDS)
    check_choice("lm.checkpoint_policy", cfg.lm.checkpoint_policy, CHECKPOINT_POLICIES)
    check_choice("lm.fsdp_mixed_precision", cfg.lm.fsdp_mixed_precision, FSDP_MIXED_PRECISIONS)
    if cfg.lm.fsdp_prefetch < 0:
        raise ValueError(f"lm.fsdp_prefetch={cfg.lm.fsdp_prefetch} must be 0 (FSDP2's own prefetch) or a number of "
                         "units to prefetch")
    check_choice("compile_cache", cfg.compile_cache, COMPILE_CACHES)
