"""Named axes: a workload's sample says which sides are spatial and which a sequence, so a token workload reads as
one (its sizes give ``sequence: L``, its units are tokens), while the volume form reads, resolves and hashes as it
did before axes had names."""

import pytest

from harness import config as config_mod
from harness.commands import hydra_edge
from harness.config import workload as workloads
from harness.config.validate import validate_workload
from harness.run.child.summary import per_sample
from tests.conftest import harness_cli, tiny_config

CONV1D = ("workload=custom", "workload.model._target_=torch.nn.Conv1d", "+workload.model.in_channels=1",
          "+workload.model.out_channels=2", "+workload.model.kernel_size=1", "workload.target=segmentation")
CONV3D = ("workload=custom", "workload.model._target_=torch.nn.Conv3d", "+workload.model.in_channels=1",
          "+workload.model.out_channels=3", "+workload.model.kernel_size=1", "workload.input_shape=[1,16,16,16]",
          "workload.target=segmentation", "workload.num_classes=3", "workload.unit=voxels",
          "workload.units_per_sample=spatial")

# config_hash of these settings on the commit before axes had names: the LM workloads' sizes then read
# input_shape [1, L]; a saved baseline and the cache match on these, so they must not move.
HASHES_BEFORE = {
    ("workload=gpt", "size=smoke"): "43a498c41838af44",
    ("workload=gpt", "size=smoke", "workload.num_classes=1000"): "cd158e66f20d1b0e",  # not as shipped: spec hashed
    ("workload=llama", "size=full", "device=cpu", "data.patch_size=[4096]"): "aa28ef9ca90c55d1",
    (*CONV3D, "size=smoke"): "18cf0b3a14998ce8",
    ("workload=gpt", "size=smoke", "workload.sizes.smoke.input_shape=[1,64]"): "63b090caf8946e8c",  # spelt as before
    ("workload=gpt2", "size=smoke", "workload.input_shape=[1,32]"): "e12bea9c9d6e1c5a",
}


def _composed(*overrides: str) -> config_mod.RunConfig:
    settings = hydra_edge.plain_settings(hydra_edge.compose_settings(list(overrides)))
    return config_mod.resolve(config_mod.from_dict(settings), cuda_available=False)


def test_the_lm_workloads_name_a_sequence_and_the_volumes_keep_their_form():
    for name in ("gpt", "gpt2", "llama"):
        spec = workloads.builtin(name)
        assert spec.axes == ["channel", "sequence"] and spec.named_axes
        assert spec.sample_shape("smoke") == [1, 128] and spec.sizes["smoke"].input_shape is None
    assert workloads.builtin("gpt").sample_shape("full") == [1, 1024]
    assert workloads.builtin("llama").sample_shape("full") == [1, 2048]
    unet = workloads.builtin("unet3d")
    assert unet.axes == ["channel", "spatial", "spatial", "spatial"] and not unet.named_axes
    assert workloads.builtin("resnet50").axes == ["channel", "spatial", "spatial"]


@pytest.mark.parametrize("overrides", list(HASHES_BEFORE))
def test_config_hashes_are_those_of_before_axes_had_names(overrides):
    assert config_mod.config_hash(_composed(*overrides)) == HASHES_BEFORE[overrides]


def test_a_sizes_sequence_hashes_as_the_input_shape_it_stands_for():
    named = workloads.builtin("gpt")
    shaped = workloads.parse_spec({**named.hashed(), "name": "gpt"})  # sizes spelt input_shape: [1, L]
    assert shaped.sizes["full"].input_shape == [1, 1024] and not shaped.named_axes
    assert named.hashed() == shaped.hashed() and workloads.is_builtin(shaped)
    shaped.input_axes = ["channel", "sequence"]  # a name changes nothing measured
    assert shaped.hashed() == named.hashed()


def test_an_lm_workload_counts_its_units_as_tokens():
    cfg = tiny_config(workload="gpt", data__patch_size=[96])
    assert cfg.workload.unit == "tokens" and cfg.data.patch_size == [96]
    assert per_sample(cfg, None, "").units == 96  # tokens/s = samples/s x 96


def test_named_axes_parse_from_the_command_line_and_count_their_units():
    cfg = _composed(*CONV1D, "workload.input_axes=[channel,sequence]", "workload.input_shape=[1,64]",
                    "workload.unit=tokens", "workload.units_per_sample=sequence", "size=smoke")
    assert cfg.workload.axes == ["channel", "sequence"] and cfg.data.patch_size == [64]
    assert cfg.workload.units_in(tuple(cfg.data.patch_size)) == 64
    cfg = _composed(*CONV1D, "+workload.sizes.full.sequence=256", "+workload.sizes.smoke.sequence=32",
                    "workload.units_per_sample=sequence", "size=smoke")
    assert cfg.workload.axes == ["channel", "sequence"] and cfg.data.patch_size == [32]
    assert cfg.workload.unit == "tokens"  # custom's unit: samples, left as it was: a counted sequence is tokens
    volume = _composed(*CONV3D, "workload.input_axes=[channel,spatial,spatial,spatial]", "size=smoke")
    assert volume.workload.units_in((16, 16, 16)) == 4096 and volume.workload.named_axes


def test_an_old_volume_config_reads_as_it_did():
    cfg = _composed(*CONV3D, "size=smoke")
    assert cfg.workload.input_axes is None and not cfg.workload.named_axes
    assert cfg.workload.axes == ["channel", "spatial", "spatial", "spatial"]
    assert cfg.data.patch_size == [16, 16, 16] and cfg.workload.spatial_dims == 3
    old_sequence = _composed(*CONV1D, "workload.input_shape=[1,64]", "workload.units_per_sample=sequence")
    assert old_sequence.workload.unit == "samples"  # the volume form's unit is what it says
    assert per_sample(cfg, None, "").units == 16 ** 3


def _spec(**fields) -> workloads.WorkloadSpec:
    spec = workloads.builtin("gpt")
    for key, value in fields.items():
        setattr(spec, key, value)
    return spec


@pytest.mark.parametrize("fields,message", [
    ({"input_axes": ["channel", "sequnce"]},
     "unknown axis in workload.input_axes 'sequnce'. Did you mean 'sequence'? Valid choices: channel, sequence, "
     "spatial"),
    ({"input_axes": ["sequence", "channel"]},
     "workload.input_axes=['sequence', 'channel'] is not valid: channel first, then one or more spatial sides or one "
     "sequence, e.g. [channel, sequence] or [channel, spatial, spatial, spatial]"),
    ({"input_axes": ["channel", "spatial", "sequence"]},
     "workload.input_axes=['channel', 'spatial', 'sequence'] is not valid"),
    ({"input_axes": ["channel"]}, "workload.input_axes=['channel'] is not valid"),
    ({"units_per_sample": "spatial"},
     "workload.units_per_sample=spatial counts spatial axes; workload 'gpt' has none (its axes: channel, sequence): "
     "valid choices: sequence or a positive whole number"),
    ({"units_per_sample": "tokens"},
     "workload.units_per_sample='tokens' is not valid: use a positive whole number, spatial (the product of the "
     "sample's spatial sides) or sequence (its length: tokens)"),
])
def test_a_bad_axis_names_the_value_and_the_valid_choices(fields, message):
    with pytest.raises(ValueError) as info:
        validate_workload(_spec(**fields))
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_an_input_shape_spelt_as_before_still_sets_a_sequences_length():
    cfg = tiny_config(workload="gpt", **{"workload.sizes.smoke.input_shape": [1, 64]})
    assert cfg.data.patch_size == [64] and cfg.workload.units_in((64,)) == 64
    assert cfg.workload.sample_shape("full") == [1, 1024]  # the other size keeps its sequence
    cfg = tiny_config(workload="gpt", **{"workload.input_shape": [1, 32]})
    assert cfg.data.patch_size == [32]


def test_axes_that_do_not_fit_the_shape_are_refused():
    spec = workloads.builtin("gpt")
    spec.input_axes = ["channel", "spatial"]
    with pytest.raises(ValueError, match=r"gives sequence=1024, but workload.input_axes=\['channel', 'spatial'\] "
                                         "names no sequence"):
        validate_workload(spec)
    with pytest.raises(ValueError, match=r"workload.input_axes=\['channel', 'sequence'\] names 2 axes, but the input "
                                         r"shape \[1, 8, 8\] of workload 'custom' \(size full\) has 3 sides"):
        _composed(*CONV1D, "workload.input_axes=[channel,sequence]", "workload.input_shape=[1,8,8]")


def test_a_sequence_patch_of_two_sides_is_refused_as_a_sequence():
    with pytest.raises(ValueError, match=r"data.patch_size=\[64, 64\] has 2 sides; workload 'gpt' is one sequence: "
                                         r"data.patch_size=\[LENGTH\], e.g. \[1024\]"):
        tiny_config(workload="gpt", data__patch_size=[64, 64])


def test_a_misspelt_axis_on_the_command_line_exits_2_before_anything_runs(tmp_path):
    out = harness_cli("run", *CONV1D, "workload.input_shape=[1,8]", "workload.input_axes=[channel,sequnce]",
                      f"results_dir={tmp_path / 'results'}", cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.strip().splitlines() == [
        "error: unknown axis in workload.input_axes 'sequnce'. Did you mean 'sequence'? Valid choices: channel, "
        "sequence, spatial"]
    assert not (tmp_path / "results").exists() or not list((tmp_path / "results").rglob("*.parquet"))
