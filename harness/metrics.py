"""Every metric a run measures, declared once: a field of :class:`Metrics`, named with its unit.

The record stores each as a column of its name (``harness.store.record.RunRecord`` composes ``Metrics``), and the
measuring child fills each in its summary (``harness.run.child.summary.Summary`` extends it), so adding a metric is
one field here: its name with the unit, its type (one the store maps to arrow: ``str``, ``int | None``,
``float | None``, ``bool | None``, ``list[float]``), an empty default (a record written before it existed reads
back with that empty value) and a comment saying where it comes from. Beneath every layer, importing nothing: the
store and analysis read it without the measuring side, and the measured process imports it without the store (and
its pandas and pyarrow).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Metrics:
    """What a run measured: its samples per step and cost, the measured window's step times, throughput, data wait,
    memory, CPU and GPU use, the ranks of a multi-device run, and the profile taken after the window."""

    samples_per_step: int | None = None
    flops_per_sample: float | None = None
    warmup_steps: int | None = None
    queue_warmup_steps: int | None = None  # of them, taken to eat the batches the loader queued (run/child/stopping.py)
    measured_steps: int | None = None
    samples_per_s: float | None = None
    units_per_s: float | None = None
    step_ms_p50: float | None = None
    step_ms_p90: float | None = None
    step_ms_mean: float | None = None
    data_wait_frac: float | None = None
    data_wait_ms_p50: float | None = None
    compile_s: float | None = None  # from compile's own timers, else estimated from the warm-up (compile on only)
    first_step_s: float | None = None
    measured_s: float | None = None
    # when the measured window opened (UNIX seconds; it ran measured_s from there): to line a run up with what
    # else the machine did then (other jobs' logs, a monitor's series, a paired process)
    window_start_unix: float | None = None
    peak_vram_bytes: float | None = None
    # host memory: the child's own exact peak (the kernel's high-water mark, read once after the window), with the
    # loader workers' peaks the parent samples from outside added to the host's
    peak_host_rss_bytes: float | None = None
    peak_main_rss_bytes: float | None = None
    peak_worker_rss_bytes: float | None = None  # the largest loader worker
    worker_rss_bytes: list[float] = field(default_factory=list)  # peak RSS of every loader worker seen
    gpu_util_pct: float | None = None
    gpu_mem_used_bytes: float | None = None
    gpu_power_w: float | None = None
    cpu_util_pct: float | None = None
    other_cpu_pct: float | None = None  # CPU used by other processes during the measured window
    # the measuring process's minor page faults a measured step (pages the kernel mapped and zero-filled for it): a
    # count the load does not change, which says which state glibc's heap was in (docs/measuring.md)
    window_minor_faults_per_step: float | None = None
    mfu: float | None = None  # model FLOPs (flops_per_sample: MLPerf's rule, recomputation excluded) / peak_flops
    peak_flops: float | None = None
    # the run's FLOPs as trained: activation checkpointing's recomputation included (= flops_per_sample without it)
    # and the utilisation they make (hardware FLOPs MFU, "HFU")
    hardware_flops_per_sample: float | None = None
    mfu_hardware: float | None = None
    loss_first: float | None = None
    loss_last: float | None = None
    step_ms: list[float] = field(default_factory=list)
    data_wait_ms: list[float] = field(default_factory=list)
    # GPU memory apart: peak_vram_bytes is the measured window's allocated peak; the warm-up
    # (cuDNN benchmark trials, autotuning, graph capture) has its own peaks; reserved = the allocator's cache,
    # what must fit in the device. gpu_mem_used_bytes (NVML) is device-wide.
    peak_vram_reserved_bytes: float | None = None
    warmup_peak_vram_bytes: float | None = None
    warmup_peak_vram_reserved_bytes: float | None = None
    # the caching allocator's counters over the run (torch.cuda.memory_stats, after the window): num_alloc_retries
    # (a cudaMalloc failed, the cache was freed, the allocation tried again: memory pressure that slows a step) and
    # num_ooms (out-of-memory errors raised and survived). Empty off CUDA and in older records.
    cuda_alloc_retries: int | None = None
    cuda_ooms: int | None = None
    # the same counters apart: up to the window's opening (the set-up and the warm-up: cuDNN's benchmark trying
    # workspaces that do not fit is counted here) and within the measured window alone (pressure in the steady
    # state). Empty off CUDA and in older records.
    warmup_cuda_alloc_retries: int | None = None
    warmup_cuda_ooms: int | None = None
    window_cuda_alloc_retries: int | None = None
    window_cuda_ooms: int | None = None
    # device memory outside the caching allocator at the window's end: this process's use as NVML lists it less the
    # allocator's reserved (the CUDA context, the libraries' handles and workspaces: what memory.limit_gb does not
    # cap); and the cuDNN workspace cap (MiB, CUDNN_CONV_WSCAP_DBG) the run had, set under memory.limit_gb. Empty off
    # CUDA, where NVML does not tell this process apart, without a cap, and in older records (run/child/device_memory)
    cuda_outside_allocator_bytes: float | None = None
    cudnn_workspace_cap_mib: int | None = None
    # the optional packages MONAI's own imports skipped in this run's process (a reference workload only: torchvision,
    # transformers, mlflow, matplotlib; comma-separated, "" for none; harness.workload.trimmed_imports)
    imports_trimmed: str = ""
    gpu_sample_note: str = ""  # NVML metrics that could not be read (MIG, GPU gone), and why
    # CUDA events: per measured step, the device time from the first batch in hand to the optimizer
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
    # what the harness itself spent: the parent process's CPU time (all its threads: polls, sampling,
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
    # several nodes (nodes >= 2): rank r runs on node r // devices; each node's throughput is its slowest rank's
    # samples/s times its ranks (the run's is the slowest rank's times the world: every step waits for it)
    nodes: int | None = None  # 1 for a one-node run, empty in older records
    node_samples_per_s: list[float] = field(default_factory=list)  # per node, in node order
    slowest_node: int | None = None
    rank_hosts: str = ""  # every rank's host name, in rank order, comma-separated
    # compile modes that capture CUDA graphs (reduce-overhead, max-autotune on CUDA): how often Inductor skipped
    # capturing one (its counter "cudagraph_skips", read after the window); > 0: the run ran (partly) without
    # CUDA graphs under its compile mode's label. Empty where no CUDA graph is asked for, and in older records.
    cudagraph_skips: int | None = None
    # host memory with each shared page counted once (psutil's memory_full_info, sampled by the parent): the
    # tree's PSS (main + loader workers; PSS divides a shared page among the processes mapping it), each loader
    # worker's USS (the pages it alone holds: what it adds), and Inductor's compile / autotune workers, counted
    # apart from the loader workers (their PSS together). Empty where the system does not report them.
    peak_host_pss_bytes: float | None = None
    worker_uss_bytes: list[float] = field(default_factory=list)
    peak_compile_worker_bytes: float | None = None
    # profile.enabled=true: the profile of a few steps run after the window (harness.profiles' JSON summary),
    # and its Chrome/Perfetto trace's path relative to the results folder ("" without one)
    profile_json: str = ""
    profile_trace: str = ""
