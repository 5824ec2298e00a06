"""A workload's own validation step (``val.every_n_steps`` on a user's step: ``workload.val_step``, a LightningModule's
``validation_step``), the skip when there is none, bad validation output caught in the parent (exit 2) or the child;
and a LightningModule under DDP: its steps called through the wrapper, so that the ranks' gradients sync. In-process
on the CPU with a tiny model; the two-rank runs are in the slow tier."""

from __future__ import annotations

import importlib.util
import os
import socket

import pytest
import torch

from harness import config as config_mod
from harness.run.child.measure import train_and_measure
from harness.run.child.outcome import classify
from harness.workload import preflight
from harness.workload.applicability import KnobNotApplicable, not_applicable
from harness.workload.step.interface import StepError
from tests.conftest import REPO, harness_cli, user_module

SLEEP_S = 0.04  # each validation batch's: a pass of 2 batches adds at least 80 ms to its step, however fast the CPU

OWN = f"""
import time

import torch
from torch import nn
from torch.nn import functional as F

SEEN = []  # (model in training mode, grad enabled, batch size, loss requires grad) per validation batch
MODELS = []


def step(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def val_step(model, batch):
    x, y = batch
    loss = F.cross_entropy(model(x), y)
    SEEN.append((model.training, torch.is_grad_enabled(), x.shape[0], loss.requires_grad))
    MODELS.append(model)
    time.sleep({SLEEP_S})
    return {{"loss": loss}}


def val_none(model, batch):
    model(batch[0])


def val_map(model, batch):
    return model(batch[0])


def spied_gpt2(vocab_size):  # the example's Hugging Face model, each forward's mode and grad state noted
    from examples.gpt2_lm import tiny_gpt2

    model = tiny_gpt2(vocab_size=vocab_size, context=16, layers=1, heads=2, width=16)
    model.register_forward_hook(lambda module, args, kwargs, out: SEEN.append(
        (module.training, torch.is_grad_enabled(), tuple(kwargs["input_ids"].shape), bool(out.loss.requires_grad))),
        with_kwargs=True)
    return model


COLLATED = []


def counting_collate(batch):  # the workload's own collate function: counts the batches it makes
    COLLATED.append(len(batch))
    return torch.utils.data.default_collate(batch)


class Rows(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.randn(1, 8), torch.randint(0, 2, (8,))


class Module(nn.Module):  # a LightningModule as the adapter sees it: its methods, no Lightning
    def __init__(self):
        super().__init__()
        self.net = nn.Conv1d(1, 2, 1)

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Validating(Module):  # ... with a validation step that logs and returns nothing, over its own data
    def validation_step(self, batch, batch_idx):
        x, y = batch
        F.cross_entropy(self(x), y)
        SEEN.append((self.training, torch.is_grad_enabled(), x.shape[-1], batch_idx))

    def val_dataloader(self):  # samples of 5 (the training's are 8)
        x, y = torch.randn(12, 1, 5), torch.randint(0, 2, (12, 5))
        return torch.utils.data.DataLoader(list(zip(x, y)), batch_size=3)
"""


@pytest.fixture
def own(tmp_path, monkeypatch):
    yield from user_module(tmp_path, monkeypatch, "ownval7", OWN)


def _cfg(*, lightning: str = "", **overrides) -> config_mod.RunConfig:
    settings = {"workload": "custom", "workload.input_shape": [1, 8], "workload.target": "segmentation",
                "measure.steps": 3, "measure.warmup_steps": 1}
    if lightning:
        settings["workload.lightning_module._target_"] = f"ownval7.{lightning}"
    else:
        settings.update({"workload.model._target_": "torch.nn.Conv1d", "workload.model.in_channels": 1,
                         "workload.model.out_channels": 2, "workload.model.kernel_size": 1,
                         "workload.step._target_": "ownval7.step", "workload.step._partial_": True})
    cfg = config_mod.from_dict({"workload": "custom"})
    for key, value in {**settings, **{k.replace("__", "."): v for k, v in overrides.items()}}.items():
        config_mod.set_key(cfg, key, value)
    return config_mod.resolve(cfg, cuda_available=False)


def _val_step(name: str = "val_step") -> dict:
    return {"workload.val_step._target_": f"ownval7.{name}", "workload.val_step._partial_": True}


def _measure(cfg):
    return train_and_measure(cfg, cfg.workload, lambda *a, **k: None)


def test_a_val_step_runs_every_n_steps_in_eval_mode_without_grad_inside_its_steps_time(own):
    m, _ = _measure(_cfg(**_val_step(), val__every_n_steps=2, val__steps=2))
    # passes after the warm-up's step 0 and after steps 1 and 3 (every 2nd): 3 passes of 2 batches of batch_size 2
    assert own.SEEN == [(False, False, 2, False)] * 6
    assert own.MODELS[-1].training  # back in train mode after each pass
    # the pass runs after the step it follows, so its time is in that step's step_ms (the field the analysis reads)
    assert len(m.step_ms) == 3 and min(m.step_ms[0], m.step_ms[2]) >= 2 * SLEEP_S * 1000
    assert 0.3 < m.loss_first < 1.5


def test_a_lightning_modules_validation_step_runs_over_its_val_dataloader_with_batch_idx_from_0(own):
    m, _ = _measure(_cfg(lightning="Validating", val__every_n_steps=2, val__steps=2))
    # its val_dataloader's samples (of 5), batch_idx 0 and 1 in each of 3 passes; returning None is Lightning's way
    # (its metrics logged), not an error
    assert own.SEEN == [(False, False, 5, 0), (False, False, 5, 1)] * 3
    assert len(m.step_ms) == 3 and m.loss_first > 0
    assert not_applicable(_cfg(lightning="Validating", val__every_n_steps=2)) == ""


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers (the test extra)")
def test_a_hugging_face_model_validates_with_its_own_loss_in_eval_mode_without_grad(own):
    settings = {"workload.model._target_": "ownval7.spied_gpt2", "workload.model.vocab_size": 50,
                "workload.synthetic": "tokens", "workload.num_classes": 50, "workload.input_shape": [1, 16],
                "workload.target": "class", "workload.loss": None}
    cfg = config_mod.from_dict({"workload": "custom"})
    for key, value in {**settings, "measure.steps": 3, "measure.warmup_steps": 1, "batch_size": 2,
                       "val.every_n_steps": 2, "val.steps": 2}.items():
        config_mod.set_key(cfg, key, value)
    m, _ = _measure(config_mod.resolve(cfg, cuda_available=False))
    training = [seen for seen in own.SEEN if seen[0]]
    # 4 training steps (1 warm-up + 3 measured), then after steps 0, 1 and 3 a pass of 2 batches: model(**batch)
    assert len(training) == 4 and all(seen == (True, True, (2, 16), True) for seen in training)
    assert [seen for seen in own.SEEN if not seen[0]] == [(False, False, (2, 16), False)] * 6
    assert len(m.step_ms) == 3 and 3.0 < m.loss_first < 5.0  # ln(50) = 3.9 at random initialisation


def test_the_default_step_s_validation_batches_are_collated_by_the_workload_s_collate(own):
    collate = {"workload.collate._target_": "ownval7.counting_collate", "workload.collate._partial_": True}
    counts = []
    for every in (0, 2):
        own.COLLATED.clear()
        cfg = _cfg(**collate, val__every_n_steps=every, val__steps=2, data__num_workers=0)
        cfg.workload.step = None  # the default step
        _measure(cfg)
        counts.append(len(own.COLLATED))
    assert counts[1] - counts[0] == 3 * 2  # three passes of two batches, through the same collate


def test_no_validation_step_is_skipped_with_how_to_add_one(own):
    assert not_applicable(_cfg(val__every_n_steps=5)) == (
        "val.every_n_steps=5 runs a validation step in eval mode; workload.step='ownval7.step' has none the harness "
        "can call: name workload.val_step._target_=mypkg.train.val_step (val_step(model, batch) -> loss)")
    assert not_applicable(_cfg(val__every_n_steps=5, **_val_step())) == ""
    cfg = _cfg(lightning="Module", val__every_n_steps=5)
    assert not_applicable(cfg) == ""  # only the built module says whether it has a validation_step: the child
    with pytest.raises(KnobNotApplicable, match=r"^val.every_n_steps=5 runs a validation step in eval mode; "
                                                r"workload.lightning_module='ownval7.Module': training_step has none "
                                                r"the harness can call: define validation_step\(batch, batch_idx\) in "
                                                r"the module, or name workload.val_step"):
        _measure(cfg)


@pytest.mark.parametrize("name,message", [
    ("val_none", "workload.val_step='ownval7.val_none' returned None: return the loss, a scalar tensor"),
    ("val_map", "workload.val_step='ownval7.val_map' returned a loss of shape [2, 2, 8], not a scalar: reduce it"),
])
def test_a_val_step_with_no_loss_is_refused_in_the_parent_and_is_an_error_in_the_child(own, name, message):
    with pytest.raises(StepError) as caught:  # synthetic data: the parent runs it on a meta batch
        preflight.check_model_builds(_cfg(**_val_step(name), val__every_n_steps=2))
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)
    preflight.check_model_builds(_cfg(**_val_step(name)))  # no validation pass asked for: never called
    data = {"workload.dataset._target_": "ownval7.Rows", "workload.dataset._partial_": True}
    with pytest.raises(StepError) as caught:  # its own dataset: only the child sees the batches
        _measure(_cfg(**_val_step(name), **data, val__every_n_steps=2))
    assert str(caught.value).startswith(message) and classify(caught.value) == "error"


@pytest.mark.slow  # the command line, as a user runs it: ~10 s on a busy CPU
def test_a_bad_val_step_exits_2_before_anything_runs(own, tmp_path):
    out = harness_cli("run", "workload=custom", "workload.model._target_=torch.nn.Conv1d",
                      "+workload.model.in_channels=1", "+workload.model.out_channels=2",
                      "+workload.model.kernel_size=1", "workload.input_shape=[1,8]", "workload.target=segmentation",
                      "workload.step._target_=ownval7.step", "workload.val_step._target_=ownval7.val_none",
                      "val.every_n_steps=2", f"results_dir={tmp_path / 'results'}", cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "workload.val_step='ownval7.val_none' returned None" in out.stderr and "Traceback" not in out.stderr
    assert list((tmp_path / "results").rglob("*.parquet")) == []  # nothing ran


# ------------------------------------------------------------------------------------------
# a LightningModule under DDP: 2 gloo ranks on this CPU


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, cfg, port: int, out: str) -> None:
    """One rank: the harness's loop on the example's module; its parameters and training batches saved."""
    import torch.distributed as dist

    from examples import lightning_seg3d
    from harness.run.child.ranks import Rank

    torch.set_num_threads(1)  # two ranks on two cores, as the launcher sets OMP_NUM_THREADS
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    modules, seen, step = [], [], lightning_seg3d.SegModule.training_step

    def training_step(self, batch, batch_idx):
        modules.append(self)
        seen.append(float(batch[0].sum()))
        return step(self, batch, batch_idx)

    lightning_seg3d.SegModule.training_step = training_step
    try:
        train_and_measure(cfg, cfg.workload, lambda *a, **k: None, Rank(rank, 2, rank, "gloo"))
        torch.save({"params": [p.detach() for p in modules[-1].parameters()], "seen": seen}, f"{out}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # two spawned ranks, each importing torch and Lightning: about a minute on a busy CPU
@pytest.mark.skipif(importlib.util.find_spec("lightning") is None, reason="needs lightning (the test extra)")
def test_a_lightning_module_on_two_ranks_syncs_its_gradients_through_the_wrapper(tmp_path):
    from harness.commands import hydra_edge

    argv = hydra_edge.with_config_dirs(["--config-dir", str(REPO / "examples" / "conf"), "workload=lightning_seg3d",
                                        "devices=2", "measure.steps=2", "measure.warmup_steps=1",
                                        "val.every_n_steps=2", "val.steps=1", "data.num_workers=0"])
    cfg = config_mod.resolve(config_mod.from_dict(hydra_edge.plain_settings(hydra_edge.compose_settings(argv))),
                             cuda_available=False)
    assert not_applicable(cfg) == ""
    torch.multiprocessing.spawn(_rank_main, args=(cfg, _free_port(), str(tmp_path)), nprocs=2)
    first, second = (torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1))
    assert len(first["seen"]) == 3 and first["seen"] != second["seen"]  # each rank trained on its own batches ...
    for a, b in zip(first["params"], second["params"], strict=True):  # ... and every step applied the same mean
        assert torch.equal(a, b)


@pytest.mark.slow  # the launcher, two ranks and the example: about a minute on a busy CPU
@pytest.mark.skipif(importlib.util.find_spec("lightning") is None, reason="needs lightning (the test extra)")
def test_the_lightning_example_runs_on_two_ranks_with_its_validation_step(results):
    from harness.store import load_runs

    out = harness_cli("run", "--config-dir", "examples/conf", "workload=lightning_seg3d", "devices=2",
                      "measure.steps=2", "measure.warmup_steps=1", "val.every_n_steps=2", f"results_dir={results}")
    assert out.returncode == 0, out.stdout + out.stderr
    (record,) = load_runs(results).itertuples()
    assert (record.status, record.world_size, record.dist_backend) == ("ok", 2, "gloo")
