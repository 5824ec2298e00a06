"""Moving a batch of any shape to the device (harness.workload.batches) and reading a step's result as its loss
(harness.workload.step.loss): pure functions, on the CPU, in-process."""

from __future__ import annotations

from collections import OrderedDict, namedtuple
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from harness.workload.batches import BatchLeafError, batch_mover, describe, float_leaves
from harness.workload.step.lightning import SCHEDULER_NOTE, first_optimizer
from harness.workload.step.loop import channels_last_reason
from harness.workload.step.loss import loss_reader
from harness.workload.step.interface import StepError

Pair = namedtuple("Pair", "image label")


@dataclass(frozen=True)
class Sample:
    image: torch.Tensor
    name: str


class Moves:
    """An object with its own .to (a Hugging Face BatchEncoding, a graph batch)."""

    def __init__(self):
        self.to_calls = []

    def to(self, device):
        self.to_calls.append(device)
        return self


class MovesInPlace(Moves):
    def to(self, device):
        self.to_calls.append(device)  # returns None, as a hand-written .to may


def test_every_leaf_of_a_nested_batch_is_moved_and_every_container_rebuilt_as_its_own_type():
    image, ids = torch.randn(2, 3, 4, 4), torch.arange(6).view(2, 3)
    moves, in_place = Moves(), MovesInPlace()
    batch = {"pair": Pair(image, ids), "list": [ids, (image, 7)], "sample": Sample(image, "a"),
             "ordered": OrderedDict(x=ids), "moves": moves, "in_place": in_place, "none": None, "text": "s"}
    moved = batch_mover(torch.device("cpu"), non_blocking=True)(batch)
    assert type(moved["pair"]) is Pair and torch.equal(moved["pair"].image, image)
    assert type(moved["list"]) is list and type(moved["list"][1]) is tuple and moved["list"][1][1] == 7
    assert type(moved["sample"]) is Sample and moved["sample"].name == "a"
    assert type(moved["ordered"]) is OrderedDict and torch.equal(moved["ordered"]["x"], ids)
    assert moved["moves"] is moves and moves.to_calls == [torch.device("cpu")]
    assert moved["in_place"] is in_place and in_place.to_calls == [torch.device("cpu")]
    assert moved["none"] is None and moved["text"] == "s"


def test_channels_last_lays_out_floating_4d_and_5d_tensors_only():
    batch = {"image": torch.randn(2, 3, 4, 4), "volume": torch.randn(2, 2, 4, 4, 4), "mask": torch.zeros(2, 1, 4, 4,
             dtype=torch.int64), "flat": torch.randn(2, 8)}
    moved = batch_mover(torch.device("cpu"), channels_last=True)(batch)
    assert moved["image"].is_contiguous(memory_format=torch.channels_last)
    assert not moved["image"].is_contiguous()
    assert moved["volume"].is_contiguous(memory_format=torch.channels_last_3d) and not moved["volume"].is_contiguous()
    assert moved["mask"].is_contiguous() and moved["flat"].is_contiguous()
    assert [t.shape for t in float_leaves(batch)] == [torch.Size([2, 3, 4, 4]), torch.Size([2, 2, 4, 4, 4])]


def test_a_leaf_that_cannot_move_is_named_with_where_it_is_in_the_batch():
    batch = {"image": torch.zeros(2, 3), "meta": [1, np.zeros((2, 5))]}
    with pytest.raises(BatchLeafError) as caught:
        batch_mover(torch.device("cpu"))(batch)
    assert str(caught.value).startswith("batch['meta'][1] is a numpy.ndarray of shape [2, 5], which cannot move to "
                                        "the device: a batch's leaves must be tensors")
    assert "torch.as_tensor" in str(caught.value)


def test_describe_lists_a_batchs_tensors_by_where_they_are():
    batch = {"input_ids": torch.zeros(4, 64, dtype=torch.int64), "pair": (torch.zeros(2, 3), "x")}
    assert describe(batch) == "batch['input_ids'] [4, 64] int64, batch['pair'][0] [2, 3] float32"


def _loss(value=2.0, shape=()):
    return torch.full(shape, value, requires_grad=True) * 1.0


@pytest.mark.parametrize("result,expected", [
    (_loss(2.0), 2.0),
    ({"loss": _loss(3.0), "logits": torch.zeros(2, 5)}, 3.0),  # a Hugging Face ModelOutput, a Lightning dict
    ({"loss_classifier": _loss(1.0), "loss_box_reg": _loss(0.5)}, 1.5),  # torchvision detection: summed
])
def test_a_steps_result_is_read_as_its_loss_in_each_form_it_may_take(result, expected):
    read = loss_reader("workload.step='mypkg.step'")
    assert float(read(result).detach()) == expected
    assert float(read(result).detach()) == expected  # the reader decided on the first result is kept


@pytest.mark.parametrize("result,message", [
    (None, "workload.step='mypkg.step' returned None: return the loss, a scalar tensor, a mapping with a 'loss' "
           "entry, or a mapping of scalar losses (summed)"),
    ((_loss(), _loss()), "workload.step='mypkg.step' returned a tuple: return the loss"),
    (_loss(shape=(2, 3)), "workload.step='mypkg.step' returned a loss of shape [2, 3], not a scalar: reduce it"),
    (torch.tensor(1.0), "workload.step='mypkg.step' returned a loss that does not require grad"),
    ({"loss": None}, "workload.step='mypkg.step' returned a loss['loss'] that is None"),
    ({"logits": torch.zeros(2, 5)}, "workload.step='mypkg.step' returned a mapping with no 'loss' entry, and its "
                                    "'logits' is a tensor of shape [2, 5], not a scalar loss"),
])
def test_a_step_that_returns_no_usable_loss_is_one_line_naming_the_step_and_what_it_returned(result, message):
    with pytest.raises(StepError) as caught:
        loss_reader("workload.step='mypkg.step'")(result)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_channels_last_cannot_act_on_token_ids_and_a_model_without_4d_or_5d_weights():
    ids = {"input_ids": torch.zeros(2, 8, dtype=torch.int64)}
    reason = channels_last_reason(torch.nn.Embedding(10, 4), ids)
    assert reason.startswith("channels_last=true lays out 4-D and 5-D floating tensors; neither the model's "
                             "parameters nor the batch (batch['input_ids'] [2, 8] int64) have one")
    assert channels_last_reason(torch.nn.Conv2d(3, 4, 3), ids) == ""  # the model's weights are laid out
    assert channels_last_reason(torch.nn.Embedding(10, 4), torch.zeros(2, 3, 4, 4)) == ""  # the batch is


def test_the_first_optimizer_of_each_form_configure_optimizers_returns_and_a_note_for_what_is_left_out():
    params = [torch.nn.Parameter(torch.zeros(2))]
    adam, sgd = torch.optim.Adam(params), torch.optim.SGD(params, lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(adam, 10)
    forms = [(adam, []), ([adam, sgd], ["only its first of 2 optimizers is stepped"]),
             (([adam], [scheduler]), [SCHEDULER_NOTE]), ({"optimizer": adam, "lr_scheduler": scheduler},
                                                         [SCHEDULER_NOTE]), ([{"optimizer": adam}], [])]
    for configured, notes in forms:
        said: list[str] = []
        assert first_optimizer(configured, "m", said) is adam and said == notes
    with pytest.raises(StepError, match=r"^m: configure_optimizers\(\) returned None; return an optimizer"):
        first_optimizer(None, "m", [])


def test_a_hugging_face_model_is_told_its_batch_must_be_named_tensors():
    from harness.workload.step.huggingface import hf_batch_check

    hf_batch_check({"input_ids": torch.zeros(2, 4)})
    with pytest.raises(StepError, match=r"^a Hugging Face model takes a batch of named tensors \(model\(\*\*batch\)\): "
                                        r"the loader gave a tuple \(batch\[0\] \[2, 4\] float32\); give a dataset of "
                                        r"dicts"):
        hf_batch_check((torch.zeros(2, 4), 1))
