"""Where the shape of a user's thing is known, a mistake is refused before anything runs, in one line naming the fix
(exit 2): a dict or list batch, or a detector's forward that wants its targets, with the default step (name a
``workload.step``); a LightningModule given as ``model`` (name ``workload.lightning_module``); both given. And a
workload with its own dataset needs no ``input_shape``: its first item's is read. In-process, on the CPU, tiny
modules; nothing is measured."""

from __future__ import annotations

import pytest

from harness import cli
from harness import config as config_mod
from harness.run.parent import runner
from harness.workload import first_item, preflight
from tests.conftest import user_module

OWN = """
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import Dataset


class Dicts(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return {"input_ids": torch.randint(0, 10, (12,)), "labels": torch.randint(0, 10, (12,))}


class Triples(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.randn(3, 16, 16), torch.tensor(1), torch.tensor(0.5)


class Tensors(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.randn(3, 16, 16)


class Pairs(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.randn(3, 16, 16), torch.tensor(i % 2)


class Detections(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.randn(3, 32, 32), {"boxes": torch.tensor([[1.0, 1.0, 9.0, 9.0]]), "labels": torch.tensor([1])}


class Detector(nn.Module):  # as torchvision's detection models: forward(images, targets), targets in training
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 2, 1)

    def forward(self, images, targets=None):
        if self.training and targets is None:
            raise AssertionError("targets should not be none when in training mode")
        return {"loss": self.conv(images).mean()}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 2))

    def forward(self, x):
        return self.net(x)


class Module(Net):  # a LightningModule as the adapter sees it: its methods, no Lightning needed
    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def dict_step(model, batch):
    return model(batch["input_ids"].float()).mean()
"""


@pytest.fixture
def own(tmp_path, monkeypatch):
    yield from user_module(tmp_path, monkeypatch, "ownrefuse51", OWN)


def _checked(**settings):
    """The settings resolved as `run` resolves them, then the parent's model check (ValueError when refused)."""
    cfg = config_mod.from_dict({"workload": "custom"})
    for key, value in {"measure.steps": 2, "measure.warmup_steps": 1, **settings}.items():
        config_mod.set_key(cfg, key.replace("__", "."), value)
    resolved = runner.resolve(cfg, runner.Machine(cuda_available=False))
    preflight.check_model_builds(resolved)
    return resolved


def _refused(**settings) -> str:
    with pytest.raises(ValueError) as caught:
        _checked(**settings)
    message = str(caught.value)
    assert "\n" not in message
    return message


NET = {"workload.model._target_": "ownrefuse51.Net"}


def _data(name: str) -> dict:
    return {"workload.dataset._target_": f"ownrefuse51.{name}", "workload.dataset._partial_": True}


def test_a_dict_batch_with_the_default_step_is_refused_naming_a_step(own):
    message = _refused(**NET, **_data("Dicts"))
    assert message.startswith("workload 'custom' gives batches of named tensors (a dict: batch['input_ids'] [1, 12] "
                              "int64, batch['labels'] [1, 12] int64); the default step takes (input, target) pairs")
    assert message.endswith("workload.step._target_=mypkg.train.step (step(model, batch) -> loss; "
                            "docs/own-training.md)")
    stepped = _checked(**NET, **_data("Dicts"), **{"workload.step._target_": "ownrefuse51.dict_step"})
    assert stepped.workload.input_shape == [1, 12]  # token ids of length 12, read from the first item


def test_a_list_batch_that_is_no_pair_with_the_default_step_is_refused_naming_a_step(own):
    message = _refused(**NET, **_data("Triples"))
    assert message.startswith("workload 'custom' gives batches that are a list of 3 (batch[0] [1, 3, 16, 16] float32, "
                              "batch[1] [1] int64, batch[2] [1] float32), not (input, target) pairs")
    assert "workload.step._target_=mypkg.train.step" in message
    alone = _refused(**NET, **_data("Tensors"))
    assert alone.startswith("workload 'custom' gives batches that are one tensor (batch [1, 3, 16, 16] float32), not "
                            "(input, target) pairs")


def test_a_detector_whose_forward_wants_its_targets_is_refused_naming_a_step(own):
    message = _refused(**{"workload.model._target_": "ownrefuse51.Detector"}, **_data("Detections"))
    assert message.startswith("workload.model._target_='ownrefuse51.Detector' wants the targets in its forward "
                              "(forward(images, targets), as torchvision's detection models do: targets should not be "
                              "none when in training mode)")
    assert "the default step calls model(x) alone: name a step" in message
    inline = _refused(**{"workload.model._target_": "ownrefuse51.Detector", "workload.input_shape": [3, 32, 32]})
    assert inline.startswith("workload.model._target_='ownrefuse51.Detector' wants the targets in its forward")


def test_a_lightning_module_given_as_model_is_refused_naming_lightning_module(own):
    message = _refused(**{"workload.model._target_": "ownrefuse51.Module", "workload.input_shape": [3, 16, 16]})
    assert message == ("workload.model._target_='ownrefuse51.Module' is a LightningModule (Module has training_step "
                       "and configure_optimizers): as workload.model it would be measured through its forward with "
                       "the harness's loss; give it as workload.lightning_module._target_=ownrefuse51.Module (and "
                       "workload.model=null) to measure its training_step")
    _checked(**{"workload.lightning_module._target_": "ownrefuse51.Module", "workload.input_shape": [3, 16, 16]})


def test_a_model_and_a_lightning_module_both_given_is_one_line_and_exit_2(own, tmp_path, capsys):
    both = ["workload=custom", "workload.model._target_=ownrefuse51.Net",
            "workload.lightning_module._target_=ownrefuse51.Module", "workload.input_shape=[3,16,16]",
            f"results_dir={tmp_path / 'results'}"]
    assert cli.main(["run", *both]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("error: workload 'custom' names both workload.model._target_='ownrefuse51.Net' and "
                   "workload.lightning_module._target_='ownrefuse51.Module'; only one is measured: keep the "
                   "LightningModule (its training_step) and set workload.model=null, or keep the model and set "
                   "workload.lightning_module=null")
    assert not (tmp_path / "results").exists()  # refused before anything ran


def test_a_dict_batch_refusal_exits_2_before_anything_runs(own, tmp_path, capsys):
    argv = ["workload=custom", "workload.model._target_=ownrefuse51.Net",
            "+workload.dataset._target_=ownrefuse51.Dicts", "+workload.dataset._partial_=true",
            f"results_dir={tmp_path / 'results'}"]
    assert cli.main(["run", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: workload 'custom' gives batches of named tensors") and "\n" not in err
    assert not list((tmp_path / "results").rglob("*.parquet"))  # nothing ran


def test_input_shape_is_read_from_the_datasets_first_item_and_said_once(own, capsys):
    cfg = _checked(**NET, **_data("Pairs"))
    assert cfg.workload.input_shape == [3, 16, 16] and list(cfg.data.patch_size) == [16, 16]
    _checked(**NET, **_data("Pairs"))
    err = capsys.readouterr().err
    assert err.count("note: workload 'custom': input_shape [3, 16, 16] read from its dataset's first item") == 1
    given = _checked(**NET, **_data("Pairs"), **{"workload.input_shape": [3, 8, 8]})
    assert given.workload.input_shape == [3, 8, 8]  # a shape given is kept as given


def test_shapes_of_items_channels_first():
    import torch

    assert first_item.shape_of(torch.zeros(1, 8, 8)) == [1, 8, 8]
    assert first_item.shape_of((torch.zeros(7), 3)) == [1, 7]  # a 1-D input: one channel
    assert first_item.shape_of({"attention_mask": torch.zeros(5), "input_ids": torch.zeros(9)}) == [1, 9]
    assert first_item.shape_of({"a": "text", "b": torch.zeros(2, 4)}) == [2, 4]
    assert first_item.shape_of(("text", 1)) is None and first_item.shape_of(torch.tensor(1.0)) is None


def test_without_a_dataset_or_a_reader_the_missing_input_shape_is_still_refused(own):
    with pytest.raises(ValueError, match=r"^workload 'custom' has no input shape: set workload.input_shape=\[C, "
                                         r"\.\.\.\].*\(or give your own data as workload.dataset: its first item's "
                                         r"shape is read\)$"):
        _checked(**NET)
