"""Workloads as config files of _target_ nodes: the built-ins measure what they did, a user's own model runs
(from a file of theirs or inline), and what cannot be resolved or taken stops with the reason."""

import json
import sys
import textwrap

import pytest

from harness import config as config_mod
from harness.commands import hydra_edge
from harness.config import workload as workloads
from harness.names import display_name
from harness.workload import applicability
from tests.conftest import REPO, tiny_config, user_module

BUILTINS = ("unet3d", "basic_unet3d", "mednext", "resnet50")
TINY_NET = "examples.tiny_net.TinySegNet"
INLINE = ("workload=custom", f"workload.model._target_={TINY_NET}", "workload.input_shape=[1,16,16,16]",
          "workload.target=segmentation", "workload.num_classes=3")

# config_hash of settings measured before workloads were config files (computed with commit 6698d18): saved
# baselines and the cache match on these, so they must not move.
HASHES_BEFORE = {
    ("unet3d", "smoke", ()): "612a764cbca4f1e4",
    ("unet3d", "full", (("precision", "bf16-mixed"),)): "f1eccd864b70893b",
    ("basic_unet3d", "smoke", (("activation_checkpointing", True), ("model.width", 0.5))): "85c1d041176b776f",
    ("basic_unet3d", "full", ()): "34df69cc256c6512",
    ("mednext", "smoke", ()): "e70531a93be0851b",
    ("mednext", "full", (("model.deep_supervision", True), ("model.mednext_size", "B"), ("model.kernel_size", 5))):
        "d1313317229d3301",
    ("resnet50", "smoke", (("precision", "bf16-mixed"),)): "ae5f47d9292bf261",
    ("resnet50", "full", ()): "d1cde39acb38f237",
}


@pytest.mark.parametrize("key", HASHES_BEFORE, ids=lambda k: f"{k[0]}-{k[1]}-{len(k[2])}")
def test_builtin_settings_keep_their_config_hash_from_python_and_from_hydra(key):
    name, size, extra = key
    by_python = config_mod.from_dict({"workload": name, "size": size, "device": "cpu"})
    for k, v in extra:
        config_mod.set_key(by_python, k, v)
    composed = hydra_edge.compose_settings([f"workload={name}", f"size={size}", "device=cpu",
                                            *(f"{k}={v}" for k, v in extra)])
    by_hydra = config_mod.from_dict(hydra_edge.plain_settings(composed))
    for cfg in (by_python, by_hydra):
        assert config_mod.config_hash(config_mod.resolve(cfg, cuda_available=False)) == HASHES_BEFORE[key]


def test_records_store_a_builtin_by_its_name_as_before_and_read_it_back():
    stored = config_mod.record_dict(tiny_config())
    assert stored["workload"] == "unet3d"
    cfg = config_mod.from_dict(json.loads(json.dumps(stored)))
    assert cfg.workload == workloads.builtin("unet3d")
    assert config_mod.config_hash(cfg) == config_mod.config_hash(tiny_config())
    assert config_mod.record_dict(_inline())["workload"]["model"] == {"_target_": TINY_NET}


# loss of the first step, FLOPs per sample and checkpointed units of each built-in at the CPU size (seed 0),
# as the builders measured them before (commit 6698d18): same model, loss, optimizer and data.
BEFORE = {"unet3d": (1.490513801574707, 312705024.0, 9), "basic_unet3d": (1.1549265384674072, 1772126208.0, 9),
          "mednext": (0.7227063179016113, 1811140096.0, 26), "resnet50": (6.745701789855957, 1994883072.0, 16)}


@pytest.mark.parametrize("name", BUILTINS)
def test_builtins_build_what_they_built_before(name):
    import torch

    from harness.run.child.measure import model_flops_per_sample
    from harness.workload.data import build_dataset, build_loader
    from harness.workload.knobs import prepare

    cfg = tiny_config(workload=name, activation_checkpointing=True)
    torch.manual_seed(cfg.seed)  # as the measured run starts: the first step's loss is the measured loss_first
    prep = prepare(cfg, cfg.workload)
    x, y = next(iter(build_loader(cfg, build_dataset(cfg, cfg.workload), cfg.workload)))
    with torch.no_grad():
        loss = float(prep.loss_fn(prep.model(x), y))
    loss_first, flops, units = BEFORE[name]
    assert loss == pytest.approx(loss_first, rel=1e-4)
    assert model_flops_per_sample(cfg, cfg.workload) == flops
    assert prep.checkpointed_units == units
    optimizer = prep.optimizer
    expected = {"unet3d": (torch.optim.Adam, {"lr": 1e-4}), "basic_unet3d": (torch.optim.Adam, {"lr": 1e-4}),
                "mednext": (torch.optim.AdamW, {"lr": 1e-3, "weight_decay": 1e-2}),
                "resnet50": (torch.optim.SGD, {"lr": 0.01, "momentum": 0.9, "weight_decay": 1e-4})}[name]
    assert type(optimizer) is expected[0]
    assert {k: optimizer.defaults[k] for k in expected[1]} == expected[1]


def test_the_workload_group_lists_the_builtins_and_custom():
    assert workloads.available() == ["basic_unet3d", "custom", "detr", "gpt", "gpt2", "llama", "mednext", "resnet50",
                                     "seresnet_speech", "unet3d"]
    assert all(workloads.is_builtin(workloads.builtin(n)) for n in BUILTINS)


# --------------------------------------------------------------------------------------------
# a user's own model


def _inline(*extra: str) -> config_mod.RunConfig:
    settings = hydra_edge.plain_settings(hydra_edge.compose_settings([*INLINE, *extra]))
    return config_mod.resolve(config_mod.from_dict(settings), cuda_available=False)


def test_an_inline_model_resolves_to_its_sample_shape_and_is_hashed_with_everything_it_is_made_of():
    cfg = _inline()
    assert cfg.workload.name == "custom" and cfg.data.patch_size == [16, 16, 16] and cfg.workload.in_channels == 1
    assert len(cfg.workload.source_sha) == 16  # examples/ is the user's code: not in code_fingerprint
    settings = config_mod.measured_settings(cfg)
    assert settings["workload"] == "custom"
    assert settings["workload.spec"]["model"] == {"_target_": TINY_NET}
    assert config_mod.config_hash(cfg) != config_mod.config_hash(_inline("workload.num_classes=4"))


def test_a_file_of_the_users_joins_the_group_with_config_dir():
    overrides = hydra_edge.with_config_dirs(["--config-dir", str(REPO / "examples" / "conf"), "workload=tiny_net"])
    assert overrides[-1] == f"hydra.searchpath=[{(REPO / 'examples' / 'conf').as_uri()}]"
    cfg = config_mod.from_dict(hydra_edge.plain_settings(hydra_edge.compose_settings(overrides)))
    assert cfg.workload.name == "tiny_net" and cfg.workload.checkpoint_units == ["examples.tiny_net.Block"]
    with pytest.raises(ValueError, match=r"--config-dir 'nowhere': no such folder"):
        hydra_edge.with_config_dirs(["--config-dir", "nowhere"])


@pytest.mark.parametrize("extra,message", [
    ((f"workload.model._target_={TINY_NET}t",),
     r"unknown workload.model._target_ \(no 'TinySegNett' in 'examples.tiny_net'\).*Did you mean "
     r"'examples.tiny_net.TinySegNet'"),
    (("workload.model._target_=examples.tiny_nett.TinySegNet",), r"Did you mean 'examples.tiny_net'( or |\?)"),
    (("workload.model._target_=nopkg13.nets.Net",), r"no module 'nopkg13' can be imported here"),
    (("+workload.loss._target_=torch.nn.CrossEntropyLos",),
     r"Did you mean 'torch.nn.CrossEntropyLoss'.*\('torch.nn' has \d{3} public names"),
    (("workload.loss._target_=torch.nn.MSELoss",),
     r"Key '_target_' is not in struct \(to add a key the config does not have, write "
     r"\+workload.loss._target_=VALUE\)"),
    (("workload.input_shape=null",), r"workload 'custom' has no input shape: set workload.input_shape=\[C, \.\.\.\]"),
    (("workload.target=mask",), r"unknown workload.target 'mask'.*Valid choices: class, regression, segmentation"),
    (("data.source=disk",), r"data.source=disk writes volumes or images for the built-in pipelines; workload "
                            r"'custom' has synthetic: tensors"),
])
def test_a_workload_that_cannot_be_resolved_stops_before_anything_runs_with_the_reason(extra, message):
    with pytest.raises(ValueError, match=message):
        _inline(*extra)


def test_no_model_named_is_refused_with_how_to_name_one():
    with pytest.raises(ValueError, match=r"workload 'custom' names no model: set workload.model._target_="):
        config_mod.resolve(config_mod.from_dict({"workload": "custom"}), cuda_available=False)


def test_editing_the_users_model_file_changes_the_cache_key(tmp_path, monkeypatch):
    package = tmp_path / "mypkg13"
    package.mkdir()
    (package / "__init__.py").write_text("")
    source = package / "nets.py"
    source.write_text("from torch import nn\n\nclass Net(nn.Linear):\n    def __init__(self):\n"
                      "        super().__init__(8, 2)\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def resolved():
        cfg = config_mod.from_dict({"workload": "custom"})
        for key, value in (("workload.model._target_", "mypkg13.nets.Net"), ("workload.input_shape", [8, 1])):
            config_mod.set_key(cfg, key, value)
        return config_mod.resolve(cfg, cuda_available=False)

    before = config_mod.config_hash(resolved())
    assert config_mod.config_hash(resolved()) == before
    source.write_text(source.read_text() + "\n# an edit\n")
    assert config_mod.config_hash(resolved()) != before
    sys.modules.pop("mypkg13.nets", None), sys.modules.pop("mypkg13", None)


# --------------------------------------------------------------------------------------------
# knobs the model cannot take


def test_channels_last_on_a_1d_model_and_checkpointing_without_units_are_skipped_with_the_reason():
    cfg = _inline("workload.input_shape=[4,64]", "channels_last=true", "activation_checkpointing=true",
                  "workload.checkpoint_units=[]")
    reason = applicability.not_applicable(cfg)
    assert ("channels_last=true needs 2D or 3D samples (4D/5D tensors); workload 'custom' has 1D samples [4, 64]"
            in reason)
    assert "activation_checkpointing=true: workload 'custom' names no checkpoint_units" in reason
    assert applicability.not_applicable(_inline("channels_last=true")) == ""


@pytest.mark.parametrize("extra,reason", [
    ("model.width=0.5", "model.width=0.5 needs a model that takes a width: workload 'custom' hands none to its model"),
    ("data.augment=light", "data.augment=light applies to the volumes and images pipelines; workload 'custom' has "
                           "synthetic: tensors"),
])
def test_a_ladders_rung_the_model_cannot_take_is_skipped_not_refused(extra, reason):
    assert reason in applicability.not_applicable(_inline(extra))


def test_checkpointing_units_the_model_does_not_have_is_a_skip_from_the_child():
    from harness.workload.knobs import KnobNotApplicable, prepare

    cfg = _inline("activation_checkpointing=true", "workload.checkpoint_units=[torch.nn.LSTM]")
    with pytest.raises(KnobNotApplicable, match=r"the model has no \['LSTM'\] to wrap"):
        prepare(cfg, cfg.workload)


def test_a_compile_failure_is_skipped_with_the_compile_mode_and_the_reason():
    from harness.run.child import outcome

    failure = type("BackendCompilerFailed", (RuntimeError,), {"__module__": "torch._dynamo.exc"})
    exc = RuntimeError("wrapped")
    exc.__cause__ = failure("backend='inductor' raised:\nsomething the model does")
    assert outcome.classify(exc) == "skipped"
    assert outcome.skip_reason(exc, "default") == "compile=default failed on this model (RuntimeError): wrapped"
    assert outcome.classify(RuntimeError("shapes")) == "error"


def test_a_forward_that_fails_on_the_batch_says_the_shapes():
    from harness.run.child.measure import train_and_measure
    from harness.run.child.outcome import BatchRefused

    cfg = _inline("workload.input_shape=[2,16,16,16]", "measure.steps=1", "measure.warmup_steps=1")
    with pytest.raises(BatchRefused, match=r"^the model failed on a batch of input \[2, 2, 16, 16, 16\] float32 and "
                                           r"target \[2, 16, 16, 16\] int64 \(batch first\): RuntimeError"):
        train_and_measure(cfg, cfg.workload, lambda *a, **k: None)
    cfg = _inline("workload.target=class", "measure.steps=1", "measure.warmup_steps=1")
    with pytest.raises(BatchRefused, match=r"^the loss \(the model's output: \[2, 3, 16, 16, 16\] float32\) failed on "
                                           r"a batch of input \[2, 1, 16, 16, 16\] float32 and target \[2\] int64"):
        train_and_measure(cfg, cfg.workload, lambda *a, **k: None)


@pytest.mark.parametrize("target,shape", [("class", ()), ("segmentation", (16, 16, 16)), ("regression", (3,))])
def test_synthetic_tensors_give_targets_of_the_workloads_kind(target, shape):
    from harness.workload.data import build_dataset

    cfg = _inline(f"workload.target={target}")
    x, y = build_dataset(cfg, cfg.workload)[0]
    assert tuple(x.shape) == (1, 16, 16, 16) and tuple(y.shape) == shape
    assert str(y.dtype) == ("torch.float32" if target == "regression" else "torch.int64")


def test_a_users_dataset_is_built_from_its_partial_target_and_repeated_to_the_epoch(tmp_path, monkeypatch):
    from harness.workload.data import build_dataset

    (tmp_path / "mydata13.py").write_text(textwrap.dedent("""
        import torch

        def volumes(n=3):
            return [(torch.full((1, 16, 16, 16), float(i)), torch.zeros(16, 16, 16, dtype=torch.long))
                    for i in range(n)]
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = _inline("+workload.dataset._target_=mydata13.volumes", "+workload.dataset._partial_=true")
    dataset = build_dataset(cfg, cfg.workload)
    assert len(dataset) == cfg.batch_size * cfg.data.epoch_steps == 20
    assert [float(dataset[i][0][0, 0, 0, 0]) for i in range(4)] == [0.0, 1.0, 2.0, 0.0]
    sys.modules.pop("mydata13", None)


# --------------------------------------------------------------------------------------------
# end to end on the CPU: run and a 2-rung sweep, from a file of the user's and inline


TINY = ("measure.steps=2", "measure.warmup_steps=1")


def test_a_sweep_that_changes_a_workload_field_must_name_the_workload():
    from harness.commands.sweep import plan_sweep

    with pytest.raises(ValueError, match=r"workload.num_classes changes a field of a workload without naming it: add "
                                         r"workload=NAME \(ladder 'detr_fast' would use its own, 'detr'\)"):
        plan_sweep(["+ladder=detr_fast", "workload.num_classes=10"])
    assert "workload" in plan_sweep(["+ladder=detr_fast", "workload=resnet50", "workload.num_classes=10"]).user_keys


# slow [inline]: every run and sweep of the tiny model in the default tier is an inline model of the user's
# (tests.conftest.TINY_MODEL_ARGS; the shared measured_sweep of test_sweep checks its workload, unit and loss)
@pytest.mark.parametrize("form", ["file", pytest.param("inline", marks=pytest.mark.slow)])
def test_a_users_model_runs_and_sweeps_a_ladder(form, results):
    from harness.store import load_runs
    from tests.conftest import harness_cli

    args = ("--config-dir", "examples/conf", "workload=tiny_net") if form == "file" else INLINE
    run = harness_cli("run", *args, *TINY, f"results_dir={results}")
    assert run.returncode == 0, run.stdout + run.stderr
    sweep = harness_cli("sweep", *args, "+ladder=bf16", *TINY, "sweep.repeats=1", "sweep.remeasure_busy=false",
                        f"results_dir={results}")
    assert sweep.returncode == 0, sweep.stdout + sweep.stderr
    frame = load_runs(results).sort_values("timestamp")
    name = "tiny_net" if form == "file" else "custom"
    assert list(frame["workload"]) == [name] * 3 and list(frame["status"]) == ["ok"] * 3
    shown = "tiny_net" if form == "file" else f"custom: {TINY_NET}"  # an inline model is named by its target
    assert f"{shown}  size=smoke" in run.stdout and f"ladder bf16, workload {shown} (smoke)" in sweep.stdout
    swept = frame[frame["ladder"] == "bf16"].sort_values("rung")
    assert list(swept["change"]) == ["", "precision=bf16-mixed"]
    assert set(frame["unit"]) == {"voxels" if form == "file" else "samples"}
    assert (frame["loss_first"] > 0).all()


# --------------------------------------------------------------------------------------------
# a model built on the meta device in the parent, before any child starts

META_MODELS = """
import torch
from torch import nn


class NeedsPackage(nn.Module):  # a package imported as the model is built
    def __init__(self):
        super().__init__()
        import einops13_not_here.layers  # noqa: F401


class NeedsPackageToRun(nn.Linear):  # ... or on the first call, as MONAI's SwinUNETR imports einops
    def __init__(self):
        super().__init__(8, 2)

    def forward(self, x):
        import einops13_not_here  # noqa: F401


class ReadsATensor(nn.Module):  # what SwinUNETR's constructor does: cannot run on the meta device as it is
    def __init__(self):
        super().__init__()
        self.rates = [x.item() for x in torch.linspace(0, 0.1, 3)]
        self.fc = nn.Linear(8, 2)

    def forward(self, x):
        return self.fc(x.flatten(1))


class Refuses(nn.Module):
    def __init__(self, width: int = 3):
        super().__init__()
        if width % 2:
            raise ValueError(f"width must be even, got {width}")
"""


@pytest.fixture
def meta_models(tmp_path, monkeypatch):
    for _ in user_module(tmp_path, monkeypatch, "metanets13", META_MODELS):
        yield tmp_path


def _custom(target: str, *extra: str) -> config_mod.RunConfig:
    cfg = config_mod.from_dict({"workload": "custom"})
    for key, value in (("workload.model._target_", f"metanets13.{target}"), ("workload.input_shape", [1, 8])):
        config_mod.set_key(cfg, key, value)
    return config_mod.resolve(cfg, cuda_available=False)


@pytest.mark.parametrize("target,message", [
    ("NeedsPackage", "workload.model._target_='metanets13.NeedsPackage' needs the package 'einops13_not_here', which "
                     "is not installed here: pip install einops13_not_here (or the package that provides it)"),
    ("NeedsPackageToRun", "workload.model._target_='metanets13.NeedsPackageToRun' needs the package "
                          "'einops13_not_here', which is not installed here"),
    ("Refuses", "workload.model._target_='metanets13.Refuses' cannot be built: ValueError: width must be even, got 3"),
])
def test_a_model_that_cannot_be_built_or_lacks_a_package_is_one_line_before_anything_runs(meta_models, target,
                                                                                          message):
    from harness.workload import preflight

    with pytest.raises(ValueError) as caught:
        preflight.check_model_builds(_custom(target))
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_a_constructor_that_reads_its_own_tensors_still_passes_the_meta_build(meta_models):
    from harness.workload import preflight

    preflight.check_model_builds(_custom("ReadsATensor"))  # tensor.item() has no value on the meta device


def test_the_parents_check_builds_the_model_and_the_loss_once_each_and_the_checks_build_nothing(monkeypatch):
    import torch

    from harness.workload import preflight

    made, instantiate, init = [], preflight.instantiate, torch.nn.CrossEntropyLoss.__init__
    monkeypatch.setattr(preflight, "instantiate", lambda node, **kw: made.append(node["_target_"]) or
                        instantiate(node, **kw))
    monkeypatch.setattr(torch.nn.CrossEntropyLoss, "__init__", lambda self, *a, **kw: made.append("a loss") or
                        init(self, *a, **kw))
    cfg = config_mod.from_dict({"workload": "custom"})
    for key, value in (("workload.model._target_", "torch.nn.Flatten"), ("workload.input_shape", [1, 8]),
                       ("workload.loss", {"_target_": "torch.nn.CrossEntropyLoss", "label_smoothing": 0.1})):
        config_mod.set_key(cfg, key, value)
    preflight.check_model_builds(config_mod.resolve(cfg, cuda_available=False))
    assert made == ["torch.nn.Flatten", "torch.nn.CrossEntropyLoss", "a loss"]  # on the meta device, in one pass


def test_a_missing_package_stops_the_run_in_the_parent_with_exit_2(meta_models, results):
    from tests.conftest import harness_cli

    out = harness_cli("run", "workload=custom", "workload.model._target_=metanets13.NeedsPackage",
                      "workload.input_shape=[1,8]", *TINY, f"results_dir={results}", cwd=meta_models)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "error: workload.model._target_='metanets13.NeedsPackage' needs the package 'einops13_not_here', which is not "
        "installed here: pip install einops13_not_here (or the package that provides it)"]
    assert not list((results / "runs").glob("*.parquet"))  # no child ran, nothing was recorded


def test_an_inline_model_is_named_by_its_target_where_people_read_it():
    from harness.analysis.views.table import workload_name

    assert display_name("custom", {"_target_": "monai.networks.nets.SegResNet"}) == \
        "custom: monai.networks.nets.SegResNet"
    assert display_name("unet3d", {"_target_": "models.segmentation3d.unet3d"}) == "unet3d"
    record = {"workload": "custom", "config_json": json.dumps({"workload": {"model": {"_target_": "a.B"}}})}
    assert workload_name(record) == "custom: a.B" and workload_name({"workload": "resnet50"}) == "resnet50"


def test_a_factory_is_named_with_the_model_it_makes():
    assert display_name("custom", {"_target_": "timm.create_model", "model_name": "resnet18"}) == \
        "custom: timm.create_model(resnet18)"
    assert display_name("custom", {"_target_": "timm.create_model", "_args_": ["vit_tiny_patch16_224"]}) \
        == "custom: timm.create_model(vit_tiny_patch16_224)"
    assert display_name("custom", {"_target_": "torch.nn.Conv1d", "in_channels": 1}) == \
        "custom: torch.nn.Conv1d"
