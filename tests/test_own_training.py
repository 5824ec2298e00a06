"""A workload's own training: a step function, a LightningModule (duck-typed here: no Lightning needed), what each
knob does to it, and bad input caught in the parent (exit 2) or in the child (an `error` record). In-process, on the
CPU, with a tiny model; the examples themselves run in test_examples.py."""

from __future__ import annotations

import sys

import pytest
import torch

from harness import config as config_mod
from harness.run.child.measure import train_and_measure
from harness.workload import preflight
from harness.workload.applicability import not_applicable
from harness.workload.batches import BatchLeafError
from harness.workload.step.interface import StepError
from tests.conftest import user_module

OWN = """
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import Dataset

CALLS = []


def step(model, batch):
    x, y = batch
    CALLS.append(x.shape[0])
    out = model(x)
    return {"main": F.cross_entropy(out, y), "aux": 0.1 * out.pow(2).mean()}


def no_loss(model, batch):
    model(batch[0])


class Dicts(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return {"x": torch.randn(1, 8), "y": torch.randint(0, 2, (8,))}


def with_numpy(items):
    return {"x": torch.stack([i["x"] for i in items]), "y": torch.stack([i["y"] for i in items]),
            "extra": np.zeros((len(items), 3))}


def images(batch):
    return 1


def tokens(batch):
    return batch[1].numel() + 0.5


def dict_step(model, batch):
    return F.cross_entropy(model(batch["x"]), batch["y"])


class Module(nn.Module):  # a LightningModule as the adapter sees it: its methods, no Lightning
    def __init__(self, returns_none: bool = False):
        super().__init__()
        self.net = nn.Conv1d(1, 2, 1)
        self.returns_none = returns_none
        self.zeroed = 0

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        return None if self.returns_none else {"loss": loss}

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, 10)]


class FullModule(Module):  # ... zeroing its gradients itself, with its own data
    def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
        self.zeroed += 1
        optimizer.zero_grad()

    def train_dataloader(self):
        x, y = torch.randn(16, 1, 8), torch.randint(0, 2, (16, 8))
        return torch.utils.data.DataLoader(list(zip(x, y)), batch_size=4)
"""


@pytest.fixture
def own(tmp_path, monkeypatch):
    yield from user_module(tmp_path, monkeypatch, "owntrain13", OWN)


def _cfg(*, lightning: str = "", **overrides) -> config_mod.RunConfig:
    settings = {"workload": "custom", "workload.input_shape": [1, 8], "workload.target": "segmentation",
                "measure.steps": 3, "measure.warmup_steps": 1}
    if lightning:
        settings["workload.lightning_module._target_"] = f"owntrain13.{lightning}"
    else:
        settings.update({"workload.model._target_": "torch.nn.Conv1d", "workload.model.in_channels": 1,
                         "workload.model.out_channels": 2, "workload.model.kernel_size": 1})
    cfg = config_mod.from_dict({"workload": "custom"})
    for key, value in {**settings, **{k.replace("__", "."): v for k, v in overrides.items()}}.items():
        config_mod.set_key(cfg, key, value)
    return config_mod.resolve(cfg, cuda_available=False)


def _measure(cfg):
    return train_and_measure(cfg, cfg.workload, lambda *a, **k: None)


def test_a_step_hook_is_called_once_a_micro_batch_and_its_losses_summed(own):
    cfg = _cfg(**{"workload.step._target_": "owntrain13.step", "workload.step._partial_": True,
                  "accumulate_grad_batches": 2})
    m, _ = _measure(cfg)
    assert own.CALLS == [2] * 8  # (1 warm-up + 3 measured steps) x 2 micro-batches of batch_size 2
    assert len(m.step_ms) == 3 and m.samples_per_step == 4
    assert 0.5 < m.loss_first < 2.0  # cross-entropy over 2 classes (~0.69) plus the small auxiliary loss


def test_samples_and_units_hooks_count_the_measured_micro_batches_and_set_the_throughput(own):
    from harness.run.child.summary import Extras, PerSample, summarize

    cfg = _cfg(**{"workload.samples._target_": "owntrain13.images", "workload.units._target_": "owntrain13.tokens",
                  "accumulate_grad_batches": 2})
    m, extras = _measure(cfg)
    assert (m.samples_counted, m.units_counted) == (6.0, 6 * 16.5)  # 3 steps x 2 micro-batches of [2, 8] targets
    summary = summarize(m, Extras(), PerSample(units=1), compiled=False)
    assert summary.samples_per_s == pytest.approx(6.0 / m.measured_s)
    assert summary.units_per_s == pytest.approx(99.0 / m.measured_s)


def test_a_dict_batch_with_the_workloads_own_collate_reaches_the_step_and_a_leaf_that_cannot_move_is_named(own):
    data = {"workload.dataset._target_": "owntrain13.Dicts", "workload.dataset._partial_": True,
            "workload.step._target_": "owntrain13.dict_step", "workload.step._partial_": True}
    m, _ = _measure(_cfg(**data))
    assert m.loss_first > 0
    m, _ = _measure(_cfg(**data, measure__mode="loader"))  # the loader alone, on the same dicts
    assert len(m.step_ms) == 3 and m.loss_first is None
    m, _ = _measure(_cfg(**data, measure__mode="model"))  # the model alone, on one dict kept on the device
    assert len(m.step_ms) == 3 and m.loss_first > 0
    with pytest.raises(BatchLeafError, match=r"^batch\['extra'\] is a numpy.ndarray of shape \[2, 3\], which cannot "
                                             r"move to the device"):
        _measure(_cfg(**data, **{"workload.collate._target_": "owntrain13.with_numpy",
                                 "workload.collate._partial_": True}))


def test_a_lightning_module_trains_through_its_training_step_first_optimizer_zeroing_and_data(own, capsys,
                                                                                             monkeypatch):
    cfg = _cfg(lightning="FullModule")
    preflight.check_model_builds(cfg)
    assert "its learning-rate scheduler is not stepped" in capsys.readouterr().err
    zeroed, batches = [], []
    monkeypatch.setattr(own.FullModule, "optimizer_zero_grad", lambda self, e, i, opt: zeroed.append(i))
    training_step = own.FullModule.training_step
    monkeypatch.setattr(own.FullModule, "training_step",
                        lambda self, batch, i: batches.append((i, batch[0].shape)) or training_step(self, batch, i))
    m, _ = _measure(cfg)
    assert 0.3 < m.loss_first < 1.5 and len(m.step_ms) == 3
    assert len(zeroed) == 4  # the module's own zeroing, once a step
    # training_step(batch, batch_idx) with batch_idx counting on, on the module's own data rebuilt at batch_size 2
    assert batches == [(i, torch.Size([2, 1, 8])) for i in range(4)]
    assert not_applicable(_cfg(lightning="Module", optimizer__fused=False)) == (
        "optimizer.fused=False is passed to the harness's optimizer; workload.lightning_module='owntrain13.Module': "
        "training_step builds its own (configure_optimizers)")


def test_set_to_none_is_skipped_where_the_module_zeroes_its_gradients_itself(own):
    from harness.workload.applicability import KnobNotApplicable

    with pytest.raises(KnobNotApplicable, match=r"^FullModule zeroes its gradients itself \(optimizer_zero_grad\), so "
                                                r"optimizer.zero_grad_set_to_none=false would change nothing"):
        _measure(_cfg(lightning="FullModule", optimizer__zero_grad_set_to_none=False))


@pytest.mark.parametrize("settings,message", [
    ({"workload.step._target_": "owntrain13.no_loss"}, "workload.step='owntrain13.no_loss' returned None: return "
                                                       "the loss, a scalar tensor"),
    ({"workload.lightning_module._target_": "owntrain13.Module", "workload.lightning_module.returns_none": True},
     "workload.lightning_module='owntrain13.Module': training_step returned None"),
])
def test_a_step_with_no_loss_is_refused_in_the_parent_before_anything_runs(own, settings, message):
    cfg = config_mod.from_dict({"workload": "custom"})
    model = {} if "workload.lightning_module._target_" in settings else {
        "workload.model._target_": "torch.nn.Conv1d", "workload.model.in_channels": 1,
        "workload.model.out_channels": 2, "workload.model.kernel_size": 1}
    for key, value in {"workload.input_shape": [1, 8], "workload.target": "segmentation", **model,
                       **settings}.items():
        config_mod.set_key(cfg, key, value)
    with pytest.raises(StepError) as caught:
        preflight.check_model_builds(config_mod.resolve(cfg, cuda_available=False))
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_knobs_that_cannot_act_on_a_users_step_are_skipped_with_the_reason(own):
    step = {"workload.step._target_": "owntrain13.step", "workload.step._partial_": True}
    assert not_applicable(_cfg(**step, visualize_every_n_steps=5)) == (
        "visualize_every_n_steps=5 writes a sample's input and the model's output; workload.step='owntrain13.step' "
        "returns only its loss")
    assert "val.every_n_steps=5 runs a validation step in eval mode" in not_applicable(
        _cfg(**step, val__every_n_steps=5))  # with none to call (tests/test_own_validation.py)
    assert not_applicable(_cfg(**step, precision="bf16-mixed", accumulate_grad_batches=2)) == ""


def test_a_missing_optional_dependency_names_the_module_and_the_install_line(tmp_path, monkeypatch):
    (tmp_path / "needslightning13.py").write_text("import lightning\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, "lightning", None)  # as if it were not installed
    with pytest.raises(ValueError) as caught:
        _cfg(**{"workload.model._target_": None, "workload.lightning_module._target_": "needslightning13.Module"})
    message = str(caught.value)
    assert message.startswith("workload.lightning_module._target_='needslightning13.Module': importing "
                              "'needslightning13.Module' failed: ")
    assert message.endswith("(the harness's optional extra: pip install -e '.[lightning]')") and "\n" not in message


def test_a_users_step_keeps_the_default_steps_config_hash_when_absent():
    plain = _cfg(**{"workload.model._target_": "torch.nn.Conv1d"})
    assert plain.workload.step is None and plain.workload.lightning_module is None
    assert "step" not in plain.workload.hashed() and "collate" not in plain.workload.hashed()


def test_a_model_whose_output_the_default_loss_cannot_take_is_refused_in_the_parent_naming_a_step():
    cfg = config_mod.from_dict({"workload": "custom"})
    for key, value in {"workload.model._target_": "torch.nn.LSTM", "workload.model.input_size": 8,
                       "workload.model.hidden_size": 4, "workload.model.batch_first": True,
                       "workload.input_shape": [3, 8]}.items():
        config_mod.set_key(cfg, key, value)
    with pytest.raises(StepError) as caught:
        preflight.check_model_builds(config_mod.resolve(cfg, cuda_available=False))
    assert str(caught.value).startswith("workload.model._target_='torch.nn.LSTM' returns a tuple, which the default "
                                        "step's loss cannot take (TypeError: ")
    assert str(caught.value).endswith("name a step that computes the loss from it: workload.step._target_="
                                      "mypkg.train.step (step(model, batch) -> loss)")


def test_compile_of_a_lightning_module_compiles_its_forward_in_place_and_leaves_its_step_as_written(own):
    from harness.workload.knobs import compile_forward

    module = own.Module()
    assert compile_forward(module, "default") is module  # the module itself: its training_step is called as it is
    assert module.forward._torchdynamo_orig_callable.__func__ is own.Module.forward  # lazy: nothing compiled yet
    assert "training_step" not in vars(module)
    untouched = own.Module()
    assert compile_forward(untouched, "off") is untouched and "forward" not in vars(untouched)


def test_the_loader_alone_of_a_lightning_module_reads_its_own_data(own, monkeypatch):
    asked, train_dataloader = [], own.FullModule.train_dataloader
    monkeypatch.setattr(own.FullModule, "train_dataloader", lambda self: asked.append(1) or train_dataloader(self))
    m, _ = _measure(_cfg(lightning="FullModule", measure__mode="loader"))
    assert asked == [1] and len(m.step_ms) == 3 and m.loss_first is None  # batches only, no step


def test_the_inline_forms_compose_on_the_command_line_without_a_plus(own):
    from harness.commands import hydra_edge
    from harness.names import display_name

    def composed(*overrides: str) -> config_mod.RunConfig:
        argv = hydra_edge.with_config_dirs(["workload=custom", "workload.input_shape=[1,8]", *overrides])
        settings = config_mod.from_dict(hydra_edge.plain_settings(hydra_edge.compose_settings(argv)))
        return config_mod.resolve(settings, cuda_available=False)

    module = composed("workload.lightning_module._target_=owntrain13.FullModule").workload
    assert module.lightning_module == {"_target_": "owntrain13.FullModule"} and module.step is None
    assert display_name(module.name, module.model_node) == "custom: owntrain13.FullModule"
    step = composed("workload.model._target_=torch.nn.Conv1d", "workload.step._target_=owntrain13.step",
                    "workload.collate._target_=owntrain13.with_numpy").workload
    assert step.step == {"_target_": "owntrain13.step", "_partial_": True} and step.lightning_module is None
    assert step.collate == {"_target_": "owntrain13.with_numpy", "_partial_": True}
