"""The examples of a user's own training (examples/, docs/own-training.md) run as a user runs them: `python -m harness
run` in the default tier, a short `sweep +ladder=precision` (and the language model's `+ladder=batch`) in the slow
tier. Lightning and transformers come with the `test` extra."""

from __future__ import annotations

import importlib.util
import math

import pytest

from tests.conftest import ONE_ROUND, TINY_STEPS_ARGS, harness_cli


def _needs(package: str, extra: str):
    return pytest.mark.skipif(importlib.util.find_spec(package) is None,
                              reason=f"needs {package}: pip install -e '.[{extra}]' (the test extra has it)")


# workload, the unit it counts, units per sample at the smoke size, the loss's first value's range
EXAMPLES = [
    pytest.param("two_losses", "pixels", 32 * 32, (0.9, 2.5), id="two_losses"),
    pytest.param("lightning_seg3d", "voxels", 16 ** 3, (1.0, 3.0), id="lightning_seg3d",
                 marks=_needs("lightning", "lightning")),
    pytest.param("gpt2_lm", "tokens", 64, (6.0, 8.0), id="gpt2_lm", marks=_needs("transformers", "hf")),
    pytest.param("detection", "images", 1, (0.5, 5.0), id="detection"),
]
EXAMPLE = ("--config-dir", "examples/conf")


@pytest.mark.parametrize("workload,unit,per_sample,loss", EXAMPLES)
def test_each_example_runs_as_documented(workload, unit, per_sample, loss, results):
    from harness.store import load_runs

    out = harness_cli("run", *EXAMPLE, f"workload={workload}", *TINY_STEPS_ARGS, f"results_dir={results}")
    assert out.returncode == 0, out.stdout + out.stderr
    (record,) = load_runs(results).itertuples()
    assert (record.status, record.workload, record.unit) == ("ok", workload, unit)
    assert math.isclose(record.units_per_s, record.samples_per_s * per_sample, rel_tol=1e-9)
    assert loss[0] < record.loss_first < loss[1]
    assert f"{unit}/s" in out.stdout


@pytest.mark.slow
@pytest.mark.parametrize("workload,unit,per_sample,loss", EXAMPLES)
def test_each_example_sweeps_the_precision_ladder(workload, unit, per_sample, loss, results):
    from harness.store import load_runs

    out = harness_cli("sweep", *EXAMPLE, f"workload={workload}", "+ladder=precision", *TINY_STEPS_ARGS, *ONE_ROUND,
                      f"results_dir={results}")
    assert out.returncode == 0, out.stdout + out.stderr
    frame = load_runs(results).sort_values("rung")
    assert list(frame["change"]) == ["", "precision=bf16-mixed", "precision=16-mixed"]
    assert list(frame["status"]) == ["ok"] * 3 and set(frame["unit"]) == {unit}


@pytest.mark.slow
@_needs("transformers", "hf")
def test_the_language_model_sweeps_the_batch_ladder_in_tokens(results):
    from harness.store import load_runs

    out = harness_cli("sweep", *EXAMPLE, "workload=gpt2_lm", "+ladder=batch", *TINY_STEPS_ARGS, *ONE_ROUND,
                      f"results_dir={results}")
    assert out.returncode == 0, out.stdout + out.stderr
    frame = load_runs(results).sort_values("rung")
    ok = frame[frame["status"] == "ok"]
    assert list(ok["samples_per_step"])[:4] == [1, 2, 4, 8]
    assert all(math.isclose(t, s * 64, rel_tol=1e-9) for t, s in zip(ok["units_per_s"], ok["samples_per_s"]))
