"""FSDP2's knobs (``lm.fsdp_*``): named and checked before anything runs, skipped where FSDP2 does not run, hashed
only when set, and passed to ``fully_shard`` (a one-rank gloo group here; the ``fsdp_knobs`` ladder runs them on
two devices)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn

from harness.config import ladder as ladder_mod
from harness.config.identity import measured_settings
from harness.workload import lm_knobs
from harness.workload.applicability import not_applicable
from tests.test_lm import gpt_config


@pytest.mark.parametrize("setting, message", [
    ({"lm__fsdp_mixed_precision": "fp8"}, r"unknown lm.fsdp_mixed_precision 'fp8'. Valid choices: bf16, none"),
    ({"lm__fsdp_prefetch": -1}, r"lm.fsdp_prefetch=-1 must be 0 \(FSDP2's own prefetch\)"),
])
def test_bad_fsdp_knobs_are_refused_naming_the_choices(setting, message):
    with pytest.raises(ValueError, match=message):
        gpt_config(**setting)


def test_an_fsdp_knob_without_fsdp_is_skipped_and_with_it_acts_on_two_devices():
    assert not_applicable(gpt_config(lm__fsdp_prefetch=2, lm__fsdp_mixed_precision="bf16")) == \
        "lm.fsdp_mixed_precision=bf16, lm.fsdp_prefetch=2: a knob of FSDP2, and lm.fsdp=false runs DDP"
    assert not_applicable(gpt_config(devices=2, lm__fsdp=True, lm__fsdp_reshard_after_forward=False)) == ""
    assert not any(k.startswith("lm.fsdp_") for k in measured_settings(gpt_config()))  # defaults: hashes as before
    ladder = ladder_mod.load("fsdp_knobs")
    assert [r.change("smoke") for r in ladder.rungs][1:] == [
        "lm.fsdp_reshard_after_forward=false", "lm.fsdp_mixed_precision=bf16", "lm.fsdp_prefetch=1",
        "lm.fsdp_prefetch=2"]


@pytest.fixture
def one_rank():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_the_knobs_reach_fully_shard(one_rank):
    from torch.distributed.tensor import DTensor

    torch.manual_seed(0)
    kept = lm_knobs.apply_fsdp(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4)), (nn.Linear,),
                               reshard_after_forward=False, mixed_precision="bf16", prefetch=1)
    out = kept(torch.randn(2, 4))
    assert out.dtype == torch.bfloat16  # computed in the policy's parameter dtype
    assert not isinstance(kept[0].weight, DTensor)  # gathered after the forward, kept for the backward
    out.float().sum().backward()
    assert kept[0].weight.grad.dtype == torch.float32  # sharded gradients back in the parameters' dtype
    default = lm_knobs.apply_fsdp(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4)), (nn.Linear,))
    assert default(torch.randn(2, 4)).dtype == torch.float32 and isinstance(default[0].weight, DTensor)
