"""The measured loop: raw samples kept, warm-up apart, data wait split from compute, faults."""

import gc
import json
import math
import time
from multiprocessing.util import get_temp_dir
from pathlib import Path

import pytest
import torch

from harness.run.child import hooks, measure
from harness.run.child.measure import model_flops_per_sample, train_and_measure
from harness.run.child.outcome import NonFiniteLoss, classify
from harness.run.child.ranks import Rank
from harness.run.child.stopping import (MIN_BLOCKS, StoppingRule, WarmupRule, drain_blocks, is_steady, mean_is_known,
                                          rule_for, t975)
from harness.run.child.summary import Extras, per_sample, summarize
from harness.config.workload import builtin
from tests.conftest import tiny_config, tiny_model_config


def _measure(**overrides):
    # the tiny model: these tests are about the loop around the model; a built-in would only make its steps slower
    cfg = tiny_model_config(**overrides)
    m, extras = train_and_measure(cfg, cfg.workload, lambda *a, **k: None)
    return cfg, m, extras


def test_warmup_and_measured_steps_are_kept_apart_with_raw_samples():
    before = time.time()
    cfg, m, extras = _measure(measure__steps=4, measure__warmup_steps=2)
    after = time.time()
    assert len(m.warmup_ms) == 2 and len(m.step_ms) == 4 and len(m.data_wait_ms) == 4
    assert all(t > 0 for t in m.step_ms)
    assert m.measured_s * 1000 >= 0.99 * sum(m.step_ms)
    assert extras.peak_host_rss_bytes > 50e6  # torch alone is bigger than that
    out = summarize(m, extras, per_sample(cfg, flops=1e9, gpu_name=""), compiled=False)
    assert out.samples_per_s == pytest.approx(4 * cfg.batch_size / m.measured_s)
    # the window's place in time (to line it up with other processes): it opened after the warm-up began and
    # closed before the measurement returned
    assert before < out.window_start_unix and out.window_start_unix + m.measured_s <= after + 1e-3
    assert out.window_start_unix - before >= sum(m.warmup_ms) / 1000.0 * 0.99
    assert out.units_per_s == pytest.approx(out.samples_per_s)  # the custom workload's unit: a sample
    assert per_sample(tiny_config(), None, "").units == 32**3  # the UNet's: the voxels of its patch, 32^3 on a CPU
    assert out.flops_per_sample == 1e9 and out.mfu is None  # no peak known for a CPU: never guessed
    # on a CPU there is no VRAM to report (None, not 0), and the backend flags applied are stored
    assert out.peak_vram_bytes is None and out.peak_vram_reserved_bytes is None
    assert out.warmup_peak_vram_bytes is None and out.gpu_sample_note == ""
    assert json.loads(out.backend_flags)["cudnn.benchmark"] is False
    assert out.compile_s is None and out.world_size == 1 and out.step_ms == m.step_ms


def test_slowdown_adds_its_delay_to_every_step():
    _, slow, _ = _measure(measure__steps=3, debug__slowdown_ms=300.0)
    assert min(slow.step_ms + slow.warmup_ms) >= 300.0


def test_a_slow_loader_shows_as_data_wait():
    # 0 workers: the main process reads every item of the batch, so each step waits out its items' read latency
    cfg, slow, extras = _measure(batch_size=2, data__read_latency_ms=50.0)
    frac = summarize(slow, extras, per_sample(cfg, None, ""), compiled=False).data_wait_frac
    assert len(slow.data_wait_ms) == len(slow.step_ms) == 3
    # the two items' sleeps never end early, and they land in the wait, inside the step: however busy the machine
    assert all(2 * 50.0 <= w <= s for w, s in zip(slow.data_wait_ms, slow.step_ms))
    # the share reported is the window's waiting over the window, from the raw samples (a busy machine stretches
    # both; the share's meaning does not depend on it)
    assert frac == pytest.approx(sum(slow.data_wait_ms) / (slow.measured_s * 1000.0))
    assert frac >= 3 * 2 * 50.0 / (slow.measured_s * 1000.0) - 1e-9


def test_accumulation_steps_the_optimizer_once_per_n_micro_batches_with_their_gradients_summed(monkeypatch):
    import harness.run.child.measure as measure_mod

    accum, real = 3, measure_mod.prepare
    inputs, targets, steps, checking = [], [], [], []

    def prepare(*args, **kwargs):
        prep = real(*args, **kwargs)
        model, loss_fn, step = prep.model, prep.loss_fn, prep.optimizer.step
        model.register_forward_pre_hook(lambda module, args: None if checking else inputs.append(args[0].clone()))

        def recording_loss(out, y):
            if not checking:
                targets.append(y.clone())
            return loss_fn(out, y)

        def checked_step(*a, **k):
            # the loop's micro-batches since the last step, each loss divided by N: their gradients added up must be
            # what the parameters hold when the optimizer steps
            batches = list(zip(inputs, targets))[sum(n for n, _ in steps):]
            params = [p for p in model.parameters() if p.requires_grad]
            expected = [torch.zeros_like(p) for p in params]
            checking.append(True)
            for x, y in batches:
                for total, grad in zip(expected, torch.autograd.grad(loss_fn(model(x), y) / accum, params)):
                    total += grad
            checking.clear()
            steps.append((len(batches), all(torch.allclose(p.grad, e, rtol=1e-4, atol=1e-7)
                                             for p, e in zip(params, expected))))
            return step(*a, **k)

        prep.loss_fn, prep.optimizer.step = recording_loss, checked_step
        return prep

    monkeypatch.setattr(measure_mod, "prepare", prepare)
    _, m, _ = _measure(accumulate_grad_batches=accum, batch_size=2, measure__steps=2, measure__warmup_steps=1)
    assert m.samples_per_step == 2 * accum and len(m.step_ms) == 2
    assert steps == [(accum, True)] * 3  # the warm-up's and the 2 measured: one optimizer step per 3 micro-batches
    assert len(inputs) == len(targets) == 3 * accum
    assert not torch.equal(inputs[0], inputs[1])  # different micro-batches: their sum is not one batch's gradient


def _hook_names(**overrides) -> tuple[list[str], str, list[str]]:
    cfg = tiny_model_config(**overrides)
    loop = measure._set_up(cfg, cfg.workload, Rank(), lambda *a, **k: None)
    try:
        work = hooks.step_hooks(loop, [], 0)
    finally:
        loop.release()
    name = lambda fn: fn.__qualname__.split(".")[0]  # noqa: E731
    return [name(h) for h in work.before], name(work.micro), [name(h) for h in work.after]


def test_per_step_work_is_one_hook_per_knob_that_acts_built_before_the_loop_in_one_order():
    assert _hook_names() == (["_zero_grad"], "_train_micro", ["_optimizer_step", "_log_loss"])
    assert _hook_names(memory_cleanup_every_n_steps=2, debug__fault="oom", debug__fault_step=50,
                       debug__slowdown_ms=1.0) == (
        ["_zero_grad"], "_train_micro", ["_optimizer_step", "_periodic", "_fault", "_sleep", "_log_loss"])
    assert _hook_names(measure__mode="loader") == ([], "_draw_only", [])


def test_nan_fault_is_detected_as_nan():
    with pytest.raises(NonFiniteLoss) as info:
        _measure(debug__fault="nan", debug__fault_step=1)
    assert classify(info.value) == "nan"


def test_oom_fault_raises_a_real_out_of_memory_error():
    with pytest.raises(RuntimeError) as info:
        _measure(debug__fault="oom", debug__fault_step=0)
    assert classify(info.value) == "oom"


def test_flops_are_counted_per_sample_forward_and_backward():
    cfg = tiny_config(workload="resnet50", data__patch_size=[224, 224])
    flops = model_flops_per_sample(cfg, builtin("resnet50"))
    # torchvision: 4.09 GMAC = 8.18 GFLOP forward; training is ~3x forward.
    assert flops == pytest.approx(3 * 8.18e9, rel=0.03)


def test_log_every_n_steps_sets_how_often_the_loss_is_synced(monkeypatch):
    calls = []
    real_item = torch.Tensor.item

    def counting_item(self):
        calls.append(1)
        return real_item(self)

    monkeypatch.setattr(torch.Tensor, "item", counting_item)
    counts = {}
    for every in (50, 1):
        calls.clear()
        _measure(measure__steps=4, measure__warmup_steps=1, log_every_n_steps=every)
        counts[every] = len(calls)
    # 5 steps: every=1 reads the loss after each of them; every=50 only after step 0 and at the end.
    assert counts[1] - counts[50] == 4


def test_each_logging_step_writes_its_step_loss_and_learning_rate_as_a_line_of_a_metrics_log():
    import re

    from harness.run.child.measure import measured_run

    cfg = tiny_model_config(measure__steps=4, measure__warmup_steps=1, log_every_n_steps=2)
    with measured_run(cfg, cfg.workload, lambda *a, **k: None) as run:
        path = run.loop.metrics.path
        # in the process's scratch folder: a harness run's is in its job folder, so that a killed run leaves nothing
        assert path.name == "metrics.log" and path.parent.parent == Path(get_temp_dir())
        lines = path.read_text().splitlines()
    assert not path.parent.exists()  # removed with the loop: a forked run's exit runs no handler
    found = [re.fullmatch(r"\S+ \S+ INFO step=(\d+) loss=(\S+) lr=(\S+)", line) for line in lines]
    assert all(found), lines
    # 5 steps (1 warm-up + 4): step 0, then every second one (steps 1 and 3); nothing on the others
    assert [int(f[1]) for f in found] == [0, 1, 3]
    losses = [float(f[2]) for f in found]
    assert all(math.isfinite(v) and v > 0 for v in losses) and losses[0] == pytest.approx(run.m.loss_first)
    assert [float(f[3]) for f in found] == [1e-3] * 3  # the custom workload's AdamW lr


def test_steps_auto_stops_at_its_step_cap():
    # the first check of the stopping rule comes after 10 measured steps: a cap of 3 is reached first, on any machine
    cfg, m, _ = _measure(measure__steps="auto", measure__max_steps=3)
    assert cfg.measure.steps == "auto" and len(m.step_ms) == 3 and len(m.data_wait_ms) == 3
    assert summarize(m, Extras(), per_sample(cfg, None, ""), compiled=False).measured_steps == 3


def test_steps_auto_stops_at_its_time_cap():
    # no step takes less than 1 ns: the window closes after its first measured step
    _, m, _ = _measure(measure__steps="auto", measure__max_steps=50, measure__max_s=1e-9)
    assert len(m.step_ms) == 1 and len(m.warmup_ms) == 1


def test_the_auto_stopping_rule_wants_the_mean_within_one_percent():
    assert not mean_is_known([100.0] * 9, 0.01)  # too few steps to tell, however steady
    assert mean_is_known([100.0, 101.0] * 5, 0.01)  # sd 0.53: half-width 0.38 ms, 0.4% of 100.5 ms
    assert not mean_is_known([100.0, 110.0] * 5, 0.01)  # sd 5.3: half-width 3.8 ms, 3.6%
    assert t975(9) == pytest.approx(2.2622, abs=0.005) and t975(1000) == pytest.approx(1.9623, abs=1e-4)


def _bimodal(steps: int, first_step: int, every: int, rng) -> list[float]:
    """Host step times of a CUDA loop: 2 ms to enqueue a step, and the whole queue's device time (here 100 ms a
    step since the last drain) at the step that reads the loss, every ``every`` steps; 1% noise on the device."""
    times, queued = [], 0.0
    for step in range(first_step, first_step + steps):
        queued += 100.0 * (1 + 0.01 * rng.standard_normal())
        drain = (step + 1) % every == 0
        times.append(2.0 + (queued if drain else 0.0))
        queued = 0.0 if drain else queued - 2.0
    return times


def test_steps_auto_on_cuda_judges_the_blocks_that_end_in_a_drain():
    import numpy as np

    rng = np.random.default_rng(0)
    times = _bimodal(1000, first_step=10, every=50, rng=rng)
    # single steps: enqueue-only ones, then a drain; their mean is never known to 1%, however many
    assert not mean_is_known(times, 0.01)
    blocks = drain_blocks(times, first_step=10, block=50)
    assert len(blocks) == 19  # the 40 steps before the first drain (step 49) are in no block
    assert all(b == pytest.approx(100.0, rel=0.01) for b in blocks)  # each block: the device's pace, in full
    assert drain_blocks(times[:40], 10, 50) == [] and len(drain_blocks(times[:140], 10, 50)) == 2
    rule = rule_for(tiny_config(measure__steps="auto", measure__warmup_steps=10).measure, "cuda", log_every=50)
    assert (rule.block, rule.first_step, rule.first_check) == (50, 10, 40 + MIN_BLOCKS * 50)
    assert not rule.satisfied(times[:40 + 4 * 50])  # 4 blocks: too few to tell
    assert rule.satisfied(times[:rule.first_check])
    # on a CPU, and on CUDA reading the loss every step, the steps themselves are judged
    assert rule_for(tiny_config(measure__steps="auto").measure, "cpu", log_every=50).block == 1
    assert rule_for(tiny_config(measure__steps="auto").measure, "cuda", log_every=1).block == 1
    assert StoppingRule(steps=10).satisfied([100.0, 101.0] * 5)


def test_steps_is_a_whole_number_or_auto():
    from harness import config as config_mod

    cfg = config_mod.RunConfig()
    for value, expected in (("auto", "auto"), ("AUTO", "auto"), ("20", 20), (20, 20)):
        config_mod.set_key(cfg, "measure.steps", value)
        assert cfg.measure.steps == expected
    for bad in ("many", "2.5"):
        with pytest.raises(ValueError, match="whole number or auto"):
            config_mod.set_key(cfg, "measure.steps", bad)
    with pytest.raises(ValueError, match="must be a positive number"):
        tiny_config(measure__steps="auto", measure__max_steps=0)


def test_warmup_steps_is_a_whole_number_or_auto_and_a_number_still_hashes_as_before():
    from harness import config as config_mod

    cfg = config_mod.RunConfig()
    for value, expected in (("auto", "auto"), ("5", 5), (5.0, 5)):
        config_mod.set_key(cfg, "measure.warmup_steps", value)
        assert cfg.measure.warmup_steps == expected
    with pytest.raises(ValueError, match="measure.warmup_steps='often' is not valid: use a whole number or auto"):
        config_mod.set_key(cfg, "measure.warmup_steps", "often")
    assert config_mod.config_hash(tiny_config(measure__warmup_steps="3")) == \
        config_mod.config_hash(tiny_config(measure__warmup_steps=3))
    assert config_mod.config_hash(tiny_config(measure__warmup_steps="auto")) != \
        config_mod.config_hash(tiny_config(measure__warmup_steps=3))


def test_the_warmup_rule_waits_for_two_steady_blocks_after_the_first_step():
    rule = WarmupRule(block=3, tolerance=0.05, max_steps=50, max_s=60.0)
    settling = [900.0, 300.0, 200.0, 150.0, 120.0, 110.0, 104.0, 101.0, 100.0, 100.0, 99.0, 100.0]
    done_at = next(n for n in range(1, len(settling) + 1) if rule.done(settling[:n]))
    # done at the first step count whose last two blocks of 3 have medians within 5%, and not before
    assert done_at >= rule.min_steps == 7 and is_steady(settling[:done_at], 3, 0.05)
    assert not is_steady(settling[:done_at - 1], 3, 0.05)
    assert rule.done([100.0] * 7) and not rule.done([100.0] * 6)  # never fewer than 2 blocks + the first
    assert rule.done([100.0, 20000.0] * 4) and not rule.done([100.0, 200.0] * 4)  # not steady, but past its 60 s
    assert rule.done([100.0, 300.0] * 25)  # or its step cap
    assert is_steady([100.0, 95.0, 104.0, 100.0] * 2, 4, 0.05)  # medians, not single steps


def test_warmup_auto_warms_up_until_steady_and_records_how_many_it_took(monkeypatch):
    # a steady sleep in every step, blocks of two: steady after 5 steps (however busy the machine), at most 8
    monkeypatch.setattr(measure, "warmup_rule_for", lambda m: WarmupRule(block=2, tolerance=0.5, max_steps=8))
    markers = []
    cfg = tiny_config(measure__warmup_steps="auto", measure__steps=2, debug__slowdown_ms=200.0)
    m, extras = train_and_measure(cfg, cfg.workload, lambda phase, **info: markers.append((phase, info)))
    assert 5 <= len(m.warmup_ms) <= 8 and len(m.step_ms) == 2
    assert dict(markers)["warmup"]["steps"] == "auto"
    assert summarize(m, extras, per_sample(cfg, None, ""), compiled=False).warmup_steps == len(m.warmup_ms)


def test_the_loaders_queue_counts_as_filled_until_its_batches_are_eaten_or_it_runs_dry():
    from harness.run.child.stopping import QUEUE_MAX_STEPS, still_queued

    slow_first = [900.0, 5.0, 5.0]  # a compile step, then two steps served from the queue
    assert still_queued(4, 1, slow_first, [0.0] * 3)  # 2 of 4 queued batches eaten since the slowest step
    assert not still_queued(4, 1, slow_first + [5.0, 5.0], [0.0] * 5)  # all 4
    assert not still_queued(4, 2, slow_first, [0.0] * 3)  # 2 micro-batches a step: 2 steps eat 4
    paced = [900.0, 5.0, 60.0]  # the second step waited for the loader: 55 ms of 60
    assert not still_queued(4, 1, paced, [0.0, 1.0, 55.0])  # the queue ran dry
    # 3 workers in step: the dry step took a wave's first batch; its other 2 are eaten too, then the window opens
    assert still_queued(6, 1, paced, [0.0, 1.0, 55.0], workers=3)
    assert still_queued(6, 1, paced + [5.0], [0.0, 1.0, 55.0, 1.0], workers=3)
    assert not still_queued(6, 1, paced + [5.0, 5.0], [0.0, 1.0, 55.0, 1.0, 1.0], workers=3)
    assert not still_queued(6, 2, paced + [5.0], [0.0, 1.0, 55.0, 1.0], workers=3)  # 2 micro-batches a step
    assert still_queued(4, 1, paced, [0.0, 1.0, 7.0])  # 12% of its step: the step's own work, not the queue
    assert still_queued(4, 1, [900.0, 1.2, 4.0], [0.0, 0.8, 3.5])  # a tiny step's slow hand-over: not dry
    assert still_queued(4, 1, [900.0, 20.0, 40.0], [0.0, 15.0, 30.0])  # a big batch's hand-over, twice as slow
    assert still_queued(4, 1, slow_first, [800.0, 0.0, 0.0])  # the slowest step's own wait (the first batch): no
    assert not still_queued(0, 1, slow_first, [0.0] * 3)  # no workers, no queue
    assert not still_queued(4, 1, [], [])  # no warm-up asked for
    assert still_queued(QUEUE_MAX_STEPS, 1, slow_first, [0.0] * 3)  # a queue of up to 32 steps is eaten
    assert not still_queued(QUEUE_MAX_STEPS + 1, 1, slow_first, [0.0] * 3)  # a longer one is not: none of it
    assert still_queued(2 * QUEUE_MAX_STEPS, 2, slow_first, [0.0] * 3)  # 32 steps of 2 micro-batches
    assert still_queued(4, 1, [5.0, 900.0, 5.0], [0.0] * 3)  # counted from the slowest step, not the first
    # ... of the steps the warm-up asked for: an epoch's start while the queue is eaten (slower still, as its workers
    # start again) does not start the count again
    eating = [900.0, 5.0, 5.0, 1500.0, 5.0]
    assert not still_queued(4, 1, eating, [0.0, 0.0, 0.0, 0.0, 0.0], asked=1)
    assert still_queued(4, 1, eating, [0.0] * 5)  # (counted from it, were it asked for)


@pytest.mark.parametrize("eat_queue", [True, False])
def test_a_window_after_a_slow_warmup_step_opens_at_the_loaders_pace_not_on_its_queue(monkeypatch, eat_queue):
    # a compile-like first step (2 s) while 2 workers, each 100 ms an item, queue 2 batches each; then a step of a
    # few ms: data-bound. Sleeps, not work: the same on a busy machine (2 s leave the workers' start and their four
    # items room on a machine many times over-subscribed).
    real, calls = measure.forward_backward, []

    def first_slow(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            time.sleep(2.0)
        return real(*args, **kwargs)

    monkeypatch.setattr(measure, "forward_backward", first_slow)
    if not eat_queue:  # the window opened right after the asked-for warm-up, as it did before
        monkeypatch.setattr(measure, "still_queued", lambda *args: False)
    cfg = tiny_model_config(measure__steps=6, data__num_workers=2, data__prefetch_factor=2,
                            data__read_latency_ms=100.0, batch_size=1)
    m, _ = train_and_measure(cfg, cfg.workload, lambda phase, **info: None)
    # at the loader's pace, 2 workers give a batch each every 100 ms: 4 steps wait ~200 ms, never less than 100
    # (sleeps); from the queue, a batch's hand-over each (a ms or so; under 100 for four even on a busy machine)
    first_four_wait_ms = sum(m.data_wait_ms[:4])
    if eat_queue:
        # the queued batches (4), or fewer once a step found the queue dry; a dry step eats the rest of its wave too
        # (workers - 1 = 1 more): on a busy machine the workers may not have queued all four in the slow step
        assert 2 <= len(m.warmup_ms) <= 1 + 4 + 1
        assert m.queue_warmup_steps == len(m.warmup_ms) - 1
        assert first_four_wait_ms > 100.0
    else:
        assert len(m.warmup_ms) == 1 and first_four_wait_ms < 100.0 and m.queue_warmup_steps == 0


class _WatchOutput(torch.nn.Module):
    """A loss that notes, during backward, whether anyone still holds the model's output."""

    def __init__(self):
        super().__init__()
        self.held = []

    def forward(self, out, y):
        import weakref

        ref = weakref.ref(out)
        out.register_hook(lambda grad: self.held.append(ref() is not None))
        return out.float().mean()


@pytest.mark.parametrize("visualize, held", [(0, False), (1, True)])
def test_the_loop_lets_go_of_the_output_before_backward_unless_a_knob_reads_it(monkeypatch, visualize, held):
    # a hand-written loss_fn(model(x), y) holds no reference to the output in backward; neither does the loop,
    # unless visualize_every_n_steps (or another after-step knob) reads it after the step
    import harness.run.child.measure as measure_mod

    real, watch = measure_mod.prepare, _WatchOutput()

    def prepare(*args, **kwargs):
        prep = real(*args, **kwargs)
        prep.loss_fn = watch
        return prep

    monkeypatch.setattr(measure_mod, "prepare", prepare)
    monkeypatch.setattr(torch, "save", lambda obj, path: None)
    cfg = tiny_model_config(measure__steps=2, measure__warmup_steps=1, visualize_every_n_steps=visualize)
    train_and_measure(cfg, cfg.workload, lambda *a, **k: None)
    assert watch.held == [held] * 3


class _Token:
    """Kept by a graph node's context for as long as the graph lives (not a tensor: backward does not free it)."""


class _MarkGraph(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, token):
        ctx.token = token
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _WatchGraph(torch.nn.Module):
    """A loss whose graph holds a token: at each call, whether the previous step's graph is still alive."""

    def __init__(self):
        super().__init__()
        self.previous, self.alive = None, []

    def forward(self, out, y):
        import weakref

        if self.previous is not None:
            self.alive.append(self.previous() is not None)
        token = _Token()
        self.previous = weakref.ref(token)
        return _MarkGraph.apply(out.float().mean(), token)


def test_a_steps_graph_is_let_go_when_the_step_ends_and_the_loss_kept_is_its_value(monkeypatch):
    # a trainer keeps a detached copy of the step's loss (Lightning's loop); holding the loss with its graph kept the
    # graph alive through the next step's forward and backward, which a plain script's step does not
    import harness.run.child.measure as measure_mod

    real, watch, closing = measure_mod.prepare, _WatchGraph(), []

    def prepare(*args, **kwargs):
        prep = real(*args, **kwargs)
        prep.loss_fn = watch
        return prep

    real_close = measure_mod._close_window
    monkeypatch.setattr(measure_mod, "prepare", prepare)
    monkeypatch.setattr(measure_mod, "_close_window", lambda loop, window, loss, progress: (
        closing.append(loss), real_close(loop, window, loss, progress))[1])
    cfg = tiny_model_config(measure__steps=3, measure__warmup_steps=2)
    m, _ = train_and_measure(cfg, cfg.workload, lambda *a, **k: None)
    assert watch.alive == [False] * 4  # at each of the 4 steps after the first, the previous step's graph is gone
    (loss,) = closing
    assert loss.grad_fn is None and not loss.requires_grad and m.loss_last == pytest.approx(float(loss))


def test_cudagraph_skips_are_read_from_inductors_counter_in_modes_that_capture_graphs():
    from torch._dynamo.utils import counters

    from harness.run.child.compiled import cudagraph_skips

    cuda, cpu = torch.device("cuda"), torch.device("cpu")  # a device object needs no GPU
    before = counters["inductor"]["cudagraph_skips"]
    counters["inductor"]["cudagraph_skips"] = 2  # as Inductor counts a graph it would not capture
    try:
        assert cudagraph_skips("reduce-overhead", cuda) == 2 and cudagraph_skips("max-autotune", cuda) == 2
        assert cudagraph_skips("default", cuda) is None and cudagraph_skips("reduce-overhead", cpu) is None
    finally:
        counters["inductor"]["cudagraph_skips"] = before
    _, _, extras = _measure()
    assert extras.cudagraph_skips is None and extras.gpu_sm_active_pct is None and extras.gpu_sample_note == ""


def test_the_window_opens_on_a_collected_heap(monkeypatch):
    """The set-up's debt to the cyclic collector is paid in the warm-up: a full collection after the asked-for
    warm-up steps and before the window's marker (where a full collection falls otherwise depends on the process)."""
    events: list[str] = []

    def on_collect(phase, info):
        if phase == "start" and info["generation"] == 2:
            events.append("full collection")

    cfg = tiny_model_config(measure__steps=3, measure__warmup_steps=2)
    gc.callbacks.append(on_collect)
    try:
        train_and_measure(cfg, cfg.workload, lambda phase, **info: events.append(phase))
    finally:
        gc.callbacks.remove(on_collect)
    window = events.index("measure")
    assert events.index("warmup") < window and "full collection" in events[events.index("warmup"):window]


def _window_faults(monkeypatch, pages: int) -> float:
    """The record's minor page faults a measured step of the tiny model, each loss call first writing ``pages`` fresh
    pages (an anonymous mapping of its own, small pages: the kernel maps and zero-fills each on its first write)."""
    import contextlib
    import mmap

    import harness.run.child.measure as measure_mod

    real = measure_mod.prepare

    def prepare(*args, **kwargs):
        prep = real(*args, **kwargs)
        loss_fn = prep.loss_fn

        def touching(*a):
            if pages:
                with mmap.mmap(-1, pages * mmap.PAGESIZE) as fresh:
                    with contextlib.suppress(OSError):  # a kernel without huge pages has small pages only
                        fresh.madvise(mmap.MADV_NOHUGEPAGE)
                    for offset in range(0, len(fresh), mmap.PAGESIZE):
                        fresh[offset] = 1
            return loss_fn(*a)

        prep.loss_fn = touching
        return prep

    monkeypatch.setattr(measure_mod, "prepare", prepare)
    cfg = tiny_model_config(measure__steps=3, measure__warmup_steps=2)
    m, extras = train_and_measure(cfg, cfg.workload, lambda *a, **k: None)
    return summarize(m, extras, per_sample(cfg, None, ""), compiled=False).window_minor_faults_per_step


def test_the_record_counts_the_windows_minor_page_faults_a_step(monkeypatch):
    # a count, not a time: 4,096 more pages zero-filled a step show as ~4,096 more faults a step, whatever the load
    plain = _window_faults(monkeypatch, 0)
    touched = _window_faults(monkeypatch, 4096)
    assert 0 <= plain < 512 and touched - plain == pytest.approx(4096, abs=256)
