"""`diagnose` end to end on the CPU. Which verdict a setting gets depends on how fast this machine's
loader and model are (and on what else runs on it), so the default tier checks what `diagnose` does
and stores (in test_launcher_command.py, the command run in-process); the verdicts for clear-cut
settings are in the slow tier. The verdict rule itself is tested on fixed rates in
test_data.py::test_diagnosis_verdicts_from_rates."""

import shlex

import pytest

from harness.store import load_runs
from tests.conftest import REPO, TINY_MODEL_ARGS, harness_cli, in_process

TINY = ("measure.steps=8", "measure.warmup_steps=2")


VERDICTS = ("data-bound: the loader delivers", "compute-bound: the loader delivers", "balanced")
BUSY = "no verdict: the machine was busy while it measured ("


def said(out, *expected: str) -> bool:
    """``diagnose`` printed every one of ``expected`` and exited 0, or, a part measured on a busy machine, gave no
    verdict and exited 5: which, the machine's load decides; each is the right answer to its case."""
    text = " ".join(out.stdout.split())  # the console wraps long lines
    if out.returncode == 5:
        return BUSY in text
    return out.returncode == 0 and all(e in text for e in expected)


# the default tier runs this command in the test process itself (cli.main), with every check here and its
# launcher's: test_launcher_command.py::test_diagnose_forks_its_three_runs_from_one_launcher_gone_with_the_command
@pytest.mark.slow
def test_diagnose_stores_three_parts_and_prints_a_verdict_with_its_numbers(results):
    # the tiny model: which verdict is not asserted here, so the parts' speed does not matter
    out = harness_cli("diagnose", *TINY_MODEL_ARGS, "measure.steps=3", "measure.warmup_steps=1",
                      f"results_dir={results}")
    assert said(out) and (out.returncode == 5 or any(v in out.stdout for v in VERDICTS)), out.stdout + out.stderr
    frame = load_runs(results)
    assert sorted(frame["mode"]) == ["loader", "model", "train"] and set(frame["status"]) == {"ok"}
    assert frame.loc[frame["mode"] == "loader", "loss_last"].isna().all()


@pytest.mark.slow
def test_heavy_3d_augmentation_with_no_workers_is_data_bound(results):
    out = harness_cli("diagnose", "workload=unet3d", "data=disk", "data.augment=heavy", "model.width=0.5", *TINY,
                      f"results_dir={results}")
    assert said(out, "data-bound: the loader delivers", "more loader workers"), out.stdout + out.stderr
    frame = load_runs(results)
    assert sorted(frame["mode"]) == ["loader", "model", "train"] and set(frame["ladder"]) == {"diagnose"}


@pytest.mark.slow
def test_a_large_model_on_in_memory_data_is_compute_bound(results):
    out = harness_cli("diagnose", "workload=unet3d", "model.width=4", *TINY, f"results_dir={results}")
    assert said(out, "compute-bound: the loader delivers"), out.stdout + out.stderr


@pytest.mark.slow
def test_a_worker_takes_data_wait_off_a_data_bound_loop(results):
    from harness.run.parent import runner
    from harness.run.parent import env as env_mod
    from harness.workload import datasets
    from tests.conftest import tiny_config

    waits = {}
    for workers in (0, 1):
        cfg = tiny_config(data__source="disk", data__cache="none", data__augment="heavy", model__width=0.5,
                          data__num_workers=workers, measure__steps=8, measure__warmup_steps=2,
                          results_dir=str(results))
        datasets.prepare(cfg, log=lambda *_: None)
        env, key = env_mod.environment(cfg.device)
        record = runner.run_and_store(cfg, env, key)
        assert record.status == "ok", record.error
        waits[workers] = record.data_wait_frac
    assert waits[0] > 0.3  # data-bound without workers
    assert waits[1] < waits[0] * 0.8


# ------------------------------------------------------------------------------------------
# what the diagnosis says besides its verdict


def _rec(batches_per_s, wait=0.0):
    return {"status": "ok", "samples_per_s": 2 * batches_per_s, "batch_size": 2, "data_wait_frac": wait}


def test_a_full_step_faster_than_a_part_of_it_alone_is_said_to_be_impossible():
    from harness.analysis.views.diagnosis import diagnose

    again = "python -m harness diagnose measure.steps=40"
    result = diagnose(_rec(30.0), _rec(1.87), _rec(4.90, 0.1), "cpu", 0, False, again=again)
    (note,) = result.notes
    assert note.startswith("the full step (4.90 batches/s) ran faster than the model alone (1.87), which bounds it "
                           "from above: these runs disagree")
    assert note.endswith(f"measure again with more steps: {again}")
    assert diagnose(_rec(30.0), _rec(5.0), _rec(4.90, 0.1), "cpu", 0, False).notes == []  # within one run's noise


def test_with_no_workers_the_loader_and_the_model_add_and_workers_can_take_the_loader_s_share_at_most():
    from harness.analysis.views.diagnosis import diagnose

    # the SEResNet guide's baseline on an H200 (2026-11-30): no workers, a spectrogram per item
    result = diagnose(_rec(10.14), _rec(5.84), _rec(3.87, 0.34), "cpu", 0, False)
    assert result.verdict == "compute-bound"
    assert result.text.endswith("With no loader workers the two run one after the other in the step (1/10.14 + "
                                "1/5.84 s a batch: 3.71 batches/s): workers can take away at most the loader's 34% "
                                "of it, 1.52x at most.")
    assert result.advice[-1].startswith("more loader workers (now 0)")
    with_workers = diagnose(_rec(10.14), _rec(5.84), _rec(5.60, 0.04), "cpu", 2, False)
    assert "one after the other" not in with_workers.text and len(with_workers.advice) == 2


def test_a_part_measured_on_a_busy_machine_gets_no_verdict_and_names_why():
    # beside `while True: pass` on 2 CPUs the model alone ran 0.35 batches/s where quiet it ran far faster, and the
    # diagnosis said "compute-bound" without a word of the machine; every verdict's busy rule now holds here too
    from harness.analysis.views.diagnosis import diagnose

    again = "python -m harness diagnose measure.steps=6"
    quiet = diagnose(_rec(10.85), _rec(0.35), _rec(0.30, 0.14), "cpu", 0, False, again=again)
    assert quiet.verdict == "compute-bound"
    busy = diagnose(_rec(10.85), {**_rec(0.35), "other_cpu_pct": 49.4}, {**_rec(0.30, 0.14), "other_cpu_pct": 50.2},
                    "cpu", 0, False, again=again)
    assert busy.verdict == "busy" and (busy.model_batches_per_s, busy.full_batches_per_s) == (0.35, 0.30)
    assert busy.text == ("no verdict: the machine was busy while it measured (the model alone: other processes used "
                         "49% of the CPUs; the full step: other processes used 50% of the CPUs).")
    assert busy.advice == ["see what else runs: python -m harness machine", f"then measure again: {again}"]
    at_the_line = diagnose({**_rec(10.85), "other_cpu_pct": 10.0}, _rec(0.35), _rec(0.30, 0.14), "cpu", 0, False)
    assert at_the_line.verdict == "compute-bound"  # 10% is the busy rule's line, not beyond it
    failed = diagnose({"status": "error", "other_cpu_pct": 80.0}, _rec(0.35), _rec(0.30), "cpu", 0, False)
    assert failed.verdict == "unknown"  # a part that did not run ok says so first


@pytest.mark.parametrize("overrides, lighter, own", [
    ({"data__augment": "heavy"}, ("data.augment=light", "data.rotate=false", "data.elastic=false"), False),
    ({"data__augment": "light"}, (), False),  # flip and noise only: nothing heavy to turn off
    ({"workload": "resnet50", "data__augment": "heavy"}, ("data.augment=light", "data.mixup=false"), False),
])
def test_only_augmentation_that_acts_on_the_measured_data_is_suggested(overrides, lighter, own):
    from harness.commands.diagnose import data_knobs
    from tests.conftest import tiny_config

    knobs = data_knobs(tiny_config(**overrides))
    assert knobs.lighter == lighter and knobs.own_dataset == own


def test_a_workload_of_random_tensors_or_its_own_dataset_gets_no_augmentation_advice():
    from harness.analysis.views.diagnosis import DataKnobs, diagnose
    from harness.commands.diagnose import data_knobs
    from tests.conftest import tiny_config

    cfg = tiny_config(workload="custom", workload__model={"_target_": "examples.tiny_net.TinySegNet"},
                      workload__input_shape=[1, 16, 16, 16], workload__target="segmentation", data__augment="none")
    assert data_knobs(cfg) == DataKnobs()
    cfg.workload.dataset = {"_target_": "mydata.Set", "_partial_": True}
    assert data_knobs(cfg) == DataKnobs(own_dataset=True)
    advice = diagnose(_rec(1.0), _rec(10.0), _rec(1.0, 0.9), "cpu", 0, False, DataKnobs(own_dataset=True)).advice
    assert not any("data.augment" in a.split("(")[0] or "data.rotate" in a for a in advice)
    assert any("your dataset (workload.dataset)" in a for a in advice)


def test_the_next_commands_carry_every_word_given_and_compose(results):
    from harness.commands import hydra_edge, sweep
    from harness.commands.diagnose import NextCommands
    from tests.conftest import tiny_config

    given = ["--config-dir", str(REPO / "examples" / "conf"), "workload=tiny_net", "data.num_workers=1",
             "precision=32", "measure.steps=5", f"results_dir={results}"]
    commands = NextCommands(given, tiny_config(results_dir=str(results)))
    workers = commands("sweep", "+ladder=workers")
    assert workers == ("python -m harness sweep +ladder=workers --config-dir " + str(REPO / "examples" / "conf")
                       + f" workload=tiny_net precision=32 measure.steps=5 results_dir={results}")  # workers: varied
    for line in (workers, commands("sweep", "+ladder=precision")):
        plan = sweep.plan_sweep(hydra_edge.with_config_dirs(shlex.split(line)[4:]))
        assert plan.settings["workload"]["name"] == "tiny_net" and plan.settings["results_dir"] == str(results)
    climb = shlex.split(commands("climb"))[4:]
    assert hydra_edge.plain_settings(hydra_edge.compose_settings(hydra_edge.with_config_dirs(climb)))["data"][
        "num_workers"] == 1
    assert NextCommands(["measure.steps=5"], tiny_config())("sweep", "+ladder=workers").split()[5] == "workload=unet3d"


@pytest.mark.slow  # diagnose (three processes), then the sweep it suggests: ~60 s on a quiet 2-core CPU
def test_diagnose_of_a_custom_model_prints_next_sweeps_that_run_as_printed(tmp_path):
    from tests.test_climb import CLIMB_NETS, _shell

    (tmp_path / "conf" / "workload").mkdir(parents=True)
    (tmp_path / "climbnets13.py").write_text(CLIMB_NETS)
    out = harness_cli("diagnose", "--config-dir", "conf", "workload=custom", "workload.model._target_=climbnets13.Tiny",
                      "+workload.model.width=8", "workload.input_shape=[1,8]", *TINY,
                      f"results_dir='{tmp_path / 'my résultats'}'", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    hints = [line.split(": ", 1)[1] for line in out.stdout.splitlines() if line.startswith("  next: ")]
    sweeps = [h[h.index("python -m harness sweep"):] for h in hints if "python -m harness sweep" in h]
    assert sweeps and all("<" not in h for h in hints)
    for line in sweeps + [out.stdout.split("stored as sweep ")[1].split(": ", 1)[1].splitlines()[0]]:
        ran = _shell(line, tmp_path)
        assert ran.returncode == 0, (line, ran.stdout, ran.stderr)


# --------------------------------------------------------------------------------------------
# a ladder's baseline: the A100 volume-model guide's data-bound start

A100_LADDERS = ("a100_volume", "a100_option_a", "a100_option_b", "a100_option_c")
SITUATION = ("batch_size", "data.num_workers", "data.prefetch_factor", "data.persistent_workers", "data.source",
             "data.cache", "data.page_cache", "data.read_latency_ms", "data.patch_size", "cpus",
             "data.multiprocessing_context")


def test_the_a100_ladders_start_from_one_situation_with_storage_far_slower_than_the_step():
    from harness.config import ladder as ladder_mod

    for size in ("full", "smoke"):
        starts = {name: {k: ladder_mod.load(name).settings(0, size)[k] for k in SITUATION} for name in A100_LADDERS}
        assert len({repr(s) for s in starts.values()}) == 1, starts
        start = starts["a100_volume"]
        # the guide's start: batch 1, one worker prefetching one batch, every item read from storage
        assert (start["batch_size"], start["data.num_workers"], start["data.prefetch_factor"]) == (1, 1, 1)
        assert (start["data.source"], start["data.cache"], start["data.page_cache"]) == ("disk", "none", "drop")
        assert start["data.multiprocessing_context"] == "spawn"  # "With `spawn` context, each worker is independent"
    smoke = ladder_mod.load("a100_volume").settings(0, "smoke")
    assert smoke["data.read_latency_ms"] == 2000 and smoke["cpus"] == 1  # one compute thread: a short, steady step


def test_the_imagenet_storage_start_is_calibrated_to_the_guides_0_19_it_s():
    from harness.config import ladder as ladder_mod

    full = ladder_mod.load("resnet50_storage").settings(0, "full")
    assert (full["data.source"], full["data.cache"], full["data.page_cache"]) == ("disk", "none", "drop")
    # 0.19 it/s at batch 256 with 16 workers: each worker takes 16 / (0.19 x 256) s an image
    per_image_ms = 1000 * full["data.num_workers"] / (0.19 * full["batch_size"])
    assert full["data.read_latency_ms"] == pytest.approx(per_image_ms, rel=0.02)
    # the shared ceiling: the Summary's end, 2.0 it/s at batch 384, read from the same storage (no lower: a ceiling
    # under it would cap the claim by construction); the CPU size's the same multiple of its start's pace
    assert full["data.storage_items_per_s"] == 2.0 * 384
    multiple = full["data.storage_items_per_s"] * full["data.read_latency_ms"] / 1000 / full["data.num_workers"]
    smoke = ladder_mod.load("resnet50_storage").settings(0, "smoke")
    pace = 1000 * smoke["data.num_workers"] / smoke["data.read_latency_ms"]
    assert smoke["data.storage_items_per_s"] == pytest.approx(multiple * pace, rel=0.02)
    # and no rung reaches it: the readers' pace (workers / latency) stays under the ceiling at both sizes
    lad = ladder_mod.load("resnet50_storage")
    for size in ("full", "smoke"):
        for rung in lad.rungs:
            s = lad.settings(rung.index, size)
            assert 1000 * s["data.num_workers"] / s["data.read_latency_ms"] < s["data.storage_items_per_s"] / 4


def test_diagnose_takes_a_ladders_baseline_with_the_users_overrides_on_top(tmp_path):
    from harness.commands import diagnose, hydra_edge

    overrides = [f"results_dir={tmp_path}", "data.read_latency_ms=5"]
    plain = hydra_edge.plain_settings(hydra_edge.compose_settings(overrides))
    cfg = diagnose.ladder_baseline("a100_volume", plain, overrides)
    assert (cfg.workload.name, cfg.batch_size, cfg.data.num_workers, cfg.data.source, cfg.data.page_cache) == (
        "basic_unet3d", 1, 1, "disk", "drop")
    assert cfg.data.read_latency_ms == 5 and cfg.size == "smoke" and cfg.data.patch_size == [16, 32, 32]


def test_diagnose_with_an_unknown_ladder_names_it_and_exits_2(results, capfd):
    out = in_process(capfd, "diagnose", "+ladder=a100_volumes", f"results_dir={results}")
    assert out.returncode == 2 and "unknown ladder 'a100_volumes'" in out.stdout + out.stderr
    assert "Traceback" not in out.stdout + out.stderr


@pytest.mark.slow
@pytest.mark.parametrize("ladder", ["a100_volume", "a100_option_a", "resnet50_storage"])
def test_the_a100_ladders_baseline_is_data_bound_as_the_guides_was(ladder, results):
    # the guide: an 18 s step of which 15-17 s wait for data; here the storage wait is ~10x the CPU's model step
    out = harness_cli("diagnose", f"+ladder={ladder}", f"results_dir={results}")
    assert said(out, "data-bound: the loader delivers"), out.stdout + out.stderr
    train = load_runs(results).query("mode == 'train'").iloc[0]
    assert train["data_wait_frac"] >= 0.8
