"""Model FLOPs per training sample, counted once, and the peak FLOP/s that MFU divides by.

FLOPs follow ``torch.utils.flop_counter`` (FLOP = 2 x MAC), forward + backward of the plain model
(no activation-checkpoint recompute, no compile), so MFU counts useful work only, as nanoGPT's
``estimate_mfu`` and the PaLM paper's MFU definition do.
"""

from __future__ import annotations

import re

# Dense (no sparsity) peak FLOP/s per math mode, from each vendor datasheet named in the row. Datasheets print
# tensor-core numbers "with sparsity" (marked *): the dense value is half of that. "fp16"/"bf16" are tensor-core
# rates with FP32 accumulation (what autocast uses). A GPU without TF32 (V100) runs fp32 matmuls on its CUDA cores,
# so its "tf32" entry is its FP32 peak; a GPU without BF16 units has no "bf16" entry (MFU None, never a guess).
_H100_SXM = {"fp32": 67e12, "tf32": 494.7e12, "bf16": 989.4e12, "fp16": 989.4e12}
_HOPPER_NVL = {"fp32": 60e12, "tf32": 417.5e12, "bf16": 835.5e12, "fp16": 835.5e12}
_A100 = {"fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12, "fp16": 312e12}

# (pattern, peaks or None, source). Patterns are matched against the WHOLE name NVML / torch report
# (re.fullmatch, after the "NVIDIA " prefix), in order, most specific first: a substring match once sent
# "H100 NVL" and "H200 NVL" to the SXM row (MFU ~15% low) and would send "A10G" to the A10's row.
# Peaks None: the GPU is recognised but has no datasheet to cite, so MFU stays None.
PEAK_FLOPS: tuple[tuple[str, dict[str, float] | None, str], ...] = (
    (r"H100 NVL", _HOPPER_NVL,
     "NVIDIA H100 Tensor Core GPU datasheet, H100 NVL column: FP32 60, TF32 835*, BF16/FP16 1,671* TFLOPS"),
    (r"H100 PCIe", {"fp32": 51e12, "tf32": 378e12, "bf16": 756e12, "fp16": 756e12},
     "NVIDIA H100 datasheet, H100 PCIe column: FP32 51, TF32 756*, BF16/FP16 1,513* TFLOPS"),
    (r"H100 80GB HBM3|H100 SXM5 \d+GB", _H100_SXM,
     "NVIDIA H100 datasheet, H100 SXM column: FP32 67, TF32 989*, BF16/FP16 1,979* TFLOPS"),
    (r"H200 NVL", _HOPPER_NVL,
     "NVIDIA H200 Tensor Core GPU datasheet, H200 NVL column: FP32 60, TF32 835*, BF16/FP16 1,671* TFLOPS"),
    (r"H200( \d+GB HBM3e)?", _H100_SXM,
     "NVIDIA H200 datasheet, H200 SXM column: FP32 67, TF32 989*, BF16/FP16 1,979* TFLOPS"),
    (r"A100[- ](SXM4?-(40|80)GB|PCIE-(40|80)GB|80GB PCIe)", _A100,
     "NVIDIA A100 Tensor Core GPU datasheet (SXM and PCIe, 40/80GB alike): FP32 19.5, TF32 312*, BF16/FP16 624*"),
    (r"A10G", None,
     "AWS's A10G variant: NVIDIA publishes no datasheet for it, and its tensor rate differs from the A10's"),
    (r"A10", {"fp32": 31.2e12, "tf32": 62.5e12, "bf16": 125e12, "fp16": 125e12},
     "NVIDIA A10 Tensor Core GPU datasheet: FP32 31.2, TF32 62.5 | 125*, BF16/FP16 125 | 250* TFLOPS"),
    (r"L4", {"fp32": 30.3e12, "tf32": 60e12, "bf16": 121e12, "fp16": 121e12},
     "NVIDIA L4 Tensor Core GPU datasheet: FP32 30.3, TF32 120*, BF16/FP16 242* TFLOPS"),
    (r"RTX A5000", {"fp32": 27.8e12, "tf32": 55.6e12, "bf16": 111.1e12, "fp16": 111.1e12},
     "NVIDIA RTX A5000 datasheet: FP32 27.8, Tensor 222.2* TFLOPS (FP16/BF16; TF32 half of that, GA102)"),
    (r"Tesla V100-SXM2-(16|32)GB", {"fp32": 15.7e12, "tf32": 15.7e12, "fp16": 125e12},
     "NVIDIA Tesla V100 datasheet, SXM2 column: FP32 15.7, Tensor (FP16) 125 TFLOPS; no TF32, no BF16"),
    (r"Tesla V100-PCIE-(16|32)GB", {"fp32": 14e12, "tf32": 14e12, "fp16": 112e12},
     "NVIDIA Tesla V100 datasheet, PCIe column: FP32 14, Tensor (FP16) 112 TFLOPS; no TF32, no BF16"),
    (r"Tesla V100S-PCIE-32GB", {"fp32": 16.4e12, "tf32": 16.4e12, "fp16": 130e12},
     "NVIDIA V100S datasheet: FP32 16.4, Tensor (FP16) 130 TFLOPS; no TF32, no BF16"),
)


def peak_row(gpu_name: str) -> tuple[dict[str, float] | None, str] | None:
    """The table row (peaks, source) for a GPU name as NVML/torch report it; None when not in the table.

    A MIG instance (name ending "MIG 1g.10gb" etc.) gets None: it owns a fraction of the GPU, and which
    fraction of the peak it may reach is not the datasheet's number.
    """
    name = gpu_name.strip()
    if not name or "MIG" in name.split():
        return None
    name = name.removeprefix("NVIDIA ").strip()
    for pattern, peaks, source in PEAK_FLOPS:
        if re.fullmatch(pattern, name):
            return peaks, source
    return None


def peak_flops(gpu_name: str, precision: str, tf32: bool | None) -> float | None:
    """The datasheet peak for this GPU and math mode; None for CPUs and GPUs not in the table.

    ``precision="32"`` counts against the TF32 peak unless ``tf32`` is False: PyTorch's default lets
    cuDNN convolutions use TF32, which is what convolutional workloads run on.
    """
    mode = {"bf16-mixed": "bf16", "16-mixed": "fp16"}.get(precision, "fp32" if tf32 is False else "tf32")
    row = peak_row(gpu_name)
    if row is None or row[0] is None:
        return None
    return row[0].get(mode)


def count_train_flops(model_factory, example_shape, dtype=None) -> float:
    """FLOPs of one forward + backward of a fresh model on one sample (meta tensors: no compute); ``dtype`` the
    sample's (torch.long: token ids; a Hugging Face model's output is read as its logits)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        model = model_factory()
        x = torch.zeros(example_shape, dtype=dtype) if dtype is not None else torch.empty(example_shape)
    counter = FlopCounterMode(display=False)
    with counter:
        out = model(x)
        out = getattr(out, "logits", out)
        out = out[0] if isinstance(out, (tuple, list)) else out
        out.float().sum().backward()
    return float(counter.get_total_flops())
