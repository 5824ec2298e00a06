"""The settings' schema: typed dataclasses, one per section, and the choices their names take.

Plain dataclasses that OmegaConf takes as structured configs: Hydra composes the command line against them at the
edge (``harness.commands.hydra_edge``), and :mod:`harness.config.keys` converts a value to its field's type through
the same typing. Fields whose values OmegaConf's typing cannot say (a bool or "auto", a number or "auto") are
``Any`` and checked by :mod:`harness.config.validate`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional

from harness.config import workload as workloads_mod
from harness.config.workload import WorkloadSpec

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
MEMORY_LIMIT_GB = (0.25, 1024.0)  # memory.limit_gb's valid range, GiB: a quarter of one to beyond any single card
MATMUL_PRECISIONS = ("highest", "high", "medium")  # torch.set_float32_matmul_precision
SDPA_BACKENDS = ("auto", "math", "efficient", "flash", "cudnn")  # torch.nn.attention.SDPBackend; auto: PyTorch's choice
FSDP_MIXED_PRECISIONS = ("none", "bf16")  # FSDP2's MixedPrecisionPolicy: none, or bf16 parameters, fp32 reductions
CHECKPOINT_POLICIES = ("full", "selective")  # activation checkpointing: every op of a unit again, or all but matmuls'
COMPILE_CACHES = ("reuse", "fresh")  # compile's caches: this machine's (warm), or an empty folder (cold)
# Compile modes that capture CUDA graphs on a GPU ("max-autotune" turns on inductor's cudagraphs too).
CUDAGRAPH_COMPILE_MODES = ("reduce-overhead", "max-autotune")
MP_CONTEXTS = ("fork", "spawn", "forkserver")  # data.multiprocessing_context: how loader workers start


@dataclass
class ModelConfig:
    width: float = 1.0  # multiplies the size preset's channel counts ("half filters" = 0.5)
    deep_supervision: bool = False  # mednext only
    mednext_size: str = "S"
    kernel_size: int = 3
    depth: Optional[int] = None  # UNet levels (None: the workload's own, 5 for unet3d); "4 levels instead of 5"
    features: Optional[List[int]] = None  # BasicUNet's six feature counts before model.width (None: MONAI's own)


@dataclass
class DataConfig:
    source: str = "synthetic"
    num_workers: int = 0
    prefetch_factor: Optional[int] = None  # None: PyTorch's default (2) when workers > 0
    persistent_workers: bool = False
    multiprocessing_context: Optional[str] = None  # how workers start (MP_CONTEXTS); None: the platform's default
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
    storage_items_per_s: float = 0.0  # storage cost: items a second all readers of a run share at most; 0: no ceiling
    page_cache: str = "keep"  # drop: files read per item are dropped from the page cache after each read


@dataclass
class OptimizerConfig:
    fused: Optional[bool] = None  # None: PyTorch's choice
    foreach: Optional[bool] = None
    zero_grad_set_to_none: bool = True


@dataclass
class MeasureConfig:
    # A number, or "auto": warm up until the step time is steady (harness.run.child.stopping.WarmupRule), opt-in
    warmup_steps: Any = None
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
class DistConfig:
    """Where the nodes of a run of ``nodes`` >= 2 meet (torchrun's ``--master-addr``, ``--master-port``,
    ``--node-rank``); unset: read from the scheduler's environment (torchrun, SLURM, Kubernetes, SkyPilot)."""

    master_addr: str = ""
    master_port: int = 0
    node_rank: Optional[int] = None
    rdzv_timeout_s: float = 120.0  # how long a node waits for the others to join before the run ends `error`


@dataclass
class ProfileConfig:
    """A profile of a few more training steps, taken after the measured window has closed (never inside it)."""

    enabled: bool = False  # profile.enabled=true: each run keeps a profile (profile_json) and its trace
    steps: int = 5  # profiled steps (after one the profiler starts up in, which is not recorded)
    trace_limit_mb: float = 16.0  # the gzipped Chrome/Perfetto trace's cap: cut to its earliest events beyond


@dataclass
class MemoryConfig:
    """The device memory a run may use: a smaller card's on a bigger one (a CUDA GPU only)."""

    # GiB (2**30 bytes, as cards are sold: an A5000's 24 GB is 24 GiB) the CUDA caching allocator may hold; the
    # child caps it (torch.cuda.set_per_process_memory_fraction) before the model is built, and a run over it ends
    # `oom`. None: no cap. The CUDA context and other processes are outside the cap.
    limit_gb: Optional[float] = None


@dataclass
class LmConfig:
    """A language model's knobs (``workload=gpt``, ``gpt2``, ``llama``; harness.workload.lm_knobs)."""

    sdpa_backend: str = "auto"  # the scaled_dot_product_attention kernels allowed (sdpa_kernel); auto: all
    # activation_checkpointing=true's policy: full recomputes each unit's forward; selective saves the outputs of
    # attention and of every second matmul (torchtitan's op-level policy) and recomputes the rest
    checkpoint_policy: str = "full"
    float8: bool = False  # torchao's float8 training of the Linear layers (a CUDA GPU of compute capability >= 8.9)
    fsdp: bool = False  # devices >= 2: FSDP2 (fully_shard per checkpoint unit, then the model) instead of DDP
    # lm.fsdp's knobs (torch.distributed.fsdp.fully_shard's own): reshard_after_forward=false keeps each unit's
    # gathered parameters from its forward to its backward (one all-gather a step fewer, more memory); the mixed
    # precision policy (bf16: parameters gathered and computed in bf16, gradients reduced in fp32); an explicit
    # prefetch of the next N units' parameters in the forward and the backward (0: FSDP2's own, implicit)
    fsdp_reshard_after_forward: bool = True
    fsdp_mixed_precision: str = "none"
    fsdp_prefetch: int = 0


@dataclass
class SweepConfig:
    id: str = ""
    rung: Optional[int] = None
    round: int = 0
    # runs a rung: a number of rounds, or "auto" (the default): rounds until every verdict is decided (a look after
    # each round, O'Brien-Fleming alpha spending over max_repeats rounds), no round started past budget_min minutes
    repeats: Any = "auto"
    rerun: bool = False
    budget_min: float = 10.0  # repeats=auto only: wall-clock minutes; no round starts that would end after them
    max_repeats: int = 6  # repeats=auto only: the most rounds (the looks' information is rounds / max_repeats)
    # a busy run (analysis.stats.busy) measured again, once (climb too); false: kept as measured, no busy stop
    remeasure_busy: bool = True
    # at the sweep's end, its decided figures exported: "tb:DIR", "mlflow:URI" or "wandb:DIR" (docs/export.md); "" none
    export: str = ""


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
    compile_cache: str = "reuse"  # fresh: compile into an empty cache folder (its cold cost), not this machine's
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
    devices: int = 1  # per node
    nodes: int = 1  # hosts, each running `devices` ranks; they meet at `dist.*` (docs/ddp.md, several nodes)
    scaling: str = "weak"
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    measure: MeasureConfig = field(default_factory=MeasureConfig)
    val: ValConfig = field(default_factory=ValConfig)
    debug: DebugConfig = field(default_factory=DebugConfig)
    ddp: DdpConfig = field(default_factory=DdpConfig)
    dist: DistConfig = field(default_factory=DistConfig)
    profile: ProfileConfig = field(default_factory=ProfileConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    lm: LmConfig = field(default_factory=LmConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)

    @property
    def effective_width(self) -> float:
        """The model's channel multiplier: ``model.width`` times the size preset's (a resolved config's size)."""
        return self.model.width * self.workload.sizes[self.size].width
