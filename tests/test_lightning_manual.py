"""A LightningModule that steps its own optimizers (manual optimisation, as a module with two optimizers must in
Lightning 2) is refused with what to write instead, and what it says to write measures: a step returning both
networks' losses over a module holding both networks, one optimizer over them. In-process, on the CPU."""

from __future__ import annotations

import pytest

from harness import config as config_mod
from harness.workload.step.interface import StepError
from tests.conftest import user_module
from tests.test_own_training import _measure

GAN = """
import torch
from torch import nn
from torch.nn import functional as F

UPDATED = []


class Gan(nn.Module):  # a LightningModule of two networks as the adapter sees it: its methods, no Lightning
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False
        self.generator, self.discriminator = nets()["generator"], nets()["discriminator"]

    def training_step(self, batch, batch_idx):
        raise AssertionError("never called: it needs a Trainer's self.optimizers() and self.manual_backward")

    def configure_optimizers(self):
        return [torch.optim.SGD(self.generator.parameters(), lr=0.1),
                torch.optim.SGD(self.discriminator.parameters(), lr=0.1)]


def nets():
    return nn.ModuleDict({"generator": nn.Conv1d(1, 1, 1), "discriminator": nn.Conv1d(1, 2, 1)})


def step(model, batch):
    x, y = batch
    fake = model["generator"](x)
    real_loss = F.cross_entropy(model["discriminator"](x), y)
    fake_loss = F.cross_entropy(model["discriminator"](fake.detach()), torch.zeros_like(y))
    generator_loss = F.cross_entropy(model["discriminator"](fake), torch.ones_like(y))
    return {"discriminator": real_loss + fake_loss, "generator": generator_loss}
"""


def _cfg(**settings) -> config_mod.RunConfig:
    cfg = config_mod.from_dict({"workload": "custom"})
    for key, value in {"workload.input_shape": [1, 8], "workload.target": "segmentation", "measure.steps": 3,
                       "measure.warmup_steps": 1, **settings}.items():
        config_mod.set_key(cfg, key, value)
    return config_mod.resolve(cfg, cuda_available=False)


@pytest.fixture
def gan(tmp_path, monkeypatch):
    yield from user_module(tmp_path, monkeypatch, "gan_module", GAN)


def test_manual_optimisation_is_refused_with_what_to_write_instead(gan):
    from harness.workload import preflight

    cfg = _cfg(**{"workload.lightning_module._target_": "gan_module.Gan"})
    with pytest.raises(StepError) as refused:  # in the parent, before any run: one line, exit 2
        preflight.check_model_builds(cfg)
    with pytest.raises(StepError, match="automatic_optimization=False"):  # and in the child, had it started
        _measure(cfg)
    message = str(refused.value)
    assert "automatic_optimization=False" in message and "\n" not in message
    for advice in ("workload.step", "workload.model", "torch.nn.ModuleDict", "workload.optimizer", "a dict"):
        assert advice in message


def test_what_the_refusal_says_to_write_measures_both_networks(gan):
    m, _ = _measure(_cfg(**{"workload.model._target_": "gan_module.nets",
                            "workload.step._target_": "gan_module.step", "workload.step._partial_": True}))
    assert len(m.step_ms) == 3 and m.loss_first > 0
