"""Every reason a knob or setting cannot act here: such a run is recorded as `skipped` with the reason, never
measured as the baseline under the knob's label, and a ladder climbing through it goes on and says why.

The parent asks :func:`skip_reason` once per run, before it launches anything: a session's turn asks it before it
looks in the cache (a run that cannot act here is never taken from it) and hands the answer down
(``harness.run.parent.runner.store_asked``); ``runner.run_and_store`` and ``isolate.execute`` ask it for a caller
that did not. What only the child can find, applying a knob to the model it built, raises
:class:`KnobNotApplicable` there with a message from here, as does a compile mode that fails on the model
(:func:`compile_failure_reason`).

Torch-free, for the parent: torch is imported only to count CUDA devices.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import shutil

import harness.config.machine as machine
from harness.config.resolution import per_device_batch
from harness.config.schema import CUDAGRAPH_COMPILE_MODES, DdpConfig, RunConfig
from harness.workload.own_knobs import settings_reasons

SHM_PATH = "/dev/shm"  # where loader workers put the batches they hand to the main process (Linux)
DEFAULT_PREFETCH = 2  # PyTorch's prefetch_factor when there are workers and none is given


class KnobNotApplicable(RuntimeError):
    """A knob cannot take effect here: the run is recorded as `skipped` with this reason."""


def skip_reason(cfg: RunConfig, cap_workers_at_cpus: bool = False, have_devices: int | None = None,
                have_nodes: int | None = None) -> str:
    """Every reason the resolved ``cfg`` cannot run as labelled on this machine, joined ("" when it can).
    ``cap_workers_at_cpus``: a ladder's rungs with more loader workers than CPUs are skipped (its own choice);
    ``have_devices``: the devices of ``cfg.device`` here (counted when None); ``have_nodes``: the nodes a sweep
    spans (None: not asked). Every check of this module is made first; the workload's own step
    (``own_knobs.settings_reasons``) and the loader workers' bound (``config.machine``) are asked last, each once,
    and their reasons take their places in the message."""
    before, after = _reasons_here(cfg)
    devices, nodes = too_many_devices(cfg, have_devices), too_many_nodes(cfg, have_nodes)
    over_cpus, shm = _workers_over_cpus(cfg, cap_workers_at_cpus), shared_memory_short(cfg)
    own = settings_reasons(cfg)
    workers = over_cpus or machine.workers_over_bound(cfg, cpus=machine.usable_cpus())
    return _joined(before + own + after + [devices, nodes, workers, shm])


def not_applicable(cfg: RunConfig) -> str:
    """Why a resolved config cannot run as labelled on its device and workload ("" when it can)."""
    before, after = _reasons_here(cfg)
    return _joined(before + settings_reasons(cfg) + after)


def _reasons_here(cfg: RunConfig) -> tuple[list[str], list[str]]:
    """:func:`not_applicable`'s reasons found in this module: those before the workload's own step's, and after."""
    after = [_checkpoint_conflict(cfg), _ddp_conflict(cfg)] + lm_conflicts(cfg)
    after += [_cudagraph_conflict(cfg)] if cfg.device == "cuda" else _gpu_only(cfg)
    return _workload_conflicts(cfg), after


def _joined(reasons: list[str]) -> str:
    return "; ".join(r for r in reasons if r)


def too_many_devices(cfg: RunConfig, have: int | None = None) -> str:
    """Why ``cfg`` asks for more devices than the machine has ("" when it does not)."""
    if cfg.devices == 1:
        return ""
    have = devices_here(cfg.device) if have is None else have
    if cfg.devices <= have:
        return ""
    what = (f"{have} CUDA GPU(s)" if cfg.device == "cuda"
            else f"{have} usable CPU core(s) (on a CPU a device is a process)")
    return f"devices={cfg.devices} needs {cfg.devices} devices; this machine has {what}"


def too_many_nodes(cfg: RunConfig, have: int | None) -> str:
    """Why ``cfg`` asks for more nodes than the sweep spans ("" when it does not, or when nobody asked)."""
    if have is None or cfg.nodes <= have:
        return ""
    return (f"nodes={cfg.nodes} needs {cfg.nodes} nodes; this sweep spans nodes={have} (start it with nodes="
            f"{cfg.nodes} on {cfg.nodes} nodes to measure this rung)")


def devices_here(device: str) -> int:
    """How many devices of this kind the machine has: GPUs, or on a CPU the cores this process may use."""
    if device == "cuda":
        import torch

        return torch.cuda.device_count()
    return machine.usable_cpus()


def _workers_over_cpus(cfg: RunConfig, cap_at_cpus: bool) -> str:
    """Loader workers beyond this machine's CPUs, where a ladder caps them there (``cap_workers_at_cpus``); beyond
    its bound (``machine.workers_over_bound``: settings the user gives are refused there when resolved) a ladder's
    rung is skipped whatever it says."""
    cpus = machine.usable_cpus()
    if cap_at_cpus and cfg.data.num_workers > cpus:
        return f"data.num_workers={cfg.data.num_workers} is more than the {cpus} CPUs this process may use"
    return ""


def shared_memory_short(cfg: RunConfig, free_bytes: float | None = None) -> str:
    """Why the loader's batches in flight do not fit in shared memory ("" when they do, or without workers).

    Each worker hands its batches to the main process through ``/dev/shm``, and the loader keeps up to
    ``num_workers x prefetch_factor`` of them in flight (each rank its own). Beyond its free space a worker dies
    with a bus error or "No space left on device" in the middle of the window, which measures nothing; refused
    before anything starts. ``free_bytes``: the free space (read from ``/dev/shm`` when None)."""
    workers = cfg.data.num_workers
    if workers == 0:
        return ""
    if free_bytes is None:
        try:
            free_bytes = shutil.disk_usage(SHM_PATH).free
        except OSError:  # no /dev/shm here: nothing to compare with
            return ""
    prefetch = cfg.data.prefetch_factor or DEFAULT_PREFETCH
    batch = loader_batch_bytes(cfg)
    need = workers * prefetch * batch * cfg.devices
    if need <= free_bytes:
        return ""
    prefetch_text = (f"data.prefetch_factor={prefetch}" if cfg.data.prefetch_factor
                     else f"PyTorch's default prefetch_factor {prefetch}")
    ranks = f" on each of devices={cfg.devices} ranks" if cfg.devices > 1 else ""
    return (f"data.num_workers={workers} x {prefetch_text} batches in flight{ranks}, "
            f"{_gb(batch)} each (batch {per_device_batch(cfg)} of {_sample_text(cfg)}), need {_gb(need)} of shared "
            f"memory; {SHM_PATH} has {_gb(free_bytes)} free: use fewer workers or a lower prefetch_factor, or a "
            f"larger {SHM_PATH} (e.g. docker run --shm-size)")


def loader_batch_bytes(cfg: RunConfig) -> int:
    """The bytes of one batch as a loader worker hands it over: float32 inputs, and int64 class indices
    (segmentation: one per position) or float32 regression targets. An estimate for a workload's own dataset."""
    spec = cfg.workload
    samples = per_device_batch(cfg)
    spatial = math.prod(cfg.data.patch_size)
    inputs = samples * spec.in_channels * spatial * 4
    if spec.target == "segmentation":
        targets = samples * spatial * 8
    elif spec.target == "class":
        targets = samples * 8
    else:
        targets = samples * math.prod(spec.target_shape or [spec.num_classes]) * 4
    return inputs + targets


def _sample_text(cfg: RunConfig) -> str:
    return f"float32 {[cfg.workload.in_channels, *cfg.data.patch_size]}"


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def no_units_to_checkpoint(unit_names: list[str]) -> str:
    """activation_checkpointing on a model that has none of the workload's checkpoint units (found in the child)."""
    return f"activation_checkpointing: the model has no {unit_names} to wrap"


def compile_failure_reason(compile_mode: str, exc: BaseException) -> str:
    """A compile mode that failed on this model (the child's torch.compile raised): which, and the error's first
    line, so that the run is never the eager baseline under the compile mode's label."""
    first = next((line for line in str(exc).strip().splitlines() if line.strip()), type(exc).__name__)
    return f"compile={compile_mode} failed on this model ({type(exc).__name__}): {first[:300]}"


NO_ATTENTION_KERNEL = "No available kernel"  # scaled_dot_product_attention's error when no allowed kernel fits


def no_attention_kernel_reason(exc: BaseException) -> str:
    """``lm.sdpa_backend`` allowed kernels none of which takes this model's attention call (found at its first step
    in the child: an explicit attention mask, which the flash kernels refuse, a dtype or a head size); "" for any
    other failure."""
    if NO_ATTENTION_KERNEL not in str(exc):
        return ""
    return ("lm.sdpa_backend: none of the scaled_dot_product_attention kernels it allows takes this model's "
            "attention call here (an explicit attention mask, which flash refuses, or its dtype or head size): "
            f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}")


def _gpu_only(cfg: RunConfig) -> list[str]:
    """Knobs that act on a CUDA GPU only, set on a CPU."""
    reasons = []
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
    if cfg.memory.limit_gb is not None:
        reasons.append(f"memory.limit_gb={cfg.memory.limit_gb:g} needs a CUDA GPU (it caps the device's caching "
                       "allocator; a CPU run's host memory has no allocator to cap)")
    return reasons


def _workload_conflicts(cfg: RunConfig) -> list[str]:
    """Knobs this workload's model cannot take (the child would fail, or run the baseline under the knob's name)."""
    spec, reasons = cfg.workload, []
    if cfg.cpus is not None and cfg.cpus * cfg.devices > machine.usable_cpus():  # each rank gets CPUs of its own
        need = f"cpus={cfg.cpus}" + (f" for each of devices={cfg.devices} ranks ({cfg.cpus * cfg.devices} CPUs)"
                                     if cfg.devices > 1 else "")
        reasons.append(f"{need} is more than the {machine.usable_cpus()} CPUs this process may use")
    if cfg.channels_last and spec.synthetic == "tokens" and spec.dataset is None:
        reasons.append(f"channels_last=true lays out 4-D and 5-D floating tensors; workload {spec.name!r} has batches "
                       "of integer token ids [batch, length] (synthetic: tokens), so it would change nothing")
    elif cfg.channels_last and spec.spatial_dims not in (2, 3):
        reasons.append(f"channels_last=true needs 2D or 3D samples (4D/5D tensors); workload {spec.name!r} has "
                       f"{spec.spatial_dims}D samples {spec.sample_shape(cfg.size)}")
    if cfg.model.depth is not None and "model.depth" not in spec.model_settings.values():
        reasons.append(f"model.depth={cfg.model.depth} needs a model that takes a depth: workload {spec.name!r} "
                       "hands none to its model (model_settings: {ARG: model.depth} does; unet3d takes it)")
    if cfg.model.features is not None and "model.features" not in spec.model_settings.values():
        reasons.append(f"model.features={cfg.model.features} needs a model that takes features: workload "
                       f"{spec.name!r} hands none to its model (basic_unet3d takes them)")
    if cfg.model.width != 1.0 and "width" not in spec.model_settings.values():
        reasons.append(f"model.width={cfg.model.width:g} needs a model that takes a width: workload {spec.name!r} "
                       "hands none to its model (model_settings: {ARG: width} does)")
    if spec.synthetic in ("tensors", "tokens") or spec.dataset is not None:
        switched = [f"data.{n}" for n in ("flip", "noise", "rotate", "elastic", "mixup") if getattr(cfg.data, n)]
        if cfg.data.augment != "none" or switched:
            what = (switched or [f"data.augment={cfg.data.augment}"])[0]
            own = "its own dataset" if spec.dataset is not None else f"synthetic: {spec.synthetic}"
            reasons.append(f"{what} applies to the volumes and images pipelines; workload {spec.name!r} has {own}")
    return reasons


def _checkpoint_conflict(cfg: RunConfig) -> str:
    """activation_checkpointing on a workload that names nothing to checkpoint."""
    spec = cfg.workload
    if cfg.activation_checkpointing and not spec.checkpoint_units and cfg.measure.mode != "loader":
        return (f"activation_checkpointing=true: workload {spec.name!r} names no checkpoint_units (the module "
                "classes to recompute), so nothing would be checkpointed; set workload.checkpoint_units=[pkg.Block]")
    return ""


def lm_conflicts(cfg: RunConfig) -> list[str]:
    """A language model's knobs (``lm.*``) where they cannot act: no attention to choose a kernel for, a kernel
    this device or dtype has none of, float8 without its GPU or torchao, FSDP2 on one device."""
    lm, spec, reasons = cfg.lm, cfg.workload, []
    backend = f"lm.sdpa_backend={lm.sdpa_backend}"
    if lm.sdpa_backend != "auto" and spec.synthetic != "tokens":
        reasons.append(f"{backend} chooses the kernels of scaled_dot_product_attention, which a language model on "
                       f"token batches calls (workload=gpt, gpt2, llama); workload {spec.name!r} has synthetic: "
                       f"{spec.synthetic}")
    elif cfg.device == "cpu" and lm.sdpa_backend in ("efficient", "cudnn"):
        reasons.append(f"{backend} has no CPU kernel (PyTorch's CPU attention has math and flash only)")
    elif cfg.device == "cuda" and lm.sdpa_backend in ("flash", "cudnn") and cfg.precision == "32":
        reasons.append(f"{backend} runs fp16 or bf16 only; precision=32 has no such kernel (precision=bf16-mixed)")
    if lm.checkpoint_policy != "full" and not cfg.activation_checkpointing:
        reasons.append(f"lm.checkpoint_policy={lm.checkpoint_policy} is activation checkpointing's policy; "
                       "activation_checkpointing=false checkpoints nothing")
    if lm.float8 and cfg.device != "cuda":
        reasons.append("lm.float8=true needs a CUDA GPU with float8 tensor cores (compute capability >= 8.9: Ada, "
                       "Hopper, Blackwell)")
    elif lm.float8 and importlib.util.find_spec("torchao") is None:
        reasons.append("lm.float8=true needs torchao (pip install torchao), whose float8 training it runs")
    if lm.fsdp and cfg.devices < 2:
        reasons.append(f"lm.fsdp=true needs devices >= 2 (FSDP2 shards the parameters over the ranks); "
                       f"devices={cfg.devices}")
    knobs = [f"{k}={v}" for k, v, default in (
        ("lm.fsdp_reshard_after_forward", str(lm.fsdp_reshard_after_forward).lower(), "true"),
        ("lm.fsdp_mixed_precision", lm.fsdp_mixed_precision, "none"), ("lm.fsdp_prefetch", lm.fsdp_prefetch, 0))
        if v != default]
    if knobs and not lm.fsdp:
        reasons.append(f"{', '.join(knobs)}: a knob of FSDP2, and lm.fsdp=false runs DDP")
    if cfg.compile_cache == "fresh" and cfg.compile == "off":
        reasons.append("compile_cache=fresh empties compile's caches; compile=off compiles nothing")
    return reasons


def _ddp_conflict(cfg: RunConfig) -> str:
    """DDP knobs on a single device, or a strong-scaling batch that does not split evenly over the devices."""
    if cfg.devices == 1:
        default = DdpConfig()
        changed = [(f.name, getattr(cfg.ddp, f.name)) for f in dataclasses.fields(cfg.ddp)
                   if getattr(cfg.ddp, f.name) != getattr(default, f.name)]
        return "; ".join(f"ddp.{k}={json.dumps(v) if isinstance(v, bool) else v} needs devices >= 2 (a setting of "
                         "DistributedDataParallel)" for k, v in changed)
    if cfg.scaling == "strong" and cfg.batch_size % cfg.devices:
        return (f"scaling=strong splits batch_size={cfg.batch_size} over devices={cfg.devices}, which does not "
                "divide it; use a batch_size that is a multiple of devices")
    return ""


def _cudagraph_conflict(cfg: RunConfig) -> str:
    """A CUDA-graph compile mode with a training loop that keeps gradients across graph replays.

    A replay writes its outputs, the gradients among them, into the graph's static memory. Accumulating over
    micro-batches (``.grad += ...`` between replays), or zeroing gradients in place instead of dropping them,
    keeps those tensors alive into the next replay, which overwrites them: the step would train on wrong
    gradients (or fail with "accessing tensor output of CUDAGraphs that has been overwritten"), so the run
    would not measure the knob it is labelled with.
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
