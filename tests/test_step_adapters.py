"""The step adapters (harness.workload.step): one interface, registered by name (an unknown name is one line with the
closest), one function choosing a workload's (a LightningModule, ``workload.step``, a Hugging Face model, the
default step, in that order), each adapter's validation step; and a Hugging Face model handed (input, target)
tensors refused in the parent, with the child's words. In-process, on the CPU, tiny modules; nothing is measured."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from harness import cli
from harness import config as config_mod
from harness.config.targets import functions_of
from harness.config.workload import WorkloadSpec
from harness.run.parent import runner
from harness.workload import preflight
from harness.workload.step import adapters
from harness.workload.step.huggingface import hf_batch_check
from harness.workload.step.interface import OwnStep, StepAdapter, ValStep
from harness.workload.step.interface import StepError
from tests.conftest import user_module

OWN = """
import torch
from torch import nn
from torch.nn import functional as F


class PreTrainedModel(nn.Module):  # transformers' base class as the adapter finds it: by name and module
    pass


PreTrainedModel.__module__ = "transformers.modeling_utils"


class TinyLM(PreTrainedModel):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 10)

    def forward(self, input_ids, attention_mask=None, labels=None):
        logits = self.head(self.emb(input_ids))
        return {"loss": F.cross_entropy(logits.flatten(0, 1), labels.flatten()), "logits": logits}


class Module(nn.Module):  # a LightningModule as the adapter sees it: its methods
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 2)

    def training_step(self, batch, batch_idx):
        return self.net(batch[0]).sum()

    def validation_step(self, batch, batch_idx):
        return None

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def step(model, batch):
    return model(batch[0]).sum()


def count(batch):
    return 2.0


def broken_factory():
    raise RuntimeError("no collate today")
"""


@pytest.fixture
def own(tmp_path, monkeypatch):
    yield from user_module(tmp_path, monkeypatch, "stepadapters55", OWN)


def test_the_adapters_are_registered_by_name_in_the_order_they_are_asked_and_each_has_the_interface():
    assert list(adapters.ADAPTERS) == ["lightning", "step", "huggingface", "default"]
    for name, adapter in adapters.ADAPTERS.items():
        assert isinstance(adapter, StepAdapter) and adapter.name == name
        assert adapters.adapter_named(name) is adapter


def test_an_unknown_adapter_name_is_one_line_with_the_closest_and_every_choice():
    with pytest.raises(ValueError) as caught:
        adapters.adapter_named("lightnin")
    assert str(caught.value) == ("unknown step adapter 'lightnin'. Did you mean 'lightning'? Valid choices: default, "
                                 "huggingface, lightning, step")
    with pytest.raises(ValueError, match=r"^unknown step adapter 'hugginface'\. Did you mean 'huggingface'\?"):
        adapters.register(Toy(), before="hugginface")
    with pytest.raises(ValueError, match=r"^a step adapter named 'default' is already registered$"):
        adapters.register(adapters.adapter_named("default"))
    assert list(adapters.ADAPTERS) == ["lightning", "step", "huggingface", "default"]


class Toy:
    """A new kind of model: every model with a ``toy_loss`` method."""

    name = "toy"

    def applies(self, spec, model) -> bool:
        return hasattr(model, "toy_loss")

    def build(self, spec, model, fns, with_data=True, loss_fn=None) -> OwnStep:
        return OwnStep(name="the toy's loss", call=lambda m, batch: m.toy_loss(batch), adapter=self.name)

    def validation(self, spec, module, own):
        return ValStep(name=own.name, call=lambda m, batch, _i: m.toy_loss(batch))


def test_one_function_chooses_the_first_adapter_that_applies(own):
    net, hf, module = nn.Linear(4, 2), own.TinyLM(), own.Module()
    lightning = WorkloadSpec(lightning_module={"_target_": "stepadapters55.Module"})
    stepped = WorkloadSpec(step={"_target_": "stepadapters55.step"})
    assert adapters.chosen(lightning, module).name == "lightning"
    assert adapters.chosen(stepped, hf).name == "step"  # the user's step before the model's own loss
    assert adapters.chosen(WorkloadSpec(), hf).name == "huggingface"
    assert adapters.chosen(WorkloadSpec(), net).name == "default"
    assert _own(WorkloadSpec(), net) is None  # the loop's fixed loss_fn(model(x), y)
    made = _own(lightning, module, with_data=False)
    assert made.adapter == "lightning" and made.lightning
    assert made.name == "workload.lightning_module='stepadapters55.Module': training_step"
    assert _own(stepped, net).name == "workload.step='stepadapters55.step'"


def _own(spec, model, **kw):
    return adapters.steps_of(spec, model, functions_of(spec), validates=False, **kw)[0]


def _val(spec, model, **kw):
    return adapters.steps_of(spec, model, functions_of(spec), validates=True, **kw)[1]


def test_the_counting_hooks_count_whichever_adapter_made_the_step(own):
    counted = WorkloadSpec(samples={"_target_": "stepadapters55.count"})
    default = _own(counted, nn.Linear(4, 2), loss_fn=nn.MSELoss())
    assert default.adapter == "default" and default.name == "the default step (loss_fn(model(x), y))"
    assert default.call(nn.Linear(4, 2), (torch.zeros(3, 4), torch.zeros(3, 2))).dim() == 0
    hf = _own(counted, own.TinyLM())
    assert hf.adapter == "huggingface" and hf.counts is not None
    hf.counts({"input_ids": torch.zeros(1, 3)})
    assert hf.counts.window(1) == (2.0, None)


def test_each_adapter_names_its_validation_step(own):
    hf, module, net = own.TinyLM(), own.Module(), nn.Linear(4, 2)
    hf_own = _own(WorkloadSpec(), hf)
    assert _val(WorkloadSpec(), hf).name == hf_own.name  # it validates as it trains
    lightning = WorkloadSpec(lightning_module={"_target_": "stepadapters55.Module"})
    val = _val(lightning, module, with_data=False)
    assert val.name == "workload.lightning_module='stepadapters55.Module': validation_step" and val.may_return_none
    stepped = WorkloadSpec(step={"_target_": "stepadapters55.step"})
    assert _val(stepped, net) is None  # a user's step names none
    assert _val(WorkloadSpec(), net) is None  # the default step's own pass
    named = WorkloadSpec(step={"_target_": "stepadapters55.step"}, val_step={"_target_": "stepadapters55.step"})
    assert _val(named, net).name == "workload.val_step='stepadapters55.step'"  # the workload's own, looked up once


def test_a_new_adapter_registered_before_the_default_is_chosen_and_validates():
    adapters.register(Toy(), before="default")
    try:
        assert list(adapters.ADAPTERS) == ["lightning", "step", "huggingface", "toy", "default"]
        model = nn.Linear(4, 2)
        model.toy_loss = lambda batch: batch.sum()
        made = _own(WorkloadSpec(), model)
        assert made.adapter == "toy" and float(made.call(model, torch.ones(2))) == 2.0
        assert _val(WorkloadSpec(), model).name == "the toy's loss"
    finally:
        adapters.ADAPTERS.pop("toy")


def _checked(**settings):
    cfg = config_mod.from_dict({"workload": "custom"})
    for key, value in {"measure.steps": 2, "measure.warmup_steps": 1, "batch_size": 2, **settings}.items():
        config_mod.set_key(cfg, key, value)
    preflight.check_model_builds(runner.resolve(cfg, runner.Machine(cuda_available=False)))


def test_a_hugging_face_model_handed_input_target_tensors_is_refused_in_the_parent_with_the_childs_words(own):
    with pytest.raises(StepError) as caught:
        _checked(**{"workload.model._target_": "stepadapters55.TinyLM", "workload.input_shape": [1, 8]})
    message = str(caught.value)
    assert message == ("a Hugging Face model takes a batch of named tensors (model(**batch)): the loader gave a tuple "
                       "(batch[0] [2, 1, 8] float32, batch[1] [2] int64); give a dataset of dicts (input_ids, "
                       "labels, ...)")
    with pytest.raises(StepError) as in_child:  # what the child says of the same batch on the CPU
        hf_batch_check((torch.zeros(2, 1, 8), torch.zeros(2, dtype=torch.int64)))
    assert str(in_child.value) == message
    _checked(**{"workload.model._target_": "stepadapters55.TinyLM", "workload.input_shape": [1, 8],
                "workload.synthetic": "tokens", "workload.num_classes": 10})  # named tensors: it passes


def test_that_refusal_exits_2_before_anything_runs(own, tmp_path, capsys):
    argv = ["workload=custom", "workload.model._target_=stepadapters55.TinyLM", "workload.input_shape=[1,8]",
            f"results_dir={tmp_path / 'results'}"]
    assert cli.main(["run", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: a Hugging Face model takes a batch of named tensors (model(**batch)): the loader "
                          "gave a tuple") and "\n" not in err
    assert not list((tmp_path / "results").rglob("*.parquet"))  # nothing ran


def test_the_parent_looks_each_function_of_the_workload_up_once_and_a_failing_factory_is_one_line(own, monkeypatch):
    from harness.config import targets

    looked: list[str] = []
    real = targets.function_of
    monkeypatch.setattr(targets, "function_of", lambda node: looked.append(node["_target_"]) or real(node))
    _checked(**{"workload.model._target_": "torch.nn.Linear", "workload.model.in_features": 8,
                "workload.model.out_features": 2, "workload.input_shape": [1, 8], "workload.target": "regression",
                "workload.target_shape": [2], "workload.step._target_": "stepadapters55.step",
                "workload.samples._target_": "stepadapters55.count", "val.every_n_steps": 1, "val.steps": 1,
                "workload.val_step._target_": "stepadapters55.step"})
    assert sorted(looked) == ["stepadapters55.count", "stepadapters55.step", "stepadapters55.step"]  # each once
    with pytest.raises(ValueError) as caught:
        targets.functions_of(WorkloadSpec(collate={"_target_": "stepadapters55.broken_factory", "_partial_": False}))
    assert str(caught.value) == ("workload.collate._target_='stepadapters55.broken_factory' cannot be made: "
                                 "RuntimeError: no collate today")
