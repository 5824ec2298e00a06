"""Settings: bad input stops before anything runs, with the bad value and the valid choices."""

import warnings

import numpy
import pytest

from harness import config as config_mod
from harness.config import machine
from harness.workload import applicability
from tests.conftest import tiny_config


def test_unknown_setting_names_it_and_suggests_the_close_one():
    with pytest.raises(ValueError, match=r"unknown setting 'data\.num_worker'.*Did you mean 'data\.num_workers'"):
        config_mod.check_key("data.num_worker")


def test_unknown_workload_lists_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown workload 'unet'.*Valid choices: basic_unet3d, custom, detr, "
                                         r"gpt, gpt2, llama, mednext, resnet50, seresnet_speech, unet3d"):
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


def test_a_multiprocessing_context_is_one_of_the_platforms_start_methods_with_workers_to_start():
    with pytest.raises(ValueError, match=r"unknown data.multiprocessing_context 'spwan'. Did you mean 'spawn'\? "
                                         r"Valid choices: fork, forkserver, spawn$"):
        tiny_config(data__num_workers=1, data__multiprocessing_context="spwan")
    with pytest.raises(ValueError, match=r"data.multiprocessing_context=spawn needs data.num_workers > 0"):
        tiny_config(data__multiprocessing_context="spawn")
    cfg = tiny_config(data__num_workers=1, data__multiprocessing_context="spawn")
    assert cfg.data.multiprocessing_context == "spawn"
    assert tiny_config().data.multiprocessing_context is None  # unset: the platform's default


def test_the_multiprocessing_context_enters_the_config_hash_only_when_set():
    base = tiny_config(data__num_workers=1)
    spawn = tiny_config(data__num_workers=1, data__multiprocessing_context="spawn")
    fork = tiny_config(data__num_workers=1, data__multiprocessing_context="fork")
    assert len({config_mod.config_hash(c) for c in (base, spawn, fork)}) == 3
    assert config_mod.measured_settings(spawn)["data.multiprocessing_context"] == "spawn"
    assert "data.multiprocessing_context" not in config_mod.measured_settings(base)  # the hashes before it hold
    assert config_mod.record_dict(spawn)["data"]["multiprocessing_context"] == "spawn"  # the record says how


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
    assert applicability.not_applicable(tiny_config()) == ""
    assert "tf32=true needs a CUDA GPU" in applicability.not_applicable(tiny_config(tf32=True))
    assert "pin_memory=true needs a CUDA GPU" in applicability.not_applicable(tiny_config(data__pin_memory=True))
    assert "CUDA graphs" in applicability.not_applicable(tiny_config(compile="reduce-overhead"))


def _on_cuda(**overrides) -> config_mod.RunConfig:
    """A config resolved as on a GPU machine (resolution needs no GPU: the device facts are passed in)."""
    cfg = config_mod.RunConfig()
    for key, value in overrides.items():
        config_mod.set_key(cfg, key.replace("__", "."), value)
    return config_mod.resolve(cfg, cuda_available=True)


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_cuda_graph_compile_with_gradients_kept_across_replays_is_skipped_with_the_reason(mode):
    assert applicability.not_applicable(_on_cuda(compile=mode)) == ""
    why = applicability.not_applicable(_on_cuda(compile=mode, accumulate_grad_batches=2))
    assert f"compile={mode} captures CUDA graphs" in why and "accumulate_grad_batches=2" in why
    why = applicability.not_applicable(_on_cuda(compile=mode, optimizer__zero_grad_set_to_none=False))
    assert "optimizer.zero_grad_set_to_none=false" in why
    both = applicability.not_applicable(_on_cuda(compile=mode, accumulate_grad_batches=4,
                                              optimizer__zero_grad_set_to_none=False))
    assert "accumulate_grad_batches=4" in both and "zero_grad_set_to_none=false" in both


def test_compile_without_cuda_graphs_may_accumulate():
    assert applicability.not_applicable(_on_cuda(compile="default", accumulate_grad_batches=2)) == ""
    assert applicability.not_applicable(_on_cuda(compile="off", optimizer__zero_grad_set_to_none=False)) == ""
    # on a CPU max-autotune captures no CUDA graph, so accumulation is fine there
    assert applicability.not_applicable(tiny_config(compile="max-autotune", accumulate_grad_batches=2)) == ""


def test_cuda_graph_conflict_becomes_a_skipped_record_without_starting_a_child(tmp_path):
    from harness.run.parent.isolate import execute

    cfg = _on_cuda(compile="reduce-overhead", accumulate_grad_batches=2, results_dir=str(tmp_path))
    record = execute(cfg, {}, "key")
    assert record.status == "skipped" and "captures CUDA graphs" in record.error


# --------------------------------------------------------------------------------------------
# values in their schema type (OmegaConf's typing)


def test_values_take_their_fields_type_as_from_the_command_line():
    cfg = config_mod.from_dict({"model": {"width": 1}, "data": {"num_workers": "2", "patch_size": ["32", 32, 32]},
                                "channels_last": "true", "tf32": None, "batch_size": numpy.int64(4)})
    assert (cfg.model.width, cfg.data.num_workers, cfg.data.patch_size) == (1.0, 2, [32, 32, 32])
    assert type(cfg.batch_size) is int and cfg.batch_size == 4  # as read from a frame of records
    assert type(cfg.model.width) is float and cfg.channels_last is True and cfg.tf32 is None


@pytest.mark.parametrize("key,value,message", [
    ("batch_size", 1.5, r"^batch_size=1\.5 is not valid: use a whole number or null$"),
    ("data.num_workers", "many", r"^data\.num_workers='many' is not valid: use a whole number$"),
    ("channels_last", "maybe", r"^channels_last='maybe' is not valid: use true or false$"),
    ("model.width", [1], r"^model\.width=\[1\] is not valid: use a number$"),
    ("data.patch_size", 32, r"^data\.patch_size=32 is not valid: use a list of whole numbers or null$"),
])
def test_a_value_of_another_type_is_one_line_naming_the_key_and_what_it_takes(key, value, message):
    with pytest.raises(ValueError, match=message):
        config_mod.set_key(config_mod.RunConfig(), key, value)


# --------------------------------------------------------------------------------------------
# loader workers this machine can feed


def test_loader_workers_beyond_four_per_cpu_are_refused_naming_the_bound_and_the_value(monkeypatch):
    monkeypatch.setattr(machine, "usable_cpus", lambda: 2)
    with pytest.raises(ValueError, match=r"^data\.num_workers=999999 is more than 8 loader workers, the bound here "
                                         r"\(4 for each of the 2 CPUs this process may use\): use "
                                         r"data\.num_workers=8 or fewer$"):
        tiny_config(data__num_workers=999999)
    with pytest.raises(ValueError, match=r"^val\.num_workers=9 is more than 8"):
        tiny_config(val__every_n_steps=5, val__num_workers=9)


def test_loader_workers_above_the_cpus_are_one_warning_and_at_the_cpus_none(monkeypatch):
    monkeypatch.setattr(machine, "usable_cpus", lambda: 2)
    with pytest.warns(config_mod.SettingWarning) as caught:
        assert tiny_config(data__num_workers=8).data.num_workers == 8  # at the bound: it runs
    assert [str(w.message) for w in caught] == [
        "data.num_workers=8 is more than the 2 CPUs this process may use: the loader workers will take turns on them"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tiny_config(data__num_workers=2)


def test_a_ladders_own_workers_beyond_the_bound_are_skipped_not_refused(monkeypatch):
    monkeypatch.setattr(machine, "usable_cpus", lambda: 2)
    cfg = config_mod.from_dict({"data": {"num_workers": 32}, "measure": {"steps": 3}})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the ladder chose it: no warning either
        resolved = config_mod.resolve(cfg, cuda_available=False, ladder_keys={"data.num_workers"})
    assert applicability.skip_reason(resolved) == ("data.num_workers=32 is more than 8 loader workers, the bound here "
                                                   "(4 for each of the 2 CPUs this process may use): use "
                                                   "data.num_workers=8 or fewer")
    capped = config_mod.resolve(config_mod.from_dict({"data": {"num_workers": 3}}), cuda_available=False,
                                ladder_keys={"data.num_workers"})
    assert applicability.skip_reason(capped) == ""
    assert applicability.skip_reason(capped, cap_workers_at_cpus=True) == (
        "data.num_workers=3 is more than the 2 CPUs this process may use")


# --------------------------------------------------------------------------------------------
# every skip reason from one module


def test_every_reason_to_skip_is_given_at_once():
    cfg = tiny_config(tf32=True, devices=4, batch_size=4)
    why = applicability.skip_reason(cfg, have_devices=2)
    assert why == ("tf32=true needs a CUDA GPU (TF32 is a tensor-core format); devices=4 needs 4 devices; this "
                   "machine has 2 usable CPU core(s) (on a CPU a device is a process)")


def test_the_reasons_keep_their_order_whichever_module_finds_them(monkeypatch):
    """The checks of other modules (the workers' bound) are asked after every check of the applicability module,
    and still take their places in the message: the workload's, then the device's, then the machine's."""
    monkeypatch.setattr(machine, "usable_cpus", lambda: 2)
    settings = {"data": {"num_workers": 32}, "cpus": 4, "tf32": True, "ddp": {"static_graph": True},
                "measure": {"steps": 3}}
    cfg = config_mod.resolve(config_mod.from_dict(settings), cuda_available=False, ladder_keys={"data.num_workers"})
    assert applicability.skip_reason(cfg, have_nodes=1).split("; ")[:4] == [
        "cpus=4 is more than the 2 CPUs this process may use",
        "ddp.static_graph=true needs devices >= 2 (a setting of DistributedDataParallel)",
        "tf32=true needs a CUDA GPU (TF32 is a tensor-core format)",
        "data.num_workers=32 is more than 8 loader workers, the bound here (4 for each of the 2 CPUs this process may "
        "use): use data.num_workers=8 or fewer"]


def test_the_childs_skip_reasons_come_from_the_same_module():
    from harness.run.child import outcome
    from harness.workload import knobs

    assert knobs.KnobNotApplicable is applicability.KnobNotApplicable
    failure = type("BackendCompilerFailed", (RuntimeError,), {"__module__": "torch._dynamo.exc"})("no graph here")
    assert applicability.compile_failure_reason("default", failure) == outcome.skip_reason(failure, "default") == (
        "compile=default failed on this model (BackendCompilerFailed): no graph here")


def test_batches_in_flight_beyond_shared_memory_are_skipped_with_the_reason(monkeypatch, tmp_path):
    from collections import namedtuple

    from harness.run.parent.isolate import execute

    usage = namedtuple("usage", "total used free")
    shm = {"free": 2 * 10**9}
    monkeypatch.setattr(applicability.shutil, "disk_usage", lambda path: usage(64 * 10**9, 0, shm["free"]))
    # the ImageNet guide's batch: 384 float32 images of 3x224x224 (231 MB), 2 workers x 8 prefetched = 3.7 GB
    cfg = tiny_config(workload="resnet50", batch_size=384, data__patch_size=[224, 224], data__num_workers=2,
                      data__prefetch_factor=8, results_dir=str(tmp_path))
    assert applicability.loader_batch_bytes(cfg) == 384 * (3 * 224 * 224 * 4 + 8)
    why = applicability.skip_reason(cfg)
    assert why == ("data.num_workers=2 x data.prefetch_factor=8 batches in flight, 231 MB each (batch 384 of float32 "
                   "[3, 224, 224]), need 3.7 GB of shared memory; /dev/shm has 2.0 GB free: use fewer workers or a "
                   "lower prefetch_factor, or a larger /dev/shm (e.g. docker run --shm-size)")
    record = execute(cfg, {}, "key")  # refused before anything starts
    assert record.status == "skipped" and record.error == why
    shm["free"] = 4 * 10**9
    assert applicability.skip_reason(cfg) == ""
    # PyTorch's default prefetch (2) when none is given; each rank of a multi-device run has its own loader
    two = tiny_config(workload="resnet50", batch_size=384, data__patch_size=[224, 224], data__num_workers=2,
                      devices=2)
    assert "x PyTorch's default prefetch_factor 2 batches in flight on each of devices=2 ranks" in (
        applicability.shared_memory_short(two, free_bytes=1e9))
    assert applicability.shared_memory_short(tiny_config(), free_bytes=0) == ""  # no workers: nothing in shm
    # a segmentation batch: float32 volumes and an int64 class per voxel
    vol = tiny_config(workload="unet3d", batch_size=2, data__patch_size=[32, 32, 32])
    assert applicability.loader_batch_bytes(vol) == 2 * 32**3 * (4 + 8)
