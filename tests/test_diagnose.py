"""`diagnose` end to end on the CPU. Which verdict a setting gets depends on how fast this machine's
loader and model are (and on what else runs on it), so the default tier checks what `diagnose` does
and stores; the verdicts for clear-cut settings are in the slow tier. The verdict rule itself is tested
on fixed rates in test_data.py::test_diagnosis_verdicts_from_rates."""

import pytest

from harness.store import load_runs
from tests.conftest import harness_cli

TINY = ("measure.steps=8", "measure.warmup_steps=2")


VERDICTS = ("data-bound: the loader delivers", "compute-bound: the loader delivers", "balanced")


def test_diagnose_stores_three_parts_and_prints_a_verdict_with_its_numbers(results):
    out = harness_cli("diagnose", "workload=unet3d", *TINY, f"results_dir={results}")
    assert out.returncode == 0, out.stdout + out.stderr
    assert any(v in out.stdout for v in VERDICTS), out.stdout
    frame = load_runs(results)
    assert sorted(frame["mode"]) == ["loader", "model", "train"] and set(frame["status"]) == {"ok"}
    assert frame.loc[frame["mode"] == "loader", "loss_last"].isna().all()


@pytest.mark.slow
def test_heavy_3d_augmentation_with_no_workers_is_data_bound(results):
    out = harness_cli("diagnose", "workload=unet3d", "data=disk", "data.augment=heavy", "model.width=0.5", *TINY,
                      f"results_dir={results}")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "data-bound: the loader delivers" in out.stdout and "more loader workers" in out.stdout
    frame = load_runs(results)
    assert sorted(frame["mode"]) == ["loader", "model", "train"] and set(frame["ladder"]) == {"diagnose"}


@pytest.mark.slow
def test_a_large_model_on_in_memory_data_is_compute_bound(results):
    out = harness_cli("diagnose", "workload=unet3d", "model.width=4", *TINY, f"results_dir={results}")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "compute-bound: the loader delivers" in out.stdout


@pytest.mark.slow
def test_a_worker_takes_data_wait_off_a_data_bound_loop(results):
    from harness.run import runner
    from tests.conftest import tiny_config

    waits = {}
    for workers in (0, 1):
        cfg = tiny_config(data__source="disk", data__cache="none", data__augment="heavy", model__width=0.5,
                          data__num_workers=workers, measure__steps=8, measure__warmup_steps=2,
                          results_dir=str(results))
        runner.prepare_data(cfg, log=lambda *_: None)
        env, key = runner.environment(cfg.device)
        record = runner.run_and_store(cfg, env, key)
        assert record.status == "ok", record.error
        waits[workers] = record.data_wait_frac
    assert waits[0] > 0.3  # data-bound without workers
    assert waits[1] < waits[0] * 0.8


# --------------------------------------------------------------------------------------------
# a ladder's baseline: the A100 volume-model guide's data-bound start

A100_LADDERS = ("a100_volume", "a100_option_a", "a100_option_b", "a100_option_c")
SITUATION = ("batch_size", "data.num_workers", "data.prefetch_factor", "data.persistent_workers", "data.source",
             "data.cache", "data.page_cache", "data.read_latency_ms", "data.patch_size", "cpus")


def test_the_a100_ladders_start_from_one_situation_with_storage_far_slower_than_the_step():
    from harness.sweeps import ladder as ladder_mod

    for size in ("full", "smoke"):
        starts = {name: {k: ladder_mod.load(name).settings(0, size)[k] for k in SITUATION} for name in A100_LADDERS}
        assert len({repr(s) for s in starts.values()}) == 1, starts
        start = starts["a100_volume"]
        # the guide's start: batch 1, one worker prefetching one batch, every item read from storage
        assert (start["batch_size"], start["data.num_workers"], start["data.prefetch_factor"]) == (1, 1, 1)
        assert (start["data.source"], start["data.cache"], start["data.page_cache"]) == ("disk", "none", "drop")
    smoke = ladder_mod.load("a100_volume").settings(0, "smoke")
    assert smoke["data.read_latency_ms"] == 2000 and smoke["cpus"] == 1  # one compute thread: a short, steady step


def test_diagnose_takes_a_ladders_baseline_with_the_users_overrides_on_top(tmp_path):
    from harness.commands import diagnose, hydra_edge

    overrides = [f"results_dir={tmp_path}", "data.read_latency_ms=5"]
    plain = hydra_edge.plain_settings(hydra_edge.compose_settings(overrides))
    cfg = diagnose.ladder_baseline("a100_volume", plain, overrides)
    assert (cfg.workload.name, cfg.batch_size, cfg.data.num_workers, cfg.data.source, cfg.data.page_cache) == (
        "basic_unet3d", 1, 1, "disk", "drop")
    assert cfg.data.read_latency_ms == 5 and cfg.size == "smoke" and cfg.data.patch_size == [16, 32, 32]


def test_diagnose_with_an_unknown_ladder_names_it_and_exits_2(results):
    out = harness_cli("diagnose", "+ladder=a100_volumes", f"results_dir={results}")
    assert out.returncode == 2 and "unknown ladder 'a100_volumes'" in out.stdout + out.stderr
    assert "Traceback" not in out.stdout + out.stderr


@pytest.mark.slow
@pytest.mark.parametrize("ladder", ["a100_volume", "a100_option_a"])
def test_the_a100_ladders_baseline_is_data_bound_as_the_guides_was(ladder, results):
    # the guide: an 18 s step of which 15-17 s wait for data; here the storage wait is ~10x the CPU's model step
    out = harness_cli("diagnose", f"+ladder={ladder}", f"results_dir={results}")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "data-bound: the loader delivers" in out.stdout
    train = load_runs(results).query("mode == 'train'").iloc[0]
    assert train["data_wait_frac"] >= 0.8
