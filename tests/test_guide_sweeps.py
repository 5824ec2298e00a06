"""The SEResNet speech and DETR fast ladders swept whole at the CPU size (slow tier: tens of minutes each on a busy
2-core CPU): every rung runs (or is skipped with its reason where only a GPU can act), each claim sits on its rung,
and the epoch claim's runs carry the validation loader's worker starts. No timing or verdict is asserted: a busy
machine's runs get none."""

from __future__ import annotations

import json

import pytest

from harness.analysis.views import epochs
from harness.config import ladder as ladder_mod
from harness.config import workload as workloads
from harness.store import load_runs
from tests.conftest import harness_cli


def _sweep(tmp_path, ladder: str, *settings: str) -> tuple[str, dict[str, dict[str, str]]]:
    out = harness_cli("sweep", f"+ladder={ladder}", *settings, "sweep.repeats=1", "sweep.remeasure_busy=false",
                      f"results_dir={tmp_path / 'results'}", timeout=3500)
    print(out.stdout)  # the table, for whoever reads the slow tier's output (-rP)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = [line for line in out.stdout.splitlines() if line.startswith("| ")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[1:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == len(head):
            rows[cells[1]] = dict(zip(head, cells))
    return out.stdout, rows


@pytest.mark.slow
def test_the_seresnet_ladder_sweeps_at_the_cpu_size_and_derives_its_epoch_claim_with_the_evaluation_starts(tmp_path):
    """seresnet at the CPU size (the 1D model on 0.5 s clips; the 2D one is the full size's): rung 3's persistent
    workers are judged at the guide's epoch of 10,000 samples, from the training loader's epoch starts and the
    evaluation loader's (2 workers from rung 2, started every pass until rung 3 keeps them). A window of 9 steps after
    one warm-up step holds one whole epoch of 5 (the derivation needs one) and two evaluation passes."""
    text, rows = _sweep(tmp_path, "seresnet", "measure.steps=9", "measure.warmup_steps=1")
    assert "Rungs 1-8 together" in text  # the guide's total: a group of its rungs
    persistent = rows["data.persistent_workers=true"]
    assert persistent["guide claims"] == "1.15-1.2x (per epoch of 10,000 samples)"
    assert rows["precision=16-mixed"]["guide claims"] == "2-3x"
    for change, row in rows.items():
        if change.startswith(("cudnn_benchmark", "cudnn_deterministic")):
            continue  # cuDNN: a GPU's (skipped, or noted as unable to act, on a CPU)
        assert row["status"].startswith("ok"), (change, row["status"])
    runs = load_runs(tmp_path / "results").set_index("rung")
    started, kept = epochs.cost_of(runs.loc[2]), epochs.cost_of(runs.loc[3])  # 4 + 2 workers; then persistent
    assert started.boundaries == kept.boundaries == 1  # steps 5-9 of the window 1-9
    assert started.val_start_ms == pytest.approx(started.boundary_ms * 2 / 4)  # a pass an epoch, 2 of 4 workers' cost
    assert kept.val_start_ms == 0.0


@pytest.mark.slow
def test_the_detr_fast_ladder_sweeps_at_the_cpu_size_with_tf32_first(tmp_path):
    """detr_fast at the CPU size: TF32 first (a CPU has none: its rung says it cannot act), then AMP, channels_last,
    the batch and the loading group (rungs 5-7) end to end. The CPU size's DETR is the ladder's smaller one (rungs 2-7
    run under FP16 autocast, slow kernels on a CPU)."""
    text, rows = _sweep(tmp_path, "detr_fast", "measure.steps=3", "measure.warmup_steps=1")
    changes = list(rows)
    assert changes[1:4] == ["tf32=true", "precision=16-mixed", "channels_last=true"]
    assert rows["tf32=true"]["guide claims"].startswith("1.5x")
    # the loading group at the CPU size: the guide's 4 -> 12 workers as 2 -> 6 (12 is past a 2-core CPU's bound)
    for change in ("batch_size=3", "data.num_workers=6", "data.prefetch_factor=6", "data.persistent_workers=true"):
        assert rows[change]["status"].startswith("ok"), (change, rows[change]["status"])
    assert "Rungs 5-7 together" in text
    models = load_runs(tmp_path / "results")["config_json"].map(lambda c: json.loads(c)["workload"]["model"])
    assert all(m["backbone"] == "resnet18" and m["num_decoder_layers"] == 1 for m in models)


def test_the_detr_fast_ladder_runs_the_guides_detr_at_the_full_size_and_a_smaller_one_at_the_cpu_size():
    lad = ladder_mod.load("detr_fast")
    full, smoke = lad.settings(0, "full"), lad.settings(0, "smoke")
    assert {k: full[k] for k in full if k.startswith("workload.model.")} == {
        "workload.model.backbone": "resnet50", "workload.model.num_encoder_layers": 6,
        "workload.model.num_decoder_layers": 6, "workload.model.dim_feedforward": 2048}
    assert workloads.builtin("detr").model == {**workloads.builtin("detr").model, **{
        k.removeprefix("workload.model."): v for k, v in full.items() if k.startswith("workload.model.")}}
    assert smoke["workload.model.backbone"] == "resnet18" and smoke["workload.model.num_encoder_layers"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("ladder, claims", [
    ("connectomics_quick", {"precision=bf16-mixed": "2-3x", "model.width=0.5": "2x"}),
    ("connectomics_fastest", {"model.width=0.5": "2-4x", "batch_size=8": "1.3-1.5x"}),
    ("a100_volume", {"batch_size=2": "2x", "data.num_workers=4": "2-3x"}),
])
def test_the_round_four_ladders_sweep_whole_at_the_cpu_size(tmp_path, ladder, claims):
    """The connectomics ladders from visualisation at the epoch's end (the framework's default; the last rung turns it
    off), and the A100 plan from its spawned, storage-bound start: every rung runs ok at the CPU size, each claim on
    its rung, the total on the whole ladder. No timing or verdict is asserted: a busy machine's runs get none."""
    text, rows = _sweep(tmp_path, ladder, "measure.steps=4", "measure.warmup_steps=1")
    for change, row in rows.items():
        assert row["status"].startswith("ok"), (change, row["status"])
    for change, claim in claims.items():
        assert rows[change]["guide claims"].startswith(claim), (change, rows[change]["guide claims"])
    assert len(rows) == len(ladder_mod.load(ladder).rungs)  # the baseline (rung 0) and every rung
    runs = load_runs(tmp_path / "results")
    assert set(runs["status"]) == {"ok"}
