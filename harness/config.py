"""Settings: the schema (typed dataclasses, also registered with Hydra at the CLI edge), their
validation, and their resolution into concrete values for one device.

Nothing here imports Hydra or torch: the CLI hands plain dicts in, and the device facts
(``cuda_available``) are passed by the caller.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, List, Optional

from harness.registry import check_choice, unknown_choice
from harness.workload import workloads as workloads_mod
from harness.workload.workloads import WorkloadSpec

PRECISIONS = ("32", "bf16-mixed", "16-mixed")
COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune")
SIZES = ("auto", "full", "smoke")
DEVICES = ("auto", "cpu", "cuda")
FAULTS = ("none", "oom", "nan", "hang", "crash")
DATA_SOURCES = ("synthetic", "disk")
DATA_CACHES = ("ram", "none")
PAGE_CACHE = ("keep", "drop")  # drop: each file read per item leaves the page cache (posix_fadvise DONTNEED)
AUGMENT_PRESETS = ("none", "light", "heavy")
MEASURE_MODES = ("train", "loader", "model")
COMM_HOOKS = ("none", "fp16", "bf16")
SCALINGS = ("weak", "strong")
AUTO_BOOL = ("auto", True, False)
MATMUL_PRECISIONS = ("highest", "high", "medium")  # torch.set_float32_matmul_precision


@dataclass
class ModelConfig:
    width: float = 1.0  # multiplies the size preset's channel counts ("half filters" = 0.5)
    deep_supervision: bool = False  # mednext only
    mednext_size: str = "S"
    kernel_size: int = 3
    depth: Optional[int] = None  # UNet levels (None: the workload's own, 5 for unet3d); "4 levels instead of 5"


@dataclass
class DataConfig:
    source: str = "synthetic"
    num_workers: int = 0
    prefetch_factor: Optional[int] = None  # None: PyTorch's default (2) when workers > 0
    persistent_workers: bool = False
    pin_memory: Any = False  # true / false / "auto" (= on where a CUDA device is used)
    non_blocking: bool = True
    patch_size: Optional[List[int]] = None  # image size for 2D workloads; None: the size preset's
    epoch_steps: Optional[int] = None  # optimizer steps per loader epoch; None: the size preset's
    num_volumes: int = 4  # synthetic source: volumes (or images x16) held in RAM to crop from
    cache: str = "ram"  # disk source: "ram" loads every file once (MONAI CacheDataset), "none" reads per item
    num_items: int = 16  # disk source: files in the dataset
    cache_dir: Optional[str] = None  # disk source: where datasets are written; None: <results_dir>/.cache/datasets
    augment: str = "none"  # preset: none / light (flip, noise) / heavy (+ rotation, elastic; 2D: + mixup/cutmix)
    flip: Optional[bool] = None  # each switch overrides the preset
    noise: Optional[bool] = None  # 3D Gaussian noise; 2D colour jitter
    rotate: Optional[bool] = None  # 3D only
    elastic: Optional[bool] = None  # 3D only
    mixup: Optional[bool] = None  # 2D only: mixup or cutmix per batch
    read_latency_ms: float = 0.0  # storage cost: waited per item in the loader (a network file system's round trips)
    page_cache: str = "keep"  # drop: files read per item are dropped from the page cache after each read


@dataclass
class OptimizerConfig:
    fused: Optional[bool] = None  # None: PyTorch's choice
    foreach: Optional[bool] = None
    zero_grad_set_to_none: bool = True


@dataclass
class MeasureConfig:
    warmup_steps: Optional[int] = None
    # A number, or "auto": measure until the mean step time's 95% interval is within +-1% (checked after 10, 20,
    # 40, ... steps), stopping at max_steps or max_s whichever comes first; the record's measured_steps says how many.
    steps: Any = None
    max_steps: int = 1000  # steps=auto only
    max_s: float = 300.0  # steps=auto only: measured seconds
    sample_interval_s: float = 0.5  # NVML / host-memory sampling period (in the parent, never the measured process)
    mode: str = "train"  # train: full steps; loader: batches only, no model; model: one batch kept on the device


@dataclass
class ValConfig:
    """A validation loop inside the measured training (the guides' val_frequency, inference_mode, eval workers)."""

    every_n_steps: int = 0  # 0: no validation; else a pass every N training steps (and one in the warm-up)
    steps: int = 2  # batches per validation pass
    inference_mode: bool = False  # torch.inference_mode() instead of torch.no_grad()
    num_workers: int = 0  # the validation loader's workers (a new iterator per pass, as trainers do)


@dataclass
class DebugConfig:
    fault: str = "none"
    fault_step: int = 2  # step (0-based, warm-up included) at which the fault fires
    fault_rank: int = 0  # with devices >= 2: the rank the fault fires on
    slowdown_ms: float = 0.0  # sleep added to every step; does not change config_hash


@dataclass
class DdpConfig:
    """DistributedDataParallel's own arguments (``devices`` >= 2 only; PyTorch's defaults when unset)."""

    bucket_cap_mb: Optional[float] = None  # None: PyTorch's default (25 MB)
    gradient_as_bucket_view: bool = False
    static_graph: bool = False
    find_unused_parameters: bool = False
    broadcast_buffers: bool = True
    comm_hook: str = "none"  # none / fp16 / bf16: gradients compressed for the all-reduce


@dataclass
class SweepConfig:
    id: str = ""
    rung: Optional[int] = None
    round: int = 0
    repeats: int = 1
    rerun: bool = False


@dataclass
class RunConfig:
    workload: WorkloadSpec = field(default_factory=lambda: workloads_mod.builtin("unet3d"))  # `workload=NAME`
    size: str = "auto"
    device: str = "auto"
    precision: str = "32"
    tf32: Optional[bool] = None  # None: PyTorch's defaults (cuDNN convs TF32, matmuls full FP32)
    cudnn_benchmark: Any = False  # true / false / "auto"
    cudnn_deterministic: bool = False  # torch.backends.cudnn.deterministic (the guides' reproducibility toggle)
    float32_matmul_precision: Optional[str] = None  # None: PyTorch's default ("highest"); else MATMUL_PRECISIONS
    channels_last: bool = False
    compile: str = "off"
    activation_checkpointing: bool = False
    batch_size: Optional[int] = None
    accumulate_grad_batches: int = 1
    log_every_n_steps: int = 50
    memory_cleanup_every_n_steps: int = 0  # gc.collect() (+ torch.cuda.empty_cache() on a GPU) every N steps; 0: never
    visualize_every_n_steps: int = 0  # copy a sample's input and output to the host and write them to disk; 0: never
    cpus: Optional[int] = None  # run on N CPUs of those this process may use (affinity; workers inherit it); per rank
    seed: int = 0
    timeout_s: float = 900.0
    results_dir: str = "results"
    # Data parallel (DDP), Lightning's name: one process per device, started by torch's launcher. On a CPU a device is
    # a process. Weak scaling: batch_size is per device (the global batch grows with devices); strong: it is global.
    devices: int = 1
    scaling: str = "weak"
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    measure: MeasureConfig = field(default_factory=MeasureConfig)
    val: ValConfig = field(default_factory=ValConfig)
    debug: DebugConfig = field(default_factory=DebugConfig)
    ddp: DdpConfig = field(default_factory=DdpConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)

    # Filled by `resolve`; read by the child.
    @property
    def effective_width(self) -> float:
        return self.model.width * self.workload.sizes[self.size].width


# Settings that do not change what is measured: left out of config_hash.
NOT_HASHED = ("debug", "sweep", "results_dir", "timeout_s", "measure.sample_interval_s")


def known_keys(cls: type = RunConfig, prefix: str = "") -> list[str]:
    """Every settable dotted key of the schema, e.g. ``data.num_workers``."""
    keys = []
    for f in dataclasses.fields(cls):
        name = prefix + f.name
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if isinstance(default, WorkloadSpec):  # set whole (`workload=NAME`) or field by field
            keys += [name] + [f"{name}.{w.name}" for w in dataclasses.fields(WorkloadSpec)]
        elif dataclasses.is_dataclass(default):
            keys += known_keys(type(default), name + ".")
        else:
            keys.append(name)
    return keys


KNOWN_KEYS = tuple(known_keys())


def check_key(key: str) -> None:
    if key.startswith(tuple(f"workload.{n}." for n in workloads_mod.OPEN_NODES)):
        return  # below a _target_ node: the target's own arguments (checked when the workload is resolved)
    if key not in KNOWN_KEYS:
        raise unknown_choice("setting", key, KNOWN_KEYS)


def from_dict(values: dict[str, Any]) -> RunConfig:
    """A RunConfig from a nested dict (as Hydra composes it), rejecting unknown keys by name."""
    cfg = RunConfig()
    for key, value in flatten(values).items():
        set_key(cfg, key, value)
    return cfg


def flatten(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in values.items():
        if isinstance(v, dict) and prefix + k not in KNOWN_KEYS:
            out.update(flatten(v, prefix + k + "."))
        else:
            out[prefix + k] = v
    return out


def get_key(cfg: RunConfig, key: str) -> Any:
    obj: Any = cfg
    for part in key.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else getattr(obj, part)  # a workload's _target_ nodes are dicts
    return obj


def set_key(cfg: RunConfig, key: str, value: Any) -> None:
    check_key(key)
    if key == "workload" or key.startswith("workload."):
        return _set_workload_key(cfg, key, value)
    *parents, last = key.split(".")
    obj: Any = cfg
    for part in parents:
        obj = getattr(obj, part)
    setattr(obj, last, _coerce(key, _normalize(key, value), _field_type(type(obj), last)))


def _set_workload_key(cfg: RunConfig, key: str, value: Any) -> None:
    """``workload=NAME`` (a shipped workload), a whole mapping (as composed), or one of its fields."""
    if key == "workload":
        if isinstance(value, WorkloadSpec):
            cfg.workload = copy.deepcopy(value)
        elif isinstance(value, dict):
            cfg.workload = workloads_mod.parse_spec(value)
        else:
            cfg.workload = workloads_mod.builtin(str(value))
        return
    obj: Any = cfg.workload
    *parents, last = key.split(".")[1:]
    for part in parents:
        if isinstance(obj, dict):
            obj = obj.setdefault(part, {})
        elif getattr(obj, part) is None:
            setattr(obj, part, {})
            obj = getattr(obj, part)
        else:
            obj = getattr(obj, part)
    if isinstance(obj, dict):
        obj[last] = value
    elif last == "sizes":
        obj.sizes = workloads_mod.parse_spec({"sizes": value}).sizes
    else:
        hint = _field_type(type(obj), last)
        if last in ("input_shape", "target_shape") and value is not None:
            value = [int(v) for v in value]
        setattr(obj, last, _coerce(key, value, hint))


def _field_type(cls: type, name: str) -> Any:
    import typing

    return typing.get_type_hints(cls)[name]


def _coerce(key: str, value: Any, hint: Any) -> Any:
    """The value in its schema type, so that ``model.width=1`` and ``model.width=1.0`` are one setting."""
    import typing

    args = [a for a in typing.get_args(hint) if a is not type(None)]
    base = args[0] if typing.get_origin(hint) is typing.Union and len(args) == 1 else hint
    if value is None or base is Any or typing.get_origin(base) is not None:
        return value
    names = {int: "a whole number", float: "a number", bool: "true or false", str: "text"}
    if base is bool:
        if isinstance(value, bool):
            return value
        raise ValueError(f"{key}={value!r} is not valid: use true or false")
    if base in (int, float):
        if isinstance(value, bool):
            raise ValueError(f"{key}={value!r} is not valid: use {names[base]}")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{key}={value!r} is not valid: use {names[base]}") from None
        if base is int:
            if not number.is_integer():
                raise ValueError(f"{key}={value!r} is not valid: use {names[base]}")
            return int(number)
        return number
    if base is str:
        return str(value)
    return value


def to_dict(cfg: RunConfig) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def record_dict(cfg: RunConfig) -> dict[str, Any]:
    """The settings as a record stores them (``config_json``): a built-in workload as shipped by its name alone,
    as records stored it before workloads were config files, so old and new records read and compare alike."""
    values = to_dict(cfg)
    if workloads_mod.is_builtin(cfg.workload):
        values["workload"] = cfg.workload.name
    return values


def _normalize(key: str, value: Any) -> Any:
    """Values as the CLI may spell them (precision=32, compile=false) in their canonical form."""
    if key == "precision":
        value = str(value)
        return {"32-true": "32", "bf16": "bf16-mixed", "16": "16-mixed"}.get(value, value)
    if key == "compile":
        if value is False or value is None or str(value).lower() in ("false", "none", "off"):
            return "off"
        if value is True or str(value).lower() == "true":
            return "default"
        return str(value)
    if key == "measure.steps" and value is not None and str(value).lower() != "auto":
        try:
            number = float(value)  # a whole number; "auto" is the only word
        except (TypeError, ValueError):
            number = 0.5
        if not number.is_integer() or isinstance(value, bool):
            raise ValueError(f"measure.steps={value!r} is not valid: use a whole number or auto")
        return int(number)
    if key == "measure.steps" and value is not None:
        return "auto"
    if key in ("data.patch_size",) and value is not None:
        return [int(v) for v in value]
    return value


# --------------------------------------------------------------------------------------------
# Validation and resolution


def validate(cfg: RunConfig) -> None:
    """Reject bad names, values and contradictions before anything runs (ValueError)."""
    workload = cfg.workload
    validate_workload(workload)
    check_choice("size", cfg.size, SIZES)
    check_choice("device", cfg.device, DEVICES)
    check_choice("precision", cfg.precision, PRECISIONS)
    check_choice("compile mode", cfg.compile, COMPILE_MODES)
    check_choice("debug.fault", cfg.debug.fault, FAULTS)
    check_choice("data.source", cfg.data.source, DATA_SOURCES)
    check_choice("data.cache", cfg.data.cache, DATA_CACHES)
    check_choice("data.augment", cfg.data.augment, AUGMENT_PRESETS)
    check_choice("data.page_cache", cfg.data.page_cache, PAGE_CACHE)
    if cfg.data.page_cache == "drop" and (cfg.data.source, cfg.data.cache) != ("disk", "none"):
        raise ValueError(f"data.page_cache=drop needs files read per item: data.source=disk data.cache=none (now "
                         f"data.source={cfg.data.source} data.cache={cfg.data.cache})")
    if cfg.data.read_latency_ms < 0:
        raise ValueError(f"data.read_latency_ms={cfg.data.read_latency_ms} must be 0 or more")
    check_choice("measure.mode", cfg.measure.mode, MEASURE_MODES)
    _validate_devices(cfg)
    if cfg.float32_matmul_precision is not None:
        check_choice("float32_matmul_precision", cfg.float32_matmul_precision, MATMUL_PRECISIONS)
        if cfg.tf32 is not None:
            raise ValueError(f"float32_matmul_precision={cfg.float32_matmul_precision} and tf32={str(cfg.tf32).lower()} "
                             "both set the matmul precision: choose one (tf32=null or float32_matmul_precision=null)")
    if cfg.model.depth is not None and not 2 <= cfg.model.depth <= 5:
        raise ValueError(f"model.depth={cfg.model.depth} is not valid: a UNet of 2 to 5 levels (null: the workload's own)")
    _check_val(cfg.val)
    _positive(cfg, "cpus", allow_none=True)
    for key in ("memory_cleanup_every_n_steps", "visualize_every_n_steps"):
        if get_key(cfg, key) < 0:
            raise ValueError(f"{key}={get_key(cfg, key)} must be 0 (never) or a positive number of steps")
    if cfg.data.source == "synthetic" and cfg.data.cache == "none":
        raise ValueError("data.cache=none needs data.source=disk: synthetic data is generated in RAM")
    only = {"rotate": 3, "elastic": 3, "mixup": 2}
    for name, dims in only.items():
        if getattr(cfg.data, name) and workload.spatial_dims != dims:
            raise ValueError(f"data.{name}=true applies to {dims}D workloads only; {workload.name!r} is {workload.spatial_dims}D")
    for key in ("data.pin_memory", "cudnn_benchmark"):
        if get_key(cfg, key) not in AUTO_BOOL:
            raise ValueError(f"{key}={get_key(cfg, key)!r} is not valid: use true, false or auto")
    _positive(cfg, "accumulate_grad_batches", "log_every_n_steps", "model.width", "data.num_volumes", "data.num_items")
    _positive(cfg, "batch_size", "data.epoch_steps", allow_none=True)
    if cfg.measure.steps != "auto":
        _positive(cfg, "measure.steps", allow_none=True)
    _positive(cfg, "measure.max_steps", "measure.max_s")
    if cfg.measure.warmup_steps is not None and cfg.measure.warmup_steps < 1:
        raise ValueError(f"measure.warmup_steps={cfg.measure.warmup_steps} must be at least 1 (the first step is never measured)")
    if cfg.data.num_workers < 0:
        raise ValueError(f"data.num_workers={cfg.data.num_workers} must be 0 or more")
    if cfg.data.num_workers == 0 and cfg.data.prefetch_factor is not None:
        raise ValueError(
            f"data.prefetch_factor={cfg.data.prefetch_factor} needs data.num_workers > 0: with 0 workers "
            "the main process loads each batch when asked, so nothing is prefetched"
        )
    if cfg.data.num_workers == 0 and cfg.data.persistent_workers:
        raise ValueError("data.persistent_workers=true needs data.num_workers > 0: there are no workers to keep")
    if cfg.data.prefetch_factor is not None and cfg.data.prefetch_factor < 1:
        raise ValueError(f"data.prefetch_factor={cfg.data.prefetch_factor} must be at least 1")
    if cfg.optimizer.fused and cfg.optimizer.foreach:
        raise ValueError("optimizer.fused=true and optimizer.foreach=true exclude each other: choose one")
    if cfg.model.deep_supervision and not workload.deep_supervision:
        supported = [n for n in workloads_mod.available() if workloads_mod.builtin(n).deep_supervision]
        raise ValueError(f"model.deep_supervision=true is not available for workload {workload.name!r}; it is for: "
                         f"{supported} (a workload passes it on with model_settings: {{ARG: model.deep_supervision}})")
    if cfg.data.source == "disk" and (workload.synthetic == "tensors" or workload.dataset is not None):
        raise ValueError(f"data.source=disk writes volumes or images for the built-in pipelines; workload "
                         f"{workload.name!r} has {'its own dataset' if workload.dataset is not None else 'synthetic: tensors'}"
                         " (give your own data as workload.dataset)")
    if workload.mednext_options:
        check_choice("model.mednext_size", cfg.model.mednext_size, ("S", "B", "M", "L"))
        check_choice("model.kernel_size", str(cfg.model.kernel_size), ("3", "5"))
    if cfg.data.patch_size is not None:
        _check_patch(cfg.data.patch_size, workload)
    if cfg.debug.slowdown_ms < 0:
        raise ValueError(f"debug.slowdown_ms={cfg.debug.slowdown_ms} must be 0 or more")
    if cfg.timeout_s <= 0:
        raise ValueError(f"timeout_s={cfg.timeout_s} must be positive")


def validate_workload(spec: WorkloadSpec) -> None:
    """A workload's own fields; its targets imported and found unless it is a built-in as shipped."""
    if not workloads_mod.target_of(spec.model):
        raise ValueError(f"workload {spec.name!r} names no model: set workload.model._target_=pkg.module.Class "
                         "(a class or a function returning a torch.nn.Module)")
    for name in ("loss", "optimizer", "dataset"):
        node = getattr(spec, name)
        if node is not None and not workloads_mod.target_of(node):
            raise ValueError(f"workload.{name} has no _target_: name a class or function, or set workload.{name}=null")
    check_choice("workload.target", spec.target, workloads_mod.TARGET_KINDS)
    check_choice("workload.synthetic", spec.synthetic, workloads_mod.SYNTHETIC_KINDS)
    for arg, source in {**spec.model_settings, **spec.loss_settings, **spec.dataset_settings}.items():
        check_choice(f"harness setting for argument {arg!r}", source, workloads_mod.SETTING_SOURCES)
    if spec.units_per_sample != "spatial" and not (isinstance(spec.units_per_sample, int) and spec.units_per_sample > 0):
        raise ValueError(f"workload.units_per_sample={spec.units_per_sample!r} is not valid: use a positive whole number "
                         "or spatial (the product of the sample's spatial sides)")
    missing = [n for n in SIZES[1:] if n not in spec.sizes]
    if missing:
        raise ValueError(f"workload {spec.name!r} has no sizes.{missing[0]}: every workload gives a full and a smoke "
                         "size (batch_size, warmup_steps, steps, epoch_steps)")
    for name in spec.sizes:
        shape = spec.sample_shape(name)
        if not shape:
            raise ValueError(f"workload {spec.name!r} has no input shape: set workload.input_shape=[C, ...] (one "
                             "sample, channels first, e.g. [1,64,64,64] for a 3D image with one channel)")
        if len(shape) < 2 or min(shape) < 1:
            raise ValueError(f"workload.input_shape={shape} is not valid: channels first, then 1 to 3 spatial sides, "
                             "all positive (e.g. [1,64,64,64], [3,224,224] or [8,1024])")
    need = {"volumes": ("segmentation", 3, 1), "images": ("class", 2, 3)}.get(spec.synthetic)
    if need and (spec.target, spec.spatial_dims, spec.in_channels) != need:
        raise ValueError(f"workload.synthetic={spec.synthetic} makes {need[1]}D samples with {need[2]} channel(s) for a "
                         f"{need[0]} target; workload {spec.name!r} has {spec.sample_shape()} and target {spec.target}: "
                         "use synthetic: tensors")
    if not workloads_mod.is_builtin(spec):
        from harness.workload import targets

        targets.check_targets(spec)


def _validate_devices(cfg: RunConfig) -> None:
    check_choice("scaling", cfg.scaling, SCALINGS)
    check_choice("ddp.comm_hook", cfg.ddp.comm_hook, COMM_HOOKS)
    _positive(cfg, "devices")
    _positive(cfg, "ddp.bucket_cap_mb", allow_none=True)
    if cfg.devices > 1 and cfg.measure.mode == "loader":
        raise ValueError(f"devices={cfg.devices} needs measure.mode=train or model: measure.mode=loader runs no model "
                         "to distribute")
    if not 0 <= cfg.debug.fault_rank < cfg.devices:
        raise ValueError(f"debug.fault_rank={cfg.debug.fault_rank} is not a rank of devices={cfg.devices}: use 0 to "
                         f"{cfg.devices - 1}")


def per_device_batch(cfg: RunConfig) -> int:
    """Samples per device per micro-batch: ``batch_size`` (weak scaling), or its share of it (strong scaling)."""
    return cfg.batch_size // cfg.devices if cfg.scaling == "strong" else cfg.batch_size


def _check_val(val: ValConfig) -> None:
    for key, value, least in (("every_n_steps", val.every_n_steps, 0), ("steps", val.steps, 1),
                              ("num_workers", val.num_workers, 0)):
        if value < least:
            raise ValueError(f"val.{key}={value} must be {least} or more" + (" (0: no validation)" if key == "every_n_steps" else ""))
    if not val.every_n_steps:
        changed = [f"val.{k}={v}" for k, v in dataclasses.asdict(val).items() if v != getattr(ValConfig(), k)]
        if changed:
            raise ValueError(f"{changed[0]} sets up a validation loop that never runs: add val.every_n_steps=N")


def _positive(cfg: RunConfig, *keys: str, allow_none: bool = False) -> None:
    for key in keys:
        value = get_key(cfg, key)
        if value is None and allow_none:
            continue
        if value is None or value <= 0:
            raise ValueError(f"{key}={value!r} must be a positive number")


def _check_patch(patch: list[int], workload) -> None:
    if len(patch) != workload.spatial_dims:
        raise ValueError(
            f"data.patch_size={list(patch)} has {len(patch)} dimensions; workload {workload.name!r} is "
            f"{workload.spatial_dims}D, e.g. {workload.sample_shape()[1:]}"
        )
    bad = [s for s in patch if s < workload.min_side or s % workload.patch_multiple]
    if bad:
        rule = f"at least {workload.min_side}" + (f" and a multiple of {workload.patch_multiple}" if workload.patch_multiple > 1 else "")
        raise ValueError(f"data.patch_size={list(patch)}: every side must be {rule} for {workload.name!r} (its downsampling depth)")


def resolve(cfg: RunConfig, cuda_available: bool) -> RunConfig:
    """A validated copy with every 'auto' and unset value made concrete for this device."""
    validate(cfg)
    out = copy.deepcopy(cfg)
    if out.device == "auto":
        out.device = "cuda" if cuda_available else "cpu"
    elif out.device == "cuda" and not cuda_available:
        raise ValueError("device='cuda' was asked for, but torch sees no CUDA device here; use device=cpu or auto")
    if out.size == "auto":
        out.size = "full" if out.device == "cuda" else "smoke"
    preset = out.workload.sizes[out.size]
    if out.batch_size is None:
        out.batch_size = preset.batch_size
    if out.data.patch_size is None:
        out.data.patch_size = out.workload.sample_shape(out.size)[1:]
    if not workloads_mod.is_builtin(out.workload):  # editing the user's model file measures it anew
        from harness.workload import targets

        out.workload.source_sha = targets.source_sha(out.workload)
    if out.data.epoch_steps is None:
        out.data.epoch_steps = preset.epoch_steps
    if out.measure.warmup_steps is None:
        out.measure.warmup_steps = preset.warmup_steps
    if out.measure.steps is None:
        out.measure.steps = preset.steps
    on_cuda = out.device == "cuda"
    if out.data.pin_memory == "auto":
        out.data.pin_memory = on_cuda
    if out.cudnn_benchmark == "auto":
        out.cudnn_benchmark = on_cuda
    out.sweep = SweepConfig(**dataclasses.asdict(cfg.sweep))
    return out


# Compile modes that capture CUDA graphs on a GPU ("max-autotune" turns on inductor's cudagraphs too).
CUDAGRAPH_COMPILE_MODES = ("reduce-overhead", "max-autotune")


def not_applicable(cfg: RunConfig) -> str:
    """Why a resolved config cannot run as labelled on its device and workload ("" when it can)."""
    reasons = _workload_conflicts(cfg)
    ddp = _ddp_conflict(cfg)
    if ddp:
        reasons.append(ddp)
    if cfg.device == "cuda":
        return "; ".join(reasons + [r for r in [_cudagraph_conflict(cfg)] if r])
    if cfg.tf32 is True:
        reasons.append("tf32=true needs a CUDA GPU (TF32 is a tensor-core format)")
    if cfg.cudnn_benchmark is True:
        reasons.append("cudnn_benchmark=true needs a CUDA GPU (cuDNN autotuning)")
    if cfg.cudnn_deterministic:
        reasons.append("cudnn_deterministic=true needs a CUDA GPU (it picks cuDNN's deterministic kernels)")
    if cfg.data.pin_memory is True:
        reasons.append("data.pin_memory=true needs a CUDA GPU (page-locked memory speeds host-to-GPU copies only)")
    if cfg.compile == "reduce-overhead":
        reasons.append("compile=reduce-overhead needs a CUDA GPU (it captures CUDA graphs)")
    return "; ".join(reasons)


def usable_cpus() -> int:
    """CPUs this process may run on (a container or taskset may allow fewer than the machine has)."""
    import os

    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _workload_conflicts(cfg: RunConfig) -> list[str]:
    """Knobs this workload's model cannot take (the child would fail, or run the baseline under the knob's name)."""
    spec, reasons = cfg.workload, []
    if cfg.cpus is not None and cfg.cpus * cfg.devices > usable_cpus():  # each rank gets CPUs of its own
        need = f"cpus={cfg.cpus}" + (f" for each of devices={cfg.devices} ranks ({cfg.cpus * cfg.devices} CPUs)"
                                     if cfg.devices > 1 else "")
        reasons.append(f"{need} is more than the {usable_cpus()} CPUs this process may use")
    if cfg.channels_last and spec.spatial_dims not in (2, 3):
        reasons.append(f"channels_last=true needs 2D or 3D samples (4D/5D tensors); workload {spec.name!r} has "
                       f"{spec.spatial_dims}D samples {spec.sample_shape(cfg.size)}")
    if cfg.model.depth is not None and "model.depth" not in spec.model_settings.values():
        reasons.append(f"model.depth={cfg.model.depth} needs a model that takes a depth: workload {spec.name!r} hands "
                       "none to its model (model_settings: {ARG: model.depth} does; unet3d takes it)")
    if cfg.model.width != 1.0 and "width" not in spec.model_settings.values():
        reasons.append(f"model.width={cfg.model.width:g} needs a model that takes a width: workload {spec.name!r} hands "
                       "none to its model (model_settings: {ARG: width} does)")
    if spec.synthetic == "tensors" or spec.dataset is not None:
        switched = [f"data.{n}" for n in ("flip", "noise", "rotate", "elastic", "mixup") if getattr(cfg.data, n)]
        if cfg.data.augment != "none" or switched:
            what = (switched or [f"data.augment={cfg.data.augment}"])[0]
            reasons.append(f"{what} applies to the volumes and images pipelines; workload {spec.name!r} has "
                           f"{'its own dataset' if spec.dataset is not None else 'synthetic: tensors'}")
    if cfg.activation_checkpointing and not spec.checkpoint_units and cfg.measure.mode != "loader":
        reasons.append(f"activation_checkpointing=true: workload {spec.name!r} names no checkpoint_units (the module "
                       "classes to recompute), so nothing would be checkpointed; set workload.checkpoint_units=[pkg.Block]")
    return reasons


def _ddp_conflict(cfg: RunConfig) -> str:
    """DDP knobs on a single device, or a strong-scaling batch that does not split evenly over the devices."""
    if cfg.devices == 1:
        changed = [k for k, v in flatten(to_dict(cfg)).items()
                   if k.startswith("ddp.") and v != get_key(RunConfig(), k)]
        return "; ".join(f"{k}={json.dumps(v) if isinstance(v, bool) else v} needs devices >= 2 (a setting of "
                         "DistributedDataParallel)" for k, v in ((k, get_key(cfg, k)) for k in changed))
    if cfg.scaling == "strong" and cfg.batch_size % cfg.devices:
        return (f"scaling=strong splits batch_size={cfg.batch_size} over devices={cfg.devices}, which does not divide "
                "it; use a batch_size that is a multiple of devices")
    return ""


def _cudagraph_conflict(cfg: RunConfig) -> str:
    """A CUDA-graph compile mode with a training loop that keeps gradients across graph replays.

    A replay writes its outputs, the gradients among them, into the graph's static memory. Accumulating over
    micro-batches (``.grad += ...`` between replays), or zeroing gradients in place instead of dropping them,
    keeps those tensors alive into the next replay, which overwrites them: the step would train on wrong
    gradients (or fail with "accessing tensor output of CUDAGraphs that has been overwritten"), so the run
    would not measure the knob it is labelled with. Recorded as `skipped`, like other knobs that cannot act
    here, so that a ladder climbing through such a rung goes on and says why.
    """
    if cfg.compile not in CUDAGRAPH_COMPILE_MODES or cfg.measure.mode == "loader":
        return ""
    reasons = []
    if cfg.accumulate_grad_batches > 1:
        reasons.append(f"compile={cfg.compile} captures CUDA graphs, whose replays overwrite the gradients that "
                       f"accumulate_grad_batches={cfg.accumulate_grad_batches} adds up across micro-batches; use "
                       "accumulate_grad_batches=1 or compile=default")
    if not cfg.optimizer.zero_grad_set_to_none:
        reasons.append(f"compile={cfg.compile} captures CUDA graphs, whose replays overwrite gradients zeroed in "
                       "place (optimizer.zero_grad_set_to_none=false); use optimizer.zero_grad_set_to_none=true "
                       "or compile=default")
    return "; ".join(reasons)


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
    defaults = flatten(to_dict(type(cfg)()))
    idle = NOT_ACTING.get(cfg.data.source, ()) + (("scaling",) if cfg.devices == 1 else ())
    # A shipped workload is its name, as before workloads were config files (so the hashes of version 2 hold);
    # any other, or a shipped one changed, adds everything it is made of, its user source files' hash included.
    out = {"workload": cfg.workload.name}
    if not workloads_mod.is_builtin(cfg.workload):
        out["workload.spec"] = cfg.workload.hashed()
    values.pop("workload")
    for key, value in sorted(values.items()):
        if any(key == n or key.startswith(n + ".") for n in NOT_HASHED) or key in idle:
            continue
        if key not in HASHED_KEYS_V2 and value == defaults.get(key):
            continue
        out[key] = value
    return out


def config_hash(cfg: RunConfig) -> str:
    blob = json.dumps({"v": CONFIG_HASH_VERSION, **measured_settings(cfg)}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
