"""Every knob takes effect: each test looks at what the knob changes, not at the label."""

from types import SimpleNamespace

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from harness import config as config_mod
from harness.workload import knobs
from harness.workload.data import build_dataset, build_loader
from harness.config.workload import builtin
from tests.conftest import TINY_MODEL, tiny_config

TINY_MODEL_KEYS = {k.replace(".", "__"): v for k, v in TINY_MODEL.items()}


def _prepare(**overrides):
    cfg = tiny_config(**overrides)
    return cfg, knobs.prepare(cfg, cfg.workload)


def _train_flops(prep, shape) -> int:
    x = torch.randn(shape).to(memory_format=prep.memory_format)
    counter = FlopCounterMode(display=False)
    with counter:
        prep.model(x).float().sum().backward()
    return counter.get_total_flops()


def test_activation_checkpointing_recomputes_the_forward_in_backward():
    _, plain = _prepare()
    _, ckpt = _prepare(activation_checkpointing=True)
    assert ckpt.checkpointed_units > 0
    shape = (1, 1, 32, 32, 32)
    plain_flops, ckpt_flops = _train_flops(plain, shape), _train_flops(ckpt, shape)
    # Recompute adds (close to) one more forward: training FLOPs grow by 20-50%.
    assert 1.2 < ckpt_flops / plain_flops < 1.5


def test_channels_last_changes_weight_strides_3d():
    _, prep = _prepare(channels_last=True)
    conv = next(m for m in prep.model.modules() if isinstance(m, torch.nn.Conv3d) and m.in_channels > 1)
    assert prep.memory_format is torch.channels_last_3d
    assert conv.weight.is_contiguous(memory_format=torch.channels_last_3d)
    assert not conv.weight.is_contiguous()


def test_channels_last_2d_for_resnet():
    _, prep = _prepare(workload="resnet50", channels_last=True)
    assert prep.model.conv1.weight.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("precision,dtype", [("32", torch.float32), ("bf16-mixed", torch.bfloat16),
                                             ("16-mixed", torch.float16)])
def test_precision_sets_the_autocast_dtype_of_convolutions(precision, dtype):
    _, prep = _prepare(precision=precision)
    conv = next(m for m in prep.model.modules() if isinstance(m, torch.nn.Conv3d))
    with prep.autocast():
        out = conv(torch.randn(1, conv.in_channels, 8, 8, 8))
    assert out.dtype == dtype
    assert (prep.scaler is not None) == (precision == "16-mixed")


def _fake_backends(new_api: bool):
    """torch.backends as torch >= 2.9 (fp32_precision) or an older torch (allow_tf32 only) shapes it."""
    ns = SimpleNamespace
    if new_api:  # PyTorch's defaults: matmuls inherit full FP32, cuDNN convolutions TF32
        return ns(cuda=ns(matmul=ns(fp32_precision="none")),
                  cudnn=ns(fp32_precision="none", conv=ns(fp32_precision="tf32"), rnn=ns(fp32_precision="tf32")))
    return ns(cuda=ns(matmul=ns(allow_tf32=False)), cudnn=ns(allow_tf32=True))


@pytest.mark.parametrize("tf32, expected", [(True, "tf32"), (False, "ieee")])
def test_tf32_uses_the_new_api_where_only_it_exists(tf32, expected):
    backends = _fake_backends(new_api=True)
    flags = knobs.apply_tf32(tf32, backends)
    assert backends.cuda.matmul.fp32_precision == expected
    assert backends.cudnn.fp32_precision == expected  # what inductor's Triton conv templates read
    assert backends.cudnn.conv.fp32_precision == expected  # what cuDNN convolutions use: tf32=false turns them off
    assert backends.cudnn.rnn.fp32_precision == expected
    assert not hasattr(backends.cudnn, "allow_tf32") and not hasattr(backends.cuda.matmul, "allow_tf32")
    assert flags == {"tf32": tf32, "tf32_api": "fp32_precision", "cuda.matmul.fp32_precision": expected,
                     "cudnn.fp32_precision": expected, "cudnn.conv.fp32_precision": expected,
                     "cudnn.rnn.fp32_precision": expected}


@pytest.mark.parametrize("tf32", [True, False])
def test_tf32_uses_the_old_api_on_an_older_torch(tf32):
    backends = _fake_backends(new_api=False)
    flags = knobs.apply_tf32(tf32, backends)
    assert backends.cuda.matmul.allow_tf32 is tf32 and backends.cudnn.allow_tf32 is tf32
    assert flags == {"tf32": tf32, "tf32_api": "allow_tf32", "cuda.matmul.allow_tf32": tf32, "cudnn.allow_tf32": tf32}


def test_tf32_null_leaves_pytorch_defaults_and_records_them():
    backends = _fake_backends(new_api=True)
    flags = knobs.apply_tf32(None, backends)
    assert flags["cudnn.conv.fp32_precision"] == "tf32" and flags["cuda.matmul.fp32_precision"] == "none"


def test_backend_flags_are_set_on_this_torch():
    new_api = hasattr(torch.backends.cuda.matmul, "fp32_precision")
    old = [(torch.backends.cuda.matmul, "allow_tf32"), (torch.backends.cudnn, "allow_tf32")]
    names = [(torch.backends.cuda.matmul, "fp32_precision"), (torch.backends.cudnn, "fp32_precision"),
             (torch.backends.cudnn.conv, "fp32_precision"), (torch.backends.cudnn.rnn, "fp32_precision")] \
        if new_api else old
    before_old, before = [getattr(o, n) for o, n in old], [getattr(o, n) for o, n in names]
    benchmark = torch.backends.cudnn.benchmark
    try:
        flags = knobs.apply_backend_flags(tiny_config(tf32=True, cudnn_benchmark=True))
        assert flags["cudnn.benchmark"] is True and torch.backends.cudnn.benchmark
        assert all(getattr(o, n) in ("tf32", True) for o, n in names)
        assert [getattr(o, n) for o, n in old] == [True, True]  # they read, and agree: torch's compiler reads them
        flags = knobs.apply_backend_flags(tiny_config(tf32=False))
        assert all(getattr(o, n) in ("ieee", False) for o, n in names) and not torch.backends.cudnn.benchmark
        assert [getattr(o, n) for o, n in old] == [False, False]
        assert flags["tf32_api"] == ("fp32_precision" if new_api else "allow_tf32")
    finally:  # in the same order: old flags, then new ones, so no later test reads a mix
        for (o, n), v in [*zip(old, before_old), *zip(names, before)]:
            setattr(o, n, v)
        torch.backends.cudnn.benchmark = benchmark


class _Torch29Flag:
    """One backend's TF32 flags as torch 2.9-2.11 keep them: ``allow_tf32`` (old) writes the old state AND the new
    ``fp32_precision``; ``fp32_precision`` (new) writes only its own; reading ``allow_tf32`` raises when the two
    disagree, as torch's own compiler then finds when it reads the old flag."""

    def __init__(self, old: bool, new: str, children=()):
        self.__dict__.update(_old=old, _new=new, _children=children)

    def __getattr__(self, name):
        if name != "allow_tf32":
            raise AttributeError(name)
        values = {v for v in [self._new, *(c.fp32_precision for c in self._children)] if v != "none"}
        if values - {"tf32" if self._old else "ieee"}:
            raise RuntimeError("you have used mix of the legacy and new APIs to set the TF32 flags")
        return self._old

    def __setattr__(self, name, value):
        if name == "allow_tf32":
            self.__dict__.update(_old=value, _new="tf32" if value else "ieee")
            for child in self._children:
                child.fp32_precision = "none"  # the old setter leaves the children to inherit it
        else:
            self.__dict__["_new" if name == "fp32_precision" else name] = value

    @property
    def fp32_precision(self):
        return self._new


def _torch29_backends():
    ns = SimpleNamespace
    conv, rnn = ns(fp32_precision="tf32"), ns(fp32_precision="tf32")
    cudnn = _Torch29Flag(True, "none", (conv, rnn))
    cudnn.__dict__.update(conv=conv, rnn=rnn)
    return ns(cuda=ns(matmul=_Torch29Flag(False, "none")), cudnn=cudnn)


@pytest.mark.parametrize("tf32, expected", [(True, "tf32"), (False, "ieee")])
def test_tf32_writes_old_flags_then_new_ones_so_both_read_alike_on_torch_2_9(tf32, expected):
    backends = _torch29_backends()
    flags = knobs.apply_tf32(tf32, backends)
    assert backends.cuda.matmul.allow_tf32 is tf32 and backends.cudnn.allow_tf32 is tf32  # no "mix of ... APIs"
    assert [backends.cuda.matmul.fp32_precision, backends.cudnn.fp32_precision, backends.cudnn.conv.fp32_precision,
            backends.cudnn.rnn.fp32_precision] == [expected] * 4
    assert flags == {"tf32": tf32, "tf32_api": "fp32_precision", "cuda.matmul.fp32_precision": expected,
                     "cudnn.fp32_precision": expected, "cudnn.conv.fp32_precision": expected,
                     "cudnn.rnn.fp32_precision": expected}


def test_the_torch_2_9_stand_in_raises_on_new_flags_written_alone():
    """The stand-in above behaves as torch does: the new setters alone leave the old flags unreadable."""
    backends = _torch29_backends()
    for path in (backends.cuda.matmul, backends.cudnn, backends.cudnn.conv, backends.cudnn.rnn):
        path.fp32_precision = "tf32"
    with pytest.raises(RuntimeError, match="mix of the legacy and new APIs"):
        assert backends.cuda.matmul.allow_tf32 is not None  # reading it raises


def test_width_scales_the_channels():
    _, full = _prepare()
    _, half = _prepare(model__width=0.5)
    n = lambda p: sum(t.numel() for t in p.model.parameters())  # noqa: E731
    assert 3.0 < n(full) / n(half) < 4.5  # parameters scale with width squared


def test_deep_supervision_gives_one_output_per_scale():
    _, prep = _prepare(workload="mednext", model__deep_supervision=True)
    outs = prep.model(torch.randn(1, 1, 32, 32, 32))
    assert isinstance(outs, (list, tuple)) and len(outs) == 5
    assert [o.shape[-1] for o in outs] == [32, 16, 8, 4, 2]


@pytest.mark.parametrize("flag", ["fused", "foreach"])
def test_optimizer_implementation_flags_reach_the_optimizer(flag):
    _, prep = _prepare(**{f"optimizer__{flag}": True})
    assert prep.optimizer.defaults[flag] is True


def test_zero_grad_set_to_none():
    for set_to_none, expected_none in ((True, True), (False, False)):
        _, prep = _prepare(**TINY_MODEL_KEYS)  # what the optimizer does with gradients: any model shows it
        prep.model(torch.randn(1, 1, 8)).sum().backward()
        prep.optimizer.zero_grad(set_to_none=set_to_none)
        grad = next(prep.model.parameters()).grad
        assert (grad is None) == expected_none


def test_loader_knobs_reach_the_dataloader():
    cfg = tiny_config(data__num_workers=2, data__prefetch_factor=3, data__persistent_workers=True, batch_size=3)
    loader = build_loader(cfg, build_dataset(cfg, builtin("unet3d")))
    assert (loader.num_workers, loader.prefetch_factor, loader.persistent_workers, loader.batch_size) == (2, 3, True, 3)
    it = iter(loader)
    x, y = next(it)
    assert type(it).__name__ == "_MultiProcessingDataLoaderIter" and len(it._workers) == 2
    assert x.shape == (3, 1, 32, 32, 32) and y.dtype == torch.uint8
    del it


def test_epoch_length_follows_epoch_steps_and_accumulation():
    cfg = tiny_config(batch_size=2, accumulate_grad_batches=3, data__epoch_steps=5)
    assert len(build_dataset(cfg, builtin("unet3d"))) == 2 * 3 * 5


def test_synthetic_volumes_have_labelled_foreground():
    cfg = tiny_config()
    x, y = build_dataset(cfg, builtin("unet3d"))[0]
    assert x.shape == y.shape == (1, 32, 32, 32)
    frac = y.float().mean().item()
    assert 0.01 < frac < 0.9  # some structures, not all
    assert x[y == 1].mean() > x[y == 0].mean() + 0.5  # foreground is brighter


@pytest.mark.slow
def test_compile_wraps_the_model_and_trains():
    _, prep = _prepare(compile="default")
    assert type(prep.model).__name__ == "OptimizedModule"
    prep.model(torch.randn(1, 1, 32, 32, 32)).sum().backward()


def test_cpu_bf16_guard_gives_a_depth_2_conv3d_a_right_weight_gradient():
    """An upstream oneDNN bug gives a bf16 conv3d with input depth 2 a wrong weight gradient
    (docs/cpu-bf16-conv3d.md); guarded, the layer runs in fp32 under bf16 autocast."""
    from harness.workload.knobs import guard_cpu_bf16_conv3d

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv3d(16, 16, 3, padding=1), torch.nn.Conv3d(16, 16, 1))
    x, g = torch.randn(4, 16, 2, 4, 4), torch.randn(4, 16, 2, 4, 4)
    model(x).backward(g)
    reference = model[0].weight.grad.clone()
    model.zero_grad()
    assert guard_cpu_bf16_conv3d(model, tiny_config(precision="bf16-mixed")) == 1  # the 1x1x1 conv is safe
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x)
    out.float().backward(g)
    error = (model[0].conv.weight.grad - reference).norm() / reference.norm()
    assert error < 0.02
    assert guard_cpu_bf16_conv3d(torch.nn.Sequential(torch.nn.Conv3d(1, 1, 3)), tiny_config()) == 0  # fp32: untouched


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_cuda_graph_compile_on_two_devices_is_refused_before_anything_is_built(mode):
    cfg = config_mod.RunConfig(device="cuda", compile=mode, devices=2)
    reason = knobs.cudagraph_multi_device_conflict(cfg)
    assert reason.startswith(f"compile={mode} captures CUDA graphs") and "devices=2" in reason
    with pytest.raises(knobs.KnobNotApplicable, match=f"compile={mode} captures CUDA graphs"):
        knobs.prepare(cfg, cfg.workload, device=torch.device("cpu"))  # refused before a model or a flag is touched
    for fine in (dict(devices=1), dict(compile="default"), dict(device="cpu")):
        assert knobs.cudagraph_multi_device_conflict(config_mod.RunConfig(**{**dict(device="cuda", compile=mode,
                                                                                     devices=2), **fine})) == ""
