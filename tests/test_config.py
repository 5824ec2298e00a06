"""Settings: bad input stops before anything runs, with the bad value and the valid choices."""

import pytest

from harness import config as config_mod
from tests.conftest import tiny_config


def test_unknown_setting_names_it_and_suggests_the_close_one():
    with pytest.raises(ValueError, match=r"unknown setting 'data\.num_worker'.*Did you mean 'data\.num_workers'"):
        config_mod.check_key("data.num_worker")


def test_unknown_workload_lists_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown workload 'unet'.*Valid choices: basic_unet3d, custom, detr, mednext, resnet50, seresnet_speech, unet3d"):
        tiny_config(workload="unet")


@pytest.mark.parametrize("key,value,message", [
    ("precision", "fp16", r"unknown precision 'fp16'.*16-mixed, 32, bf16-mixed"),
    ("compile", "fast", r"unknown compile mode 'fast'.*max-autotune"),
    ("debug.fault", "segv", r"unknown debug.fault 'segv'.*crash, hang"),
    ("data.pin_memory", "yes", r"data.pin_memory='yes' is not valid: use true, false or auto"),
    ("batch_size", 0, r"batch_size=0 must be a positive number"),
    ("data.patch_size", [32, 32], r"has 2 dimensions; workload 'unet3d' is 3D"),
    ("data.patch_size", [40, 40, 40], r"at least 32 and a multiple of 16"),
    ("model.deep_supervision", True, r"not available for workload 'unet3d'; it is for: \['mednext'\]"),
])
def test_bad_values_are_rejected_with_their_reason(key, value, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(**{key.replace(".", "__"): value})


def test_prefetch_without_workers_is_a_contradiction():
    with pytest.raises(ValueError, match=r"data.prefetch_factor=4 needs data.num_workers > 0"):
        tiny_config(data__prefetch_factor=4)


def test_persistent_workers_without_workers_is_a_contradiction():
    with pytest.raises(ValueError, match=r"persistent_workers=true needs data.num_workers > 0"):
        tiny_config(data__persistent_workers=True)


def test_fused_and_foreach_exclude_each_other():
    with pytest.raises(ValueError, match="exclude each other"):
        tiny_config(optimizer__fused=True, optimizer__foreach=True)


def test_cpu_resolves_to_the_smoke_size_and_fills_the_preset():
    cfg = tiny_config()
    assert (cfg.device, cfg.size) == ("cpu", "smoke")
    assert cfg.batch_size == 2 and cfg.data.patch_size == [32, 32, 32]
    assert cfg.data.pin_memory is False and cfg.cudnn_benchmark is False


def test_cuda_asked_without_a_gpu_is_refused():
    cfg = config_mod.RunConfig(device="cuda")
    with pytest.raises(ValueError, match="torch sees no CUDA device"):
        config_mod.resolve(cfg, cuda_available=False)


def test_precision_given_as_a_number_is_normalised():
    cfg = config_mod.RunConfig()
    config_mod.set_key(cfg, "precision", 32)
    config_mod.set_key(cfg, "compile", False)
    assert (cfg.precision, cfg.compile) == ("32", "off")


def test_config_hash_ignores_debug_settings_but_not_knobs():
    base = tiny_config()
    assert config_mod.config_hash(base) == config_mod.config_hash(tiny_config(debug__slowdown_ms=50.0))
    assert config_mod.config_hash(base) == config_mod.config_hash(tiny_config(timeout_s=5))
    assert config_mod.config_hash(base) != config_mod.config_hash(tiny_config(precision="bf16-mixed"))
    assert config_mod.config_hash(base) != config_mod.config_hash(tiny_config(data__num_workers=1))


def test_knobs_that_need_a_gpu_are_not_applicable_on_cpu():
    assert config_mod.not_applicable(tiny_config()) == ""
    assert "tf32=true needs a CUDA GPU" in config_mod.not_applicable(tiny_config(tf32=True))
    assert "pin_memory=true needs a CUDA GPU" in config_mod.not_applicable(tiny_config(data__pin_memory=True))
    assert "CUDA graphs" in config_mod.not_applicable(tiny_config(compile="reduce-overhead"))


def _on_cuda(**overrides) -> config_mod.RunConfig:
    """A config resolved as on a GPU machine (resolution needs no GPU: the device facts are passed in)."""
    cfg = config_mod.RunConfig()
    for key, value in overrides.items():
        config_mod.set_key(cfg, key.replace("__", "."), value)
    return config_mod.resolve(cfg, cuda_available=True)


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_cuda_graph_compile_with_gradients_kept_across_replays_is_skipped_with_the_reason(mode):
    assert config_mod.not_applicable(_on_cuda(compile=mode)) == ""
    why = config_mod.not_applicable(_on_cuda(compile=mode, accumulate_grad_batches=2))
    assert f"compile={mode} captures CUDA graphs" in why and "accumulate_grad_batches=2" in why
    why = config_mod.not_applicable(_on_cuda(compile=mode, optimizer__zero_grad_set_to_none=False))
    assert "optimizer.zero_grad_set_to_none=false" in why
    both = config_mod.not_applicable(_on_cuda(compile=mode, accumulate_grad_batches=4,
                                              optimizer__zero_grad_set_to_none=False))
    assert "accumulate_grad_batches=4" in both and "zero_grad_set_to_none=false" in both


def test_compile_without_cuda_graphs_may_accumulate():
    assert config_mod.not_applicable(_on_cuda(compile="default", accumulate_grad_batches=2)) == ""
    assert config_mod.not_applicable(_on_cuda(compile="off", optimizer__zero_grad_set_to_none=False)) == ""
    # on a CPU max-autotune captures no CUDA graph, so accumulation is fine there
    assert config_mod.not_applicable(tiny_config(compile="max-autotune", accumulate_grad_batches=2)) == ""


def test_cuda_graph_conflict_becomes_a_skipped_record_without_starting_a_child(tmp_path):
    from harness.run.isolate import execute

    cfg = _on_cuda(compile="reduce-overhead", accumulate_grad_batches=2, results_dir=str(tmp_path))
    record = execute(cfg, {}, "key")
    assert record.status == "skipped" and "captures CUDA graphs" in record.error
