"""Every knob as one small ``apply_*`` function, and ONE function, :func:`prepare`, that owns the
order they are applied in. Runs in the measuring child only (imports torch).

Order, and why:
  0. the memory limit (``memory.limit_gb``) - caps the device's allocator before anything is allocated on it, so
     that the model's parameters count against the limit as on the smaller card;
  1. backend flags (TF32 or float32_matmul_precision, cudnn.benchmark, cudnn.deterministic; a language model's SDPA
     backend, compile's cache folder: ``lm_knobs``) - global, before any kernel is chosen;
  2. build the model (width, deep supervision are builder arguments);
  3. activation checkpointing (full, or ``lm.checkpoint_policy=selective``) - wraps the plain modules, before
     anything changes their type;
  4. device + memory format (channels_last) - parameters must live where and how they will run; then float8
     training (``lm.float8``), which swaps the Linear layers on their device, before DDP and compile see them;
  5. DistributedDataParallel (``devices`` >= 2; ``lm.fsdp``: FSDP2 in its place) - after checkpointing, because
     DDP must see the model's final modules (its gradient hooks are registered on the parameters it finds
     then; the checkpoint wrapper's non-reentrant checkpoint needs no ``static_graph`` under DDP); after device and
     channels_last, because DDP broadcasts rank 0's parameters and lays its gradient buckets out when it is
     constructed, so the parameters must already be on this rank's device in their final memory format (a later
     ``.to`` would leave the buckets pointing at the old tensors); before compile, because ``torch.compile`` of
     the DDP module is the documented way: its DDPOptimizer splits the graph at bucket boundaries so the
     all-reduce of one bucket overlaps the backward of the next, which compiling the inner model and wrapping
     that afterwards would lose (one graph, all-reduce only after the whole backward);
  6. torch.compile - last model transform, so it traces the checkpointed, channels-last (DDP) model;
  7. optimizer (fused / foreach) - over the parameters in their final place;
  8. precision - an autocast context and, for fp16, a GradScaler, used by the training step.
     On a CPU with bf16, 3D convolutions whose input has depth 2 run in fp32 (``guard_cpu_bf16_conv3d``,
     applied with 4, before compile traces the model): oneDNN's bf16 conv3d weight gradient is wrong
     there (docs/cpu-bf16-conv3d.md), which made the default CPU sweep end in `nan`.
Per-step work a knob asks for (memory cleanup, visualisation writes every N steps) is :func:`periodic_work`,
called by the training loop after each optimizer step, and only built when some knob asks for it.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import shutil
import tempfile
from dataclasses import dataclass
from multiprocessing.util import get_temp_dir
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from harness.config import CUDAGRAPH_COMPILE_MODES, RunConfig
from harness.config.targets import functions_of
from harness.workload import build, lm_knobs
from harness.workload.applicability import KnobNotApplicable, no_units_to_checkpoint
from harness.workload.build import build_all
from harness.workload.memory_limit import apply_memory_limit
from harness.workload.step.adapters import steps_of
from harness.workload.step.interface import OwnStep, ValStep
from harness.workload.step.loop import own_step_conflicts
from harness.workload.step.validation import has_own_val_data, through_ddp, with_own_val_data


def apply_backend_flags(cfg) -> dict[str, Any]:
    """Set TF32 and cudnn.benchmark; returns what was set (stored with the run as ``backend_flags``)."""
    flags = apply_tf32(cfg.tf32)
    torch.backends.cudnn.benchmark = bool(cfg.cudnn_benchmark)
    flags["cudnn.benchmark"] = bool(cfg.cudnn_benchmark)
    if cfg.cudnn_deterministic:  # only when asked: the flags of older records stay as they were
        torch.backends.cudnn.deterministic = True
        flags["cudnn.deterministic"] = True
    if cfg.float32_matmul_precision is not None:
        flags.update(apply_matmul_precision(cfg.float32_matmul_precision))
    return flags


def apply_cpu_affinity(cpus: int | None, rank: int = 0) -> list[int] | None:
    """Run on ``cpus`` of the CPUs this process may use (loader workers inherit it), with no more torch threads
    than CPUs; returns the CPUs (None: left as it was). The connectomics guide's ``num_cpus``. Rank R of a
    multi-device run takes the R-th block of ``cpus`` (the ranks inherit one CPU set from the launcher), so that
    no two ranks share a CPU; ``applicability.not_applicable`` has checked that the blocks fit."""
    import os

    if cpus is None:
        return None
    chosen = sorted(os.sched_getaffinity(0))[rank * cpus:(rank + 1) * cpus]
    os.sched_setaffinity(0, chosen)
    torch.set_num_threads(min(torch.get_num_threads(), len(chosen)))
    return chosen


def apply_matmul_precision(precision: str) -> dict[str, Any]:
    """``torch.set_float32_matmul_precision`` (the ImageNet guide's "TF32": 'medium'); returns it as read back."""
    torch.set_float32_matmul_precision(precision)
    return {"float32_matmul_precision": torch.get_float32_matmul_precision()}


# torch >= 2.9: per-backend precision ("tf32" / "ieee"); "none" inherits from the parent. Order matters for reading
# back: the cudnn parent is what inductor's Triton conv templates read, the conv child what cuDNN convs use.
_NEW_TF32_FLAGS = (("cuda.matmul", "fp32_precision"), ("cudnn", "fp32_precision"), ("cudnn.conv", "fp32_precision"),
                   ("cudnn.rnn", "fp32_precision"))
_OLD_TF32_FLAGS = (("cuda.matmul", "allow_tf32"), ("cudnn", "allow_tf32"))


def apply_tf32(tf32: bool | None, backends=None) -> dict[str, Any]:
    """TF32 for matmuls AND cuDNN convolutions; returns the flags as read back.

    ``None`` leaves PyTorch's defaults: matmuls in full FP32, but cuDNN convolutions already in TF32, so
    ``tf32=true`` alone only moves matmuls and the TF32 rung of a convolutional ladder measures TF32 on vs off
    only against an explicit ``tf32=false``, which turns cuDNN's TF32 off too.

    torch >= 2.9 has ``fp32_precision`` per backend beside the old ``allow_tf32`` flags, and reading an old flag
    that disagrees with the new ones raises ("mix of the legacy and new APIs"). torch 2.9-2.11's own Dynamo and
    Inductor still read the old flags, so both are written, the old setters first (they also write the new values,
    coarsely) and then the new ones (per backend, cuDNN's RNNs included): every flag then reads the same value.
    The flags are read back through the new API where it exists, the old one where it does not.
    """
    backends = backends if backends is not None else torch.backends
    new_api = all(hasattr(_attr(backends, path), name) for path, name in _NEW_TF32_FLAGS)
    old_flags = tuple((path, name) for path, name in _OLD_TF32_FLAGS if _has_flag(_attr(backends, path), name))
    if tf32 is not None:
        for path, name in old_flags:
            setattr(_attr(backends, path), name, tf32)
        for path, name in _NEW_TF32_FLAGS if new_api else ():
            setattr(_attr(backends, path), name, "tf32" if tf32 else "ieee")
    flags = _NEW_TF32_FLAGS if new_api else old_flags
    out: dict[str, Any] = {"tf32": tf32, "tf32_api": "fp32_precision" if new_api else "allow_tf32"}
    out.update({f"{path}.{name}": getattr(_attr(backends, path), name) for path, name in flags})
    return out


def _has_flag(obj, name: str) -> bool:
    """Whether ``obj`` has the flag ``name``; torch reads a flag to answer, and an old flag that already disagrees
    with the new API raises there: it exists."""
    try:
        return hasattr(obj, name)
    except RuntimeError:
        return True


def _attr(obj, dotted: str):
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def apply_activation_checkpointing(model: nn.Module, unit_types: tuple[type, ...], **checkpoint_kwargs) -> int:
    """Recompute the activations of every ``unit_types`` module in backward; returns how many. ``checkpoint_kwargs``
    go to torch's checkpoint (a selective policy's ``context_fn``: ``lm_knobs.checkpoint_kwargs``)."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        apply_activation_checkpointing as wrap,
        checkpoint_wrapper,
    )

    # Only the outermost units: wrapping a unit inside a wrapped unit recomputes twice.
    targets = {id(m) for m in _outermost(model, unit_types)}
    if not targets:
        raise KnobNotApplicable(no_units_to_checkpoint([t.__name__ for t in unit_types]))
    wrap(model, checkpoint_wrapper_fn=functools.partial(checkpoint_wrapper, **checkpoint_kwargs),
         check_fn=lambda m: id(m) in targets)
    return len(targets)


def _outermost(module: nn.Module, unit_types: tuple[type, ...]):
    for child in module.children():
        if isinstance(child, unit_types):
            yield child
        else:
            yield from _outermost(child, unit_types)


def memory_format(cfg, spatial_dims: int) -> torch.memory_format:
    if not cfg.channels_last:
        return torch.contiguous_format
    return torch.channels_last_3d if spatial_dims == 3 else torch.channels_last


def apply_device_and_format(model: nn.Module, device: torch.device, fmt: torch.memory_format) -> nn.Module:
    return model.to(device=device, memory_format=fmt)


class _Fp32WhenShallow(nn.Module):
    """A Conv3d that runs in fp32 when its input's depth is 2 or less (see ``guard_cpu_bf16_conv3d``)."""

    def __init__(self, conv: nn.Conv3d):
        super().__init__()
        self.conv = conv

    def forward(self, x):
        if x.shape[-3] > 2:
            return self.conv(x)
        with torch.autocast(device_type="cpu", enabled=False):
            return self.conv(x.float())


def guard_cpu_bf16_conv3d(model: nn.Module, cfg) -> int:
    """Work around an upstream bug: on CPUs with bf16 (oneDNN), the weight gradient of a bf16 conv3d
    whose input has depth 2 (kernel > 1) is wrong by ~100% and at times inf/nan, and differs run to
    run; depth 1 or 3+ is right (docs/cpu-bf16-conv3d.md has the reproducer). Such layers (the bottom
    of a UNet on a 32^3 patch: 2x2x2) run in fp32; they are a negligible share of the work. Returns
    how many convolutions were guarded."""
    if cfg.device != "cpu" or cfg.precision != "bf16-mixed":
        return 0
    targets = [(parent, name) for parent in model.modules() for name, child in parent.named_children()
               if isinstance(child, nn.Conv3d) and child.kernel_size[0] > 1]
    for parent, name in targets:
        setattr(parent, name, _Fp32WhenShallow(getattr(parent, name)))
    return len(targets)


def cudagraph_multi_device_conflict(cfg) -> str:
    """Why a CUDA-graph compile mode cannot be measured with ``devices`` >= 2 ("" when it can).

    Under DDP each replay of a captured graph would have to hold the gradient all-reduce (NCCL inside the graph,
    buckets in the graph's static memory), and no two-GPU run of the harness has shown that to train correctly
    yet: until one passes, such a rung is recorded as `skipped` with this reason rather than measured on trust.
    Decided here, in each rank before anything is built, because the settings' own applicability check lives in
    code being reshaped; that check is where it belongs.
    """
    if cfg.compile not in CUDAGRAPH_COMPILE_MODES or cfg.devices < 2 or cfg.device != "cuda" \
            or cfg.measure.mode == "loader":
        return ""
    return (f"compile={cfg.compile} captures CUDA graphs, which no two-GPU run has yet shown to train correctly with "
            f"devices={cfg.devices} (DDP's all-reduce inside a graph replay); use compile=default, or devices=1")


def apply_compile(model: nn.Module, mode: str) -> nn.Module:
    if mode == "off":
        return model
    return torch.compile(model, mode=None if mode == "default" else mode)


def compile_forward(module: nn.Module, mode: str) -> nn.Module:
    """Compile of a LightningModule: its forward, in place (as Lightning's Trainer does with a compiled module), so
    that its training_step, called as it is, runs the compiled forward; the step itself is not traced."""
    if mode != "off":
        module.forward = torch.compile(module.forward, mode=None if mode == "default" else mode)
    return module


def apply_ddp(model: nn.Module, cfg, device: torch.device) -> nn.Module:
    """Wrap the prepared model in DistributedDataParallel with the ``ddp.*`` knobs (PyTorch's defaults when unset);
    the process group is already joined (``harness.run.child.ranks.join``)."""
    from torch.nn.parallel import DistributedDataParallel

    kwargs: dict[str, Any] = dict(
        gradient_as_bucket_view=cfg.ddp.gradient_as_bucket_view, static_graph=cfg.ddp.static_graph,
        find_unused_parameters=cfg.ddp.find_unused_parameters, broadcast_buffers=cfg.ddp.broadcast_buffers,
        device_ids=[device.index] if device.type == "cuda" else None,
    )
    if cfg.ddp.bucket_cap_mb is not None:
        kwargs["bucket_cap_mb"] = cfg.ddp.bucket_cap_mb
    ddp = DistributedDataParallel(model, **kwargs)
    apply_comm_hook(ddp, cfg.ddp.comm_hook)
    return ddp


def apply_comm_hook(ddp: nn.Module, hook: str) -> None:
    """Compress gradients to fp16 or bf16 for the all-reduce (and back), PyTorch's built-in DDP hooks."""
    if hook == "none":
        return
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    chosen = {"fp16": default_hooks.fp16_compress_hook, "bf16": default_hooks.bf16_compress_hook}[hook]
    ddp.register_comm_hook(None, chosen)


def build_optimizer(cfg, workload, params) -> torch.optim.Optimizer:
    """The workload's optimizer with the optimizer knobs (fused / foreach) as given."""
    kwargs: dict[str, Any] = {}
    if cfg.optimizer.fused is not None:
        kwargs["fused"] = cfg.optimizer.fused
    if cfg.optimizer.foreach is not None:
        kwargs["foreach"] = cfg.optimizer.foreach
    return build.build_optimizer(workload, params, **kwargs)


def autocast_dtype(precision: str) -> torch.dtype | None:
    return {"32": None, "bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}[precision]


def autocast_context(precision: str, device: torch.device) -> Callable[[], Any]:
    dtype = autocast_dtype(precision)
    if dtype is None:
        return contextlib.nullcontext
    return functools.partial(torch.autocast, device_type=device.type, dtype=dtype)


def grad_scaler(precision: str, device: torch.device):
    if precision != "16-mixed":
        return None
    return torch.amp.GradScaler(device.type)


def periodic_work(cfg: RunConfig, device: torch.device,
                  validate: Callable[[], None] | None = None) -> Callable[[int, torch.Tensor, Any], None] | None:
    """What knobs ask to be done every N steps, as one call after a step (None when no knob asks, so that the
    loop does nothing extra): ``memory_cleanup_every_n_steps`` (gc.collect, and torch.cuda.empty_cache on a GPU,
    the DETR guide's "memory_cleanup_frequency"), ``visualize_every_n_steps`` (a sample's input and output
    copied to the host, which waits for the device, and written to disk, as a TensorBoard image write does) and
    ``val.every_n_steps`` (``validate``: a validation pass; one runs at step 0 too, so that a compiled model's
    eval-mode graph is built in the warm-up)."""
    cleanup, visualize, every_val = cfg.memory_cleanup_every_n_steps, cfg.visualize_every_n_steps, cfg.val.every_n_steps
    if not cleanup and not visualize and not (every_val and validate):
        return None
    # in the process's scratch folder (multiprocessing's, removed when the process ends; a harness run's is in its job
    # folder, so its writes go with it even when the run is killed)
    folder = Path(tempfile.mkdtemp(prefix="harness-visualize-", dir=get_temp_dir())) if visualize else None

    def after_step(step: int, x: torch.Tensor, out: Any) -> None:
        if cleanup and (step + 1) % cleanup == 0:
            gc.collect()
            if device.type == "cuda":
                torch.cuda.empty_cache()
        if visualize and (step + 1) % visualize == 0 and isinstance(out, torch.Tensor):
            sample = {"input": x[0].detach().float().cpu(), "output": out[0].detach().float().cpu()}
            torch.save(sample, folder / f"step{step:06d}.pt")
        if every_val and validate and (step == 0 or (step + 1) % every_val == 0):
            validate()

    after_step.folder = folder  # removed by end_periodic_work when the loop lets go of it
    return after_step


def end_periodic_work(after_step: Callable[[int, torch.Tensor, Any], None] | None) -> None:
    """The visualisation writes of ``periodic_work`` removed (a run ends with ``os._exit``, so no ``atexit`` would)."""
    folder = getattr(after_step, "folder", None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
        after_step.folder = None


def validation_pass(cfg, prep: "Prepared", loader) -> Callable[[], None]:
    """One pass of ``cfg.val.steps`` batches of ``loader`` (a new iterator each pass, as trainers make one): the
    model in eval mode under torch.inference_mode() or torch.no_grad(), with the training's autocast, outputs
    and loss computed and the loss read back (the metric a trainer logs), then back to train mode."""
    grad_off = torch.inference_mode if cfg.val.inference_mode else torch.no_grad
    nb = bool(cfg.data.non_blocking)

    def run() -> None:
        prep.model.eval()
        with grad_off(), prep.autocast():
            for _, (x, y) in zip(range(cfg.val.steps), loader):
                x = x.to(prep.device, non_blocking=nb, memory_format=prep.memory_format)
                float(prep.loss_fn(prep.model(x), y.to(prep.device, non_blocking=nb)))
        prep.model.train()

    return run


@dataclass
class Prepared:
    model: nn.Module
    loss_fn: nn.Module
    optimizer: torch.optim.Optimizer
    autocast: Callable[[], Any]
    scaler: Any
    device: torch.device
    memory_format: torch.memory_format
    checkpointed_units: int
    backend_flags: dict[str, Any]
    own: OwnStep | None = None  # the workload's own step (harness.workload.step.adapters); None: loss_fn(model(x), y)
    val: ValStep | None = None  # its validation step (harness.workload.step.validation); None: the default step's pass


def prepare(cfg, workload, device: torch.device | None = None, rank=None, note=None) -> Prepared:
    """Build the workload's model and training objects with every knob applied, in order. Under DDP ``device`` is
    this rank's and ``rank`` (``harness.run.child.ranks.Rank``) says how many there are. ``note(mark)``: told when
    the model is built ("built") and on its device ("on_device"), for the run's phases."""
    note = note or (lambda mark: None)
    device = device or torch.device(cfg.device)
    if reason := cudagraph_multi_device_conflict(cfg):
        raise KnobNotApplicable(reason)
    apply_memory_limit(cfg.memory.limit_gb, device)
    backend_flags = apply_backend_flags(cfg)
    backend_flags.update(lm_knobs.apply_sdpa_backend(cfg.lm.sdpa_backend))
    backend_flags.update(lm_knobs.apply_compile_cache(cfg.compile_cache, cfg.compile))
    model, loss_fn, unit_types = build_all(cfg)
    note("built")
    fns = functions_of(workload)  # the workload's own functions, looked up once
    # decided on the model as built, before any wrapper
    own, val = steps_of(workload, model, fns, bool(cfg.val.every_n_steps), loss_fn=loss_fn)
    if val is not None and has_own_val_data(workload, model, own):
        val = with_own_val_data(val, workload, model, fns)
    if own is not None and (reason := own_step_conflicts(cfg, own, validates=val is not None)):
        raise KnobNotApplicable(reason)
    units = apply_activation_checkpointing(model, unit_types, **lm_knobs.checkpoint_kwargs(
        cfg.lm.checkpoint_policy)) if cfg.activation_checkpointing else 0
    fmt = memory_format(cfg, workload.spatial_dims)
    model = apply_device_and_format(model, device, fmt)
    note("on_device")
    guard_cpu_bf16_conv3d(model, cfg)
    model = lm_knobs.apply_float8(model) if cfg.lm.float8 else model
    model.train()
    if workload.lightning_module is not None:  # its forward, in place: its steps call it, under DDP too
        compile_forward(model, cfg.compile)
    if rank is not None and rank.world_size > 1:
        model = through_ddp(model, own, val, functools.partial(
            lm_knobs.apply_fsdp, unit_types=unit_types, reshard_after_forward=cfg.lm.fsdp_reshard_after_forward,
            mixed_precision=cfg.lm.fsdp_mixed_precision, prefetch=cfg.lm.fsdp_prefetch)
            if cfg.lm.fsdp else functools.partial(apply_ddp, cfg=cfg, device=device))
    if workload.lightning_module is None:
        model = apply_compile(model, cfg.compile)
    optimizer = own.optimizer() if own is not None and own.optimizer is not None \
        else build_optimizer(cfg, workload, model.parameters())
    return Prepared(
        model=model,
        loss_fn=loss_fn.to(device),
        optimizer=optimizer,
        autocast=autocast_context(cfg.precision, device),
        scaler=grad_scaler(cfg.precision, device),
        device=device,
        memory_format=fmt,
        checkpointed_units=units,
        backend_flags=backend_flags,
        own=own,
        val=val,
    )
