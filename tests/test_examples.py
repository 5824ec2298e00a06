"""The examples of a user's own training (examples/, docs/own-training.md) run as a user runs them: `python -m harness
run` in the default tier, a short `sweep +ladder=precision` (and the language model's `+ladder=batch`) in the slow
tier. Lightning and transformers come with the `test` extra."""

from __future__ import annotations

import importlib.util
import math

import pytest

from tests.conftest import ONE_ROUND, REPO, TINY_STEPS_ARGS, harness_cli


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


@_needs("transformers", "hf")
def test_token_ids_beyond_the_vocabulary_are_refused_and_channels_last_on_them_is_skipped():
    from harness import config as config_mod
    from harness.commands import hydra_edge
    from harness.workload import preflight
    from harness.workload.applicability import not_applicable
    from harness.workload.step.interface import StepError

    def resolved(*extra: str) -> config_mod.RunConfig:
        overrides = hydra_edge.with_config_dirs(["--config-dir", str(REPO / "examples" / "conf"), "workload=gpt2_lm",
                                                 *extra])
        settings = config_mod.from_dict(hydra_edge.plain_settings(hydra_edge.compose_settings(overrides)))
        return config_mod.resolve(settings, cuda_available=False)

    with pytest.raises(StepError, match=r"^workload.num_classes=5000 draws token ids the model's vocabulary does not "
                                        r"have \(its config.vocab_size=1000\): set workload.num_classes to at most "
                                        r"1000$"):
        preflight.check_model_builds(resolved("workload.num_classes=5000"))
    preflight.check_model_builds(resolved())  # its own vocabulary: nothing to say
    assert not_applicable(resolved("channels_last=true")) == (
        "channels_last=true lays out 4-D and 5-D floating tensors; workload 'gpt2_lm' has batches of integer token "
        "ids [batch, length] (synthetic: tokens), so it would change nothing")
