"""The MFU peak table, matched on the device names NVML and torch really report."""

import pytest

from harness.workload.flops import PEAK_FLOPS, peak_flops, peak_row


@pytest.mark.parametrize("name, bf16, tf32, fp32", [
    ("NVIDIA H100 80GB HBM3", 989.4e12, 494.7e12, 67e12),  # SXM5
    ("NVIDIA H100 NVL", 835.5e12, 417.5e12, 60e12),
    ("NVIDIA H100 PCIe", 756e12, 378e12, 51e12),
    ("NVIDIA H200", 989.4e12, 494.7e12, 67e12),
    ("NVIDIA H200 NVL", 835.5e12, 417.5e12, 60e12),
    ("NVIDIA A100-SXM4-80GB", 312e12, 156e12, 19.5e12),
    ("NVIDIA A100-SXM4-40GB", 312e12, 156e12, 19.5e12),
    ("NVIDIA A100-PCIE-40GB", 312e12, 156e12, 19.5e12),
    ("NVIDIA A100 80GB PCIe", 312e12, 156e12, 19.5e12),
    ("NVIDIA A10", 125e12, 62.5e12, 31.2e12),
    ("NVIDIA L4", 121e12, 60e12, 30.3e12),
    ("NVIDIA RTX A5000", 111.1e12, 55.6e12, 27.8e12),
])
def test_real_device_names_get_their_own_row(name, bf16, tf32, fp32):
    assert peak_flops(name, "bf16-mixed", None) == bf16
    assert peak_flops(name, "16-mixed", None) == bf16  # fp16 and bf16 tensor rates are equal on these
    assert peak_flops(name, "32", None) == tf32  # PyTorch's default: cuDNN convolutions in TF32
    assert peak_flops(name, "32", True) == tf32
    assert peak_flops(name, "32", False) == fp32


def test_nvl_parts_are_not_counted_against_the_sxm_peak():
    assert peak_flops("NVIDIA H100 NVL", "bf16-mixed", None) < peak_flops("NVIDIA H100 80GB HBM3", "bf16-mixed", None)
    assert peak_flops("NVIDIA H200 NVL", "bf16-mixed", None) < peak_flops("NVIDIA H200", "bf16-mixed", None)


def test_v100_has_no_tf32_and_no_bf16():
    assert peak_flops("Tesla V100-SXM2-16GB", "16-mixed", None) == 125e12
    assert peak_flops("Tesla V100-SXM2-16GB", "32", None) == 15.7e12  # no TF32 units: FP32 is the peak
    assert peak_flops("Tesla V100-SXM2-16GB", "bf16-mixed", None) is None
    assert peak_flops("Tesla V100-PCIE-32GB", "16-mixed", None) == 112e12
    assert peak_flops("Tesla V100S-PCIE-32GB", "16-mixed", None) == 130e12


@pytest.mark.parametrize("name", [
    "NVIDIA A10G",  # recognised (not sent to the A10 row), but no datasheet: None
    "NVIDIA L40S", "NVIDIA L40", "NVIDIA A100X", "NVIDIA H800", "NVIDIA GeForce RTX 4090", "NVIDIA A30",
    "NVIDIA A100-SXM4-40GB MIG 3g.20gb",  # a MIG slice owns a fraction of the GPU
    "", "cpu AMD EPYC", "NVIDIA RTX A5000 Laptop GPU",
])
def test_unknown_or_unciteable_names_give_no_peak(name):
    for precision in ("32", "bf16-mixed", "16-mixed"):
        assert peak_flops(name, precision, None) is None


def test_a10g_is_matched_before_a10_and_cites_why_it_has_no_peak():
    peaks, source = peak_row("NVIDIA A10G")
    assert peaks is None and "no datasheet" in source


def test_every_row_cites_a_source():
    for pattern, _peaks, source in PEAK_FLOPS:
        assert source and ("datasheet" in source), pattern


def test_the_connectomics_frameworks_basic_unet_pads_its_filters_and_the_fastest_ladder_notes_the_flops():
    """connectomics_fastest rung 2 is BasicUNet as the framework's monai_basic_unet3d (October 2025) builds it from
    the guide's filters: the last doubled to a sixth count, BasicUNet's full-resolution decoder level. The ladder's
    note gives that model's counted FLOPs over the other paddings and the baseline's UNet (ratios of conv FLOPs: the
    same at any cubic patch that is a multiple of 16, so a 32^3 count checks the note's 112^3 figures)."""
    from harness.config import ladder as ladder_mod
    from harness.workload.flops import count_train_flops
    from harness_models.segmentation3d import basic_unet3d, connectomics_basic_unet_features, unet3d

    filters = (32, 64, 128, 256, 512)
    doubled = connectomics_basic_unet_features(filters)
    assert doubled == (32, 64, 128, 256, 512, 1024)
    assert connectomics_basic_unet_features(filters, "repeat") == (32, 64, 128, 256, 512, 512)
    assert connectomics_basic_unet_features((16, 32, 64, 128, 256)) == (16, 32, 64, 128, 256, 512)
    with pytest.raises(ValueError, match=r"padding='triple' is not one of \('double', 'repeat'\)"):
        connectomics_basic_unet_features(filters, "triple")
    lad = ladder_mod.load("connectomics_fastest")
    assert lad.settings(2, "full")["model.features"] == list(doubled)
    shape = (1, 1, 32, 32, 32)
    flops = {name: count_train_flops(build, shape) for name, build in (
        ("doubled", lambda: basic_unet3d(1, 2, features=doubled)),
        ("repeated", lambda: basic_unet3d(1, 2, features=connectomics_basic_unet_features(filters, "repeat"))),
        ("assumed", lambda: basic_unet3d(1, 2, features=(*filters, 32))),
        ("unet", lambda: unet3d(1, 2)))}
    ratios = {name: flops["doubled"] / flops[name] for name in ("assumed", "repeated", "unet")}
    assert ratios == pytest.approx({"assumed": 121.43, "repeated": 3.638, "unet": 1407.8}, rel=1e-3)
    note = " ".join(lad.notes)
    assert "121x the 32-channel last level" in note and "3.6x the later builder's" in note and "1408x the" in note


def test_the_speech_seresnet_built_2d_counts_24x_the_1d_ones_flops_and_the_gpu_plan_costs_it_so():
    """seresnet builds the speech SEResNet 2D at the full size (the spectrogram a one-channel image). Counted at
    257x401, forward + backward: 46.5 GFLOP a training sample, 24x the 1D model's 1.94 (frequency bins as channels).
    The GPU plan's cost of the 2D model (scripts/gpu_parts.py, an estimate) is those FLOPs at the pace its unet3d
    estimate implies (0.186 TFLOP a sample in 0.03 s), rounded up; the ladders' notes say 24x."""
    from harness.config import ladder as ladder_mod
    from harness.workload.flops import count_train_flops
    from harness_models.speech import seresnet
    from scripts import gpu_parts

    one = count_train_flops(lambda: seresnet(spatial_dims=1, in_channels=257, num_classes=2), (1, 257, 401))
    two = count_train_flops(lambda: seresnet(spatial_dims=2, in_channels=1, num_classes=2), (1, 1, 257, 401))
    assert (one, two) == pytest.approx((1.942e9, 46.47e9), rel=1e-3) and two / one == pytest.approx(23.93, rel=1e-3)
    pace = 0.186e12 / gpu_parts.WORKLOAD_COST["unet3d"].compute_s  # FLOP/s the unet3d estimate implies
    assert two / pace == pytest.approx(0.0075, rel=0.01)
    assert two / pace < gpu_parts.WORKLOAD_COST_2D["seresnet_speech"].compute_s == 0.008  # rounded up
    for name in ("seresnet", "seresnet_cudnn"):
        base = ladder_mod.load(name).settings(0, "full")
        assert base["workload.model.spatial_dims"] == 2
        assert gpu_parts.step_costs(base)[0] == pytest.approx(0.008 * 32)  # the 2D cost, batch 32, FP32
    assert "~24x the compute a sample" in (ladder_mod.LADDER_DIR / "seresnet.yaml").read_text()
