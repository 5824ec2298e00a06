"""A language model's knobs, each one small ``apply_*`` that ``harness.workload.knobs.prepare`` calls in its order:
the SDPA backend (with the backend flags, before the model is built), compile's cache folder (before anything is
compiled), the selective checkpoint policy (with activation checkpointing), float8 training (after the model is on
its device, before compile) and FSDP2 (instead of DDP, where DDP would wrap). Runs in the measuring child only.
Where one cannot act is decided in the parent (``harness.workload.applicability``).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from typing import Any

import torch
from torch import nn

# lm.sdpa_backend -> the kernels sdpa_kernel allows (PyTorch's names: torch.nn.attention.SDPBackend)
SDPA_KERNELS = {"math": "MATH", "efficient": "EFFICIENT_ATTENTION", "flash": "FLASH_ATTENTION",
                "cudnn": "CUDNN_ATTENTION"}
_HELD: list[Any] = []  # the sdpa_kernel context entered for the whole process (its flags are process-wide)


def apply_sdpa_backend(name: str) -> dict[str, Any]:
    """Allow only ``name``'s SDPA kernels for the rest of the process (``sdpa_kernel`` entered and held: every
    attention call, compiled or eager, chooses among them); returns the flag as recorded (empty for auto)."""
    if name == "auto":
        return {}
    from torch.nn.attention import SDPBackend, sdpa_kernel

    context = sdpa_kernel([getattr(SDPBackend, SDPA_KERNELS[name])])
    context.__enter__()
    _HELD.append(context)
    return {"sdpa_backend": name}


def apply_compile_cache(cache: str, compile_mode: str) -> dict[str, Any]:
    """``compile_cache=fresh``: Inductor's (and AOTAutograd's, Triton's) caches in an empty folder, removed at exit,
    so that compile's cost is its cold one; ``reuse`` leaves this machine's caches, warm after a first compile."""
    if cache != "fresh" or compile_mode == "off":
        return {}
    folder = tempfile.mkdtemp(prefix="harness-inductor-")
    atexit.register(shutil.rmtree, folder, True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = folder
    os.environ["TRITON_CACHE_DIR"] = os.path.join(folder, "triton")
    return {"compile_cache": "fresh"}


_SAVED_OPS = ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
              "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu")


def selective_context_fn():
    """torchtitan's op-level selective checkpoint policy: keep the outputs of attention and of every second matmul
    (``mm``) of a unit, recompute the rest (norms, activations, the other matmuls) in backward."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    saved = {getattr(torch.ops.aten, name).default for name in _SAVED_OPS if hasattr(torch.ops.aten, name)}
    counts = {"forward": 0, "recompute": 0}

    def policy(ctx, op, *args, **kwargs):
        if op is torch.ops.aten.mm.default:
            key = "recompute" if ctx.is_recompute else "forward"
            counts[key] += 1
            return CheckpointPolicy.MUST_SAVE if counts[key] % 2 == 0 else CheckpointPolicy.PREFER_RECOMPUTE
        return CheckpointPolicy.MUST_SAVE if op in saved else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def checkpoint_kwargs(policy: str) -> dict[str, Any]:
    """The checkpoint wrapper's arguments for ``lm.checkpoint_policy`` (none for full)."""
    return {"context_fn": selective_context_fn} if policy == "selective" else {}


def apply_float8(model: nn.Module) -> nn.Module:
    """torchao's float8 training: every Linear whose sides are multiples of 16 computes its matmuls in float8 with
    dynamic scaling (torchtitan's recipe); the parent has checked that torchao and the GPU are there."""
    from torchao.float8 import convert_to_float8_training

    def fits(module: nn.Module, _fqn: str) -> bool:
        return isinstance(module, nn.Linear) and module.in_features % 16 == 0 and module.out_features % 16 == 0

    return convert_to_float8_training(model, module_filter_fn=fits)


def apply_fsdp(model: nn.Module, unit_types: tuple[type, ...], reshard_after_forward: bool = True,
               mixed_precision: str = "none", prefetch: int = 0) -> nn.Module:
    """FSDP2: ``fully_shard`` each outermost checkpoint unit (a transformer block), then the model (the embeddings and
    head), over the process group every rank has joined; torchtitan's wrapping. The knobs are ``fully_shard``'s:
    ``reshard_after_forward`` (of the units; the root's stays FSDP2's default), the mixed
    precision policy (bf16: ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``), and ``prefetch``: each
    unit gathers the next ``prefetch`` units' parameters in the forward (the previous ones in the backward)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
              if mixed_precision == "bf16" else MixedPrecisionPolicy())
    units = [m for m in model.modules() if isinstance(m, unit_types)]
    for module in units:
        fully_shard(module, reshard_after_forward=reshard_after_forward, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    if prefetch:
        for i, unit in enumerate(units):
            unit.set_modules_to_forward_prefetch(units[i + 1:i + 1 + prefetch])
            unit.set_modules_to_backward_prefetch(units[max(0, i - prefetch):i][::-1])
    return model
