"""`diagnose` end to end on the CPU. Which verdict a setting gets depends on how fast this machine's
loader and model are (and on what else runs on it), so the default tier checks what `diagnose` does
and stores; the verdicts for clear-cut settings are in the slow tier. The verdict rule itself is tested
on fixed rates in test_data.py::test_diagnosis_verdicts_from_rates."""

import pytest

from harness.store import load_runs
from tests.conftest import TINY_MODEL_ARGS, harness_cli

TINY = ("measure.steps=8", "measure.warmup_steps=2")


VERDICTS = ("data-bound: the loader delivers", "compute-bound: the loader delivers", "balanced")


def test_diagnose_stores_three_parts_and_prints_a_verdict_with_its_numbers(results):
    # the tiny model: which verdict is not asserted here, so the parts' speed does not matter
    out = harness_cli("diagnose", *TINY_MODEL_ARGS, "measure.steps=3", "measure.warmup_steps=1",
                      f"results_dir={results}")
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
                          data__num_workers=workers, measure__steps=8, measure__warmup_steps=2, results_dir=str(results))
        runner.prepare_data(cfg, log=lambda *_: None)
        env, key = runner.environment(cfg.device)
        record = runner.run_and_store(cfg, env, key)
        assert record.status == "ok", record.error
        waits[workers] = record.data_wait_frac
    assert waits[0] > 0.3  # data-bound without workers
    assert waits[1] < waits[0] * 0.8
