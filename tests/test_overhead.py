"""benchmarks/overhead.py (its parts in benchmarks/overhead_parts/): its verdict never claims more than its rounds
show, its in-process loop-cost and hook-cost checks run the harness's real measuring loop, and its command line
runs as the docs print it."""

import math
import subprocess
import sys

import pytest
import torch

from tests.conftest import REPO

sys.path.append(str(REPO / "benchmarks"))  # where benchmarks/overhead.py finds its parts and user_script.py

from overhead_parts import as_users, cli, common, fresh, hook_cost, inproc, plain, stats  # noqa: E402
import user_script  # noqa: E402


@pytest.fixture(autouse=True)
def one_thread():
    """Each test here trains a tiny model for a few steps: on one thread, so that a step takes a fraction of a
    millisecond even on a loaded machine (two threads on two busy CPUs spin for tens of milliseconds a step)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_the_median_band_ranks_rounds_and_holds_the_median():
    mid, low, high = stats.median_band([0.97, 0.99, 1.0, 1.01, 1.03, 0.98, 1.02])
    assert (mid, low, high) == (1.0, 0.97, 1.03)  # 7 rounds: the 95% band runs from the lowest to the highest
    twelve = [0.922, 0.950, 0.958, 0.965, 0.974, 0.979, 1.006, 1.010, 1.011, 1.032, 1.034, 1.035]
    assert stats.median_band(twelve)[1:] == (0.958, 1.032)  # 12 rounds: the 3rd to the 10th
    assert stats.median_band([1.0] * 6) == (1.0, 1.0, 1.0)


@pytest.mark.parametrize("low, high, rounds, says", [
    (0.995, 1.01, 6, ">= 0.99 shown"),
    (0.995, 1.01, 5, "no verdict from 5 round(s) (at least 6)"),  # 5 rounds give no 95% band of the median
    (0.95, 0.985, 6, "below 0.99"),
    (0.90, 1.10, 6, "inconclusive"),
    (0.995, 1.01, 2, "no verdict from 2 round(s)"),  # two agreeing rounds are no evidence
])
def test_the_verdict_follows_the_band_and_wants_six_rounds(low, high, rounds, says):
    assert stats.verdict(low, high, rounds).startswith(says)


def test_the_loop_cost_times_the_harness_loop_against_the_plain_one_in_this_process(monkeypatch):
    # what the cost is depends on the machine and its load: checked here is how it is made, never its size
    from harness.run.child import measure

    calls, real_measure, real_plain = [], measure.train_and_measure, plain.time_plain

    def harness_side(cfg, *args, **kwargs):
        m, extras = real_measure(cfg, *args, **kwargs)
        calls.append(("harness", m.measured_s / len(m.step_ms), len(m.step_ms)))
        return m, extras

    def plain_side(cfg, *args, **kwargs):
        seconds = real_plain(cfg, *args, **kwargs)
        calls.append(("plain", seconds / cfg.measure.steps, cfg.measure.steps))
        return seconds

    monkeypatch.setattr(measure, "train_and_measure", harness_side)
    monkeypatch.setattr(plain, "time_plain", plain_side)
    costs = inproc.loop_cost(rounds=2, steps=5)
    # both sides ran the same steps each round, in an order that flips every round
    assert [(side, steps) for side, _, steps in calls] == [("harness", 5), ("plain", 5), ("plain", 5), ("harness", 5)]
    assert all(math.isfinite(s) and s > 0 for _, s, _ in calls)
    per_step = [dict((side, s) for side, s, _ in calls[i:i + 2]) for i in (0, 2)]
    # a round's cost: microseconds the harness's step took beyond the plain one's (negative when it was faster)
    assert costs == [pytest.approx((r["harness"] - r["plain"]) * 1e6) for r in per_step]
    assert all(isinstance(c, float) and math.isfinite(c) for c in costs)


def test_the_hook_cost_times_a_user_step_through_the_hook_against_the_default_step(monkeypatch):
    # what the cost is depends on the machine and its load: checked here is how it is made, never its size
    from harness.run.child import measure

    calls, real_measure, real_user_step = [], measure.train_and_measure, hook_cost.user_step
    user_calls = []

    def measured(cfg, *args, **kwargs):
        m, extras = real_measure(cfg, *args, **kwargs)
        side = "default" if cfg.workload.step is None else "hook"
        calls.append((side, m.measured_s / len(m.step_ms), len(m.step_ms), m.loss_first))
        return m, extras

    def counted_user_step(model, batch, loss_fn):
        user_calls.append(type(loss_fn).__name__)
        return real_user_step(model, batch, loss_fn)

    monkeypatch.setattr(measure, "train_and_measure", measured)
    monkeypatch.setattr(hook_cost, "user_step", counted_user_step)  # the workload's step names it by its path
    rounds = hook_cost.hook_cost(rounds=2, steps=5)
    # both sides ran the same steps each round, in an order that flips every round
    assert [(side, steps) for side, _, steps, _ in calls] == [("hook", 5), ("default", 5), ("default", 5), ("hook", 5)]
    # the hook's side went through the user's step at every warm-up and measured step, with the default's loss
    warmup = dict(inproc.TINY)["measure.warmup_steps"]
    assert user_calls == ["CrossEntropyLoss"] * 2 * (warmup + 5)
    # ... and computed what the default step computes: the same first loss on the same seeded model and batch
    firsts = {side: loss for side, _, _, loss in calls}
    assert firsts["hook"] == pytest.approx(firsts["default"], rel=1e-6) and math.isfinite(firsts["hook"])
    per_step = [dict((side, s) for side, s, _, _ in calls[i:i + 2]) for i in (0, 2)]
    assert rounds == per_step
    assert hook_cost.differences_us(rounds) == [pytest.approx((r["hook"] - r["default"]) * 1e6) for r in per_step]
    assert hook_cost.ratios(rounds) == [pytest.approx(r["hook"] / r["default"]) for r in per_step]


def test_alternated_blocks_flip_their_order_every_round():
    seen = []
    sides = {"a": lambda: seen.append("a") or 1.0, "b": lambda: seen.append("b") or 2.0}
    assert inproc.alternated(3, sides) == [{"a": 1.0, "b": 2.0}] * 3
    assert seen == ["a", "b", "b", "a", "a", "b"]


def test_the_hook_cost_and_loop_cost_commands_print_their_figures(capsys):
    """A smoke run of the command line, in this process, at a few steps a side."""
    assert cli.main(["--hook-cost", "--rounds", "1", "--steps", "3"], "overhead") == 0
    out = capsys.readouterr().out
    assert "1 rounds" in out and "3 steps a side" in out
    assert out.count("hook cost: median ") == 1 and "us a step, 95% band [" in out
    assert "hook/default step time: median " in out and "the default step " in out
    assert cli.main(["--rounds", "0", "--inproc-rounds", "0", "--loop-rounds", "1", "--loop-steps", "3"],
                    "overhead") == 0
    out = capsys.readouterr().out
    assert "0 rounds" in out and "loop cost: median " in out and "2. In one process" not in out


@pytest.mark.parametrize("argv, says", [
    (["--hook-cost", "--rounds", "0"], "--rounds 0: --hook-cost takes 1 or more"),
    (["--hook-cost", "--steps", "-1"], "--steps -1: --hook-cost takes 1 or more"),
    (["--hook-cost", "--as-users"], "not allowed with argument"),
    (["--as-users", "--mode", "train"], "add --data synthetic"),
])
def test_a_bad_combination_is_a_usage_error_before_anything_runs(argv, says, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv, "overhead")
    assert exit_.value.code == 2 and says in capsys.readouterr().err


@pytest.mark.slow
def test_the_hook_cost_runs_as_the_docs_print_it():
    done = subprocess.run([sys.executable, "benchmarks/overhead.py", "--hook-cost", "--rounds", "1", "--steps", "2"],
                          cwd=REPO, capture_output=True, text=True, env=common.env(), timeout=300)
    assert done.returncode == 0, done.stderr
    assert "hook cost: median " in done.stdout and "hook/default step time" in done.stdout


def test_the_reference_loop_is_read_over_exactly_the_steps_inside_the_window():
    steps = {"first": 10.0, "ends": [11.0, 12.0, 13.5, 15.0, 16.0, 17.0, 18.0, 19.0, 20.0]}
    # window [11.5, 19.5]: the steps 12.0-13.5, 13.5-15.0, 15.0-16.0, 16.0-17.0, 17.0-18.0, 18.0-19.0 lie inside
    assert fresh.seconds_per_step_within(steps, (11.5, 8.0)) == pytest.approx((19.0 - 12.0) / 6)
    with pytest.raises(ValueError, match="only 2 plain steps fell inside"):
        fresh.seconds_per_step_within(steps, (12.0, 3.0))


def test_a_sequential_round_runs_the_sides_one_after_the_other_the_order_flipping(monkeypatch, tmp_path):
    ran = []
    monkeypatch.setattr(fresh, "harness_run", lambda settings, results: ran.append("harness") or
                        {"samples_per_s": 9.0, "step_ms": 100.0, "parent_cpu_pct": 0.5})
    monkeypatch.setattr(fresh, "plain_run", lambda settings: ran.append("plain") or {"samples_per_s": 10.0})
    ratio, shown, detail = fresh.sequential_round(["workload=resnet50"], tmp_path, flip=False)
    assert ran == ["harness", "plain"] and ratio == pytest.approx(0.9) and shown[0]["parent_cpu_pct"] == 0.5
    assert detail == "harness     9.00 samples/s, plain    10.00 samples/s, ratio 0.900"
    fresh.sequential_round(["workload=resnet50"], tmp_path, flip=True)
    assert ran[2:] == ["plain", "harness"]


def test_the_cpus_are_split_in_two_disjoint_halves(monkeypatch):
    monkeypatch.setattr(fresh.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4})
    assert fresh.cpu_halves() == ({0, 1}, {2, 3})
    monkeypatch.setattr(fresh.os, "sched_getaffinity", lambda pid: {3})
    assert fresh.cpu_halves() is None
    assert common.cpus_label({0, 1, 2}) == "CPUs 0-2" and common.cpus_label({5}) == "CPU 5"


def test_the_in_process_comparison_trains_one_model_and_batch_on_both_sides_with_a_live_poller(monkeypatch):
    # the ratio's size depends on the machine and its load: checked here is what each round is made of
    import gc

    from harness.run.child import measure
    from harness.run.child.step import forward_backward

    real_prepare, real_measure, real_hand_step = measure.prepare, measure.train_and_measure, plain.hand_step
    models, inputs, harness_s, collected, order = {}, {}, [], [], []
    real_collect, real_forward_backward = gc.collect, forward_backward

    def harness_side(cfg, workload, *args, **kwargs):
        order.append("harness")
        models["harness"] = measure.prepare(cfg, workload).model  # what the harness's side is handed to train
        m, extras = real_measure(cfg, workload, *args, **kwargs)
        harness_s.append(m.measured_s / len(m.step_ms))
        return m, extras

    def hand_step(cfg, model, loss_fn, optimizer, x, y):
        models["plain"], inputs["plain"] = model, x
        return real_hand_step(cfg, model, loss_fn, optimizer, x, y)

    def counted_collect(*args):
        collected.append(order[-1] if order else "set-up")
        return real_collect(*args)

    def seen_forward_backward(model, loss_fn, autocast, scaler, x, *args):
        inputs.setdefault("harness", set()).add(x.data_ptr())
        return real_forward_backward(model, loss_fn, autocast, scaler, x, *args)

    monkeypatch.setattr(measure, "train_and_measure", harness_side)
    monkeypatch.setattr(plain, "hand_step", hand_step)
    monkeypatch.setattr(gc, "collect", counted_collect)
    monkeypatch.setattr("harness.run.child.measure.forward_backward", seen_forward_backward)
    real_plain_side = inproc._one_training

    def one_training(cfg, faults):
        prep, batch, side = real_plain_side(cfg, faults)
        return prep, batch, lambda: order.append("plain") or side()

    monkeypatch.setattr(inproc, "_one_training", one_training)
    harness_ms: list[float] = []
    counts = inproc.Counts()
    ratios = inproc.in_process(inproc.TINY + [("measure.steps", 5), ("measure.warmup_steps", 2)], rounds=2,
                               harness_ms=harness_ms, counts=counts)
    faults = counts.faults
    assert models["harness"] is models["plain"]  # one model, optimizer and batch on both sides
    assert inputs["harness"] == {inputs["plain"].data_ptr()}  # the plain side's very batch, every round
    assert measure.prepare is real_prepare  # the harness's builder is given back
    # one unkept round, then A B B A and B A A B: each side first and last in every round
    assert order == ["plain", "harness", "harness", "plain"] + ["harness", "plain", "plain", "harness"] + [
        "plain", "harness", "harness", "plain"]
    # every block of either side collects once before its warm-up, as the child does
    assert collected.count("harness") == collected.count("plain") == 6
    assert len(ratios) == 2 and all(isinstance(r, float) and math.isfinite(r) and r > 0 for r in ratios)
    # a round's harness step time: the mean of its two blocks, in milliseconds (the unkept round left out)
    kept = harness_s[2:]
    assert harness_ms == [pytest.approx(500.0 * (kept[0] + kept[1])), pytest.approx(500.0 * (kept[2] + kept[3]))]
    # each block's minor page faults a measured step, on both sides: counts, not times
    assert sorted(faults) == ["harness", "plain"] and [len(v) for v in faults.values()] == [6, 6]
    assert all(v >= 0 for side in faults.values() for v in side)
    # the poller's CPU inside the harness's six windows, against those windows' seconds
    assert counts.harness_window_s == pytest.approx(5 * sum(harness_s))
    assert 0.0 <= counts.poller_cpu_s


def test_abba_rounds_give_each_side_the_first_and_the_last_block_after_an_unkept_round():
    seen, times = [], iter([9.0] * 4 + [1.0, 2.0, 4.0, 3.0, 6.0, 5.0, 7.0, 8.0])
    sides = {"a": lambda: seen.append("a") or next(times), "b": lambda: seen.append("b") or next(times)}
    assert inproc.abba(2, sides) == [{"a": 2.0, "b": 3.0}, {"a": 6.0, "b": 7.0}]  # the mean of a side's two blocks
    assert seen == ["b", "a", "a", "b"] + ["a", "b", "b", "a"] + ["b", "a", "a", "b"]


def test_abba_rounds_cancel_a_steady_drift_that_one_block_a_side_leans_on():
    # two equal sides on a machine slowing 2% a block: every A B B A round reads 1, one block a side does not
    def sides():
        clock = {"block": 0}

        def block() -> float:
            clock["block"] += 1
            return 1.0 + 0.02 * clock["block"]

        return {"harness": block, "plain": block}

    assert [r["plain"] / r["harness"] for r in inproc.abba(6, sides())] == [pytest.approx(1.0, abs=1e-12)] * 6
    one_each = [r["plain"] / r["harness"] for r in inproc.alternated(6, sides())]
    assert min(abs(r - 1.0) for r in one_each) > 0.01  # each round leans on its first side


def test_abba_rounds_say_below_099_for_equal_sides_at_most_5_percent_of_the_time():
    # seeded: equal sides, 5% noise a block, a drift and a slower first block of each round; 10 rounds a run
    import random

    false_below = 0
    for run in range(200):
        rng = random.Random(run)
        n = {"block": 0}

        def block(n: dict = n, rng: random.Random = rng) -> float:
            n["block"] += 1
            first = 1.08 if n["block"] % 4 == 1 else 1.0
            return (1.0 + 0.002 * n["block"]) * first * rng.lognormvariate(0.0, 0.05)

        ratios = [r["plain"] / r["harness"] for r in inproc.abba(10, {"harness": block, "plain": block})]
        _, low, high = stats.median_band(ratios)
        false_below += stats.verdict(low, high, len(ratios)).startswith("below")
    assert false_below <= 10  # 5% of 200 runs


def test_the_minor_faults_count_pages_first_touched():
    before = inproc.minor_faults()
    block = bytearray(8 << 20)  # 8 MiB zero-filled: mapped afresh, at least one fault a page it touches
    block[::4096] = b"x" * len(block[::4096])
    assert inproc.minor_faults() - before >= 1024


def _resolved(workload: str):
    from harness import config as config_mod
    from harness.commands import hydra_edge

    settings = hydra_edge.plain_settings(hydra_edge.compose_settings(user_script.HARNESS_SETTINGS[workload]))
    return config_mod.resolve(config_mod.from_dict(settings), cuda_available=False)


@pytest.mark.parametrize("workload", sorted(user_script.HARNESS_SETTINGS))
def test_the_user_scripts_shapes_are_what_the_harness_settings_resolve_to(workload):
    cfg, spec = _resolved(workload), user_script.SHAPES[workload]
    assert (cfg.batch_size, cfg.data.epoch_steps, cfg.workload.num_classes) == (spec["batch"], spec["epoch_steps"],
                                                                                spec["classes"])
    assert [cfg.workload.in_channels, *cfg.data.patch_size] == list(spec["shape"])
    assert (cfg.effective_width if workload != "resnet50" else None) == spec["width"]
    assert cfg.seed == user_script.SEED and cfg.data.num_volumes == user_script.NUM_VOLUMES


@pytest.mark.parametrize("workload", ["unet3d", "resnet50"])
def test_the_user_scripts_synthetic_batches_are_the_harness_loaders_batches(workload):
    """--data synthetic trains on what the harness's workload does: the same crops, labels and dtypes (uint8 label
    maps), in the same order."""
    import torch

    from harness.workload.data import build_dataset, build_loader, endless

    cfg = _resolved(workload)
    torch.manual_seed(0)  # the 2D crops draw from the global generator, on both sides alike
    ours = endless(build_loader(cfg, build_dataset(cfg, cfg.workload), cfg.workload))
    theirs_first = [next(ours) for _ in range(3)]
    torch.manual_seed(0)
    theirs = user_script.synthetic_batches(workload)
    for (x, y), (x2, y2) in zip(theirs_first, [next(theirs) for _ in range(3)]):
        assert x.dtype == x2.dtype and y.dtype == y2.dtype and torch.equal(x, x2) and torch.equal(y, y2)
    assert theirs_first[0][1].dtype == (torch.uint8 if workload == "unet3d" else torch.int64)


def test_as_users_refuses_a_loader_of_random_numbers():
    assert as_users.script_options("model", "synthetic", True) == ("--mode", "model", "--data", "synthetic",
                                                                      "--flops")
    with pytest.raises(ValueError, match="add --data synthetic"):
        as_users.script_options("train", "random", False)


def test_as_users_passes_uint8_labels_only_to_a_random_3d_label_map():
    assert as_users.script_options("model", "random", False, "uint8", ["unet3d-full"]) == (
        "--mode", "model", "--data", "random", "--labels", "uint8")
    with pytest.raises(ValueError, match="--labels uint8 is for --data random with 3D label maps.*not resnet50"):
        as_users.script_options("model", "random", False, "uint8", ["unet3d-full", "resnet50"])
    with pytest.raises(ValueError, match="--labels uint8 is for --data random"):
        as_users.script_options("model", "synthetic", False, "uint8", ["unet3d"])
    with pytest.raises(ValueError, match="--workloads unet3d-ful: not one of resnet50, unet3d, unet3d-full"):
        as_users.script_options("model", "random", False, "int64", ["unet3d-ful"])


class _GraphToken:
    pass


class _KeepToken(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, token):
        ctx.token = token  # lives as long as the step's graph
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


@pytest.mark.parametrize("step_fn, held", [(True, False), (False, True)])
def test_the_user_scripts_step_as_a_function_lets_its_graph_go_and_the_inline_loop_keeps_it(step_fn, held):
    import weakref

    model = torch.nn.Linear(4, 2)
    previous, alive = [], []

    def loss_fn(out, y):
        if previous:
            alive.append(previous[-1]() is not None)
        token = _GraphToken()
        previous.append(weakref.ref(token))
        return _KeepToken.apply(torch.nn.functional.cross_entropy(out, y), token)

    batch = (torch.randn(3, 4), torch.tensor([0, 1, 0]))
    times, samples, _ = user_script.timed_steps(model, loss_fn, torch.optim.SGD(model.parameters(), lr=0.1),
                                                iter(lambda: batch, None), 2, 3, step_fn)
    assert len(times) == 3 and samples == 3 and alive == [held] * 4
    assert as_users.script_options("model", "random", False, "uint8", ["unet3d-full"], step_fn)[-1:] == (
        ("--step-fn",) if step_fn else ("uint8",))


def test_the_user_script_counts_the_page_faults_of_its_timed_steps_only():
    import mmap

    model, pages = torch.nn.Linear(4, 2), 1024
    steps = []

    def loss_fn(out, y):  # each timed step maps 4 MiB afresh and writes every page: at least one fault a page
        steps.append(None)
        if len(steps) > 2:
            fresh = mmap.mmap(-1, pages * mmap.PAGESIZE)
            for page in range(pages):
                fresh[page * mmap.PAGESIZE] = 1
            fresh.close()
        return torch.nn.functional.cross_entropy(out, y)

    batch = (torch.randn(3, 4), torch.tensor([0, 1, 0]))
    _, _, faults = user_script.timed_steps(model, loss_fn, torch.optim.SGD(model.parameters(), lr=0.1),
                                           iter(lambda: batch, None), 2, 3, True)
    assert 3 * pages <= faults < 3 * pages + 2000  # the warm-up's steps are not counted, the timed ones are


def test_the_user_script_counts_pythons_collections_in_its_timed_steps_only():
    import gc

    model, steps = torch.nn.Linear(4, 2), []

    def loss_fn(out, y):  # a full collection in the second warm-up step, and one in each of the last two timed ones
        steps.append(None)
        if len(steps) in (2, 5, 6):
            gc.collect()
        return torch.nn.functional.cross_entropy(out, y)

    batch = (torch.randn(3, 4), torch.tensor([0, 1, 0]))
    collections = user_script.Collections()
    try:
        user_script.timed_steps(model, loss_fn, torch.optim.SGD(model.parameters(), lr=0.1),
                                iter(lambda: batch, None), 2, 4, True, collections)
    finally:
        gc.callbacks.remove(collections)
    assert collections.counts[2] == 2 and collections.seconds > 0


def test_the_harness_side_reads_its_window_page_faults_from_the_runs_record(monkeypatch, tmp_path):
    # each round prints both sides' heap states: the harness's from its record, as the script's from its own count
    import pandas as pd

    monkeypatch.setattr(as_users.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, "", ""))
    records = pd.DataFrame({"timestamp": ["20261129-1", "20261129-2"], "samples_per_s": [9.0, 10.0],
                            "other_cpu_pct": [50.0, 3.0], "window_minor_faults_per_step": [52030.0, 38206.0]})
    monkeypatch.setattr(as_users, "load_runs", lambda results: records)
    assert as_users.harness_side("unet3d-full", 30, 5, tmp_path, {}) == (10.0, 3.0, 38206.0)
    older = records.drop(columns="window_minor_faults_per_step")  # a record from before the field: not a number
    monkeypatch.setattr(as_users, "load_runs", lambda results: older)
    assert math.isnan(as_users.harness_side("unet3d-full", 30, 5, tmp_path, {})[2])


def test_the_heap_states_line_counts_the_rounds_each_side_zero_filled_more():
    rounds = [(52030.0, 38206.0), (38206.0, 38206.0), (38206.0, 52030.0), (41000.0, 38206.0), (math.nan, 38206.0)]
    line = as_users.heap_states("unet3d-full", rounds)
    assert "median: harness 39603, script 38206" in line
    assert "harness's side in 2 of 4 rounds, on the script's in 1" in line  # 41,000 is 7% above 38,206
    assert as_users.heap_states("unet3d", [(math.nan, math.nan)]).endswith("not counted")


def test_the_user_scripts_random_label_map_takes_the_dtype_asked_for():
    x, y = user_script.random_batch("unet3d", "uint8")
    assert y.dtype == torch.uint8 and tuple(y.shape) == (2, 1, 32, 32, 32) and int(y.max()) <= 1
    assert user_script.random_batch("unet3d")[1].dtype == torch.int64
    assert user_script.random_batch("resnet50")[1].dtype == torch.int64


def test_the_as_users_command_line_refuses_uint8_labels_for_resnet50():
    done = subprocess.run([sys.executable, str(common.ENTRY), "--as-users", "--workloads", "resnet50", "--labels",
                           "uint8"], capture_output=True, text=True, cwd=REPO, env=common.env())
    assert done.returncode == 2 and "--labels uint8 is for --data random with 3D label maps" in done.stderr


def test_as_users_verdicts_come_from_quiet_rounds_against_098_and_on_2_percent(capsys):
    quiet = [(r, False) for r in (0.99, 1.0, 1.01, 0.995, 1.005, 1.0)]
    line = as_users.summary("unet3d-full", quiet + [(0.70, True)])
    assert "median 1.000" in line and "1 busy round(s) left out" in line
    assert ">= 0.98 shown" in line and "within 2% shown" in line
    low = as_users.summary("unet3d-full", [(r, False) for r in (0.90, 0.91, 0.9, 0.92, 0.89, 0.905)])
    assert "below 0.98" in low and "not within 2%" in low
    few = as_users.summary("unet3d-full", quiet[:3] + [(1.0, True)] * 3)
    assert "no verdict from 3 round(s)" in few
    assert "every one of 2 rounds was busy" in as_users.summary("unet3d", [(1.0, True), (0.9, True)])


def test_the_others_share_leaves_the_finished_childs_cpu_out():
    # 10 s of wall on 2 CPUs: 12 busy CPU seconds, 10 of them the child's -> others used 2 of 20 CPU seconds
    assert as_users.others_pct((0.0, 100.0, 5.0), (10.0, 112.0, 15.0), cpus=2) == pytest.approx(10.0)
    assert as_users.others_pct((0.0, 100.0, 5.0), (10.0, 105.0, 15.0), cpus=2) == 0.0


def test_every_as_users_command_the_docs_print_parses_and_passes_its_checks():
    import shlex

    lines = [line for line in (REPO / "docs" / "measuring.md").read_text().splitlines()
             if line.startswith("python benchmarks/overhead.py --as-users")]
    assert any("--labels uint8 --step-fn" in line for line in lines)
    for line in lines:
        parser = cli.parser_for("overhead")
        args = parser.parse_args(shlex.split(line)[2:])
        as_users.check_options(parser, args)  # a usage error would exit 2 here
        assert args.as_users


def test_single_runs_plain_script_trains_what_the_readmes_first_run_trains():
    """benchmarks/single_run.py sets `python -m harness run workload=unet3d` beside user_script.py's unet3d with
    synthetic data and a batch from the loader every step: the README's run resolves to those very settings."""
    import single_run
    from harness import config as config_mod
    from harness.commands import hydra_edge

    settings = hydra_edge.plain_settings(hydra_edge.compose_settings(list(single_run.RUN[1:])))
    run = config_mod.resolve(config_mod.from_dict(settings), cuda_available=False)
    script = _resolved("unet3d")
    assert run.measure.mode == "train" and run.data.source == "synthetic" and run.data.num_workers == 0
    assert (run.batch_size, run.precision, list(run.data.patch_size), run.effective_width) == \
        (script.batch_size, script.precision, list(script.data.patch_size), script.effective_width)
