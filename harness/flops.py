"""Model FLOPs per training sample, counted once, and the peak FLOP/s that MFU divides by.

FLOPs follow ``torch.utils.flop_counter`` (FLOP = 2 x MAC), forward + backward of the plain model
(no activation-checkpoint recompute, no compile), so MFU counts useful work only, as nanoGPT's
``estimate_mfu`` and the PaLM paper's MFU definition do.
"""

from __future__ import annotations

# Dense (no sparsity) peak FLOP/s from the vendors' datasheets, as collected in shared/ANCHORS.md:
# NVIDIA A100 datasheet (SXM/PCIe 80GB), H100 datasheet (SXM5 / PCIe), H200 datasheet (SXM).
# Keys are matched as substrings of the GPU name that NVML/torch report, most specific first.
PEAK_FLOPS: tuple[tuple[str, dict[str, float]], ...] = (
    ("H200", {"fp32": 67e12, "tf32": 494.7e12, "bf16": 989.4e12}),
    ("H100 PCIe", {"fp32": 51e12, "tf32": 378e12, "bf16": 756e12}),
    ("H100", {"fp32": 67e12, "tf32": 494.7e12, "bf16": 989.4e12}),
    ("A100", {"fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12}),
)


def peak_flops(gpu_name: str, precision: str, tf32: bool | None) -> float | None:
    """The datasheet peak for this GPU and math mode; None for CPUs and GPUs not in the table.

    ``precision="32"`` counts against the TF32 peak unless ``tf32`` is False: PyTorch's default lets
    cuDNN convolutions use TF32, which is what convolutional workloads run on.
    """
    mode = "bf16" if precision in ("bf16-mixed", "16-mixed") else ("fp32" if tf32 is False else "tf32")
    for key, table in PEAK_FLOPS:
        if key in gpu_name:
            return table[mode]
    return None


def count_train_flops(model_factory, example_shape) -> float:
    """FLOPs of one forward + backward of a fresh model on one sample (meta tensors: no compute)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        model = model_factory()
        x = torch.empty(example_shape)
    counter = FlopCounterMode(display=False)
    with counter:
        out = model(x)
        out = out[0] if isinstance(out, (tuple, list)) else out
        out.float().sum().backward()
    return float(counter.get_total_flops())
