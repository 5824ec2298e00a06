"""The parts of a step in the table: the compute part's speedup beside the whole loop's, the reading line where
they differ, claims about one part (data, compute, validation), claims with no figure, and knobs that cannot act
where they were measured. Synthetic records only: no run, no timing."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from harness.analysis.views import components, render
from harness.analysis.views import table as table_mod
from harness.store import COLUMNS, RunRecord
from harness.config import ladder as ladder_mod

STEPS = 20


def _record(rung: int, *, samples_per_s: float, step_ms: float, wait_ms: float = 0.0, device: str = "cpu",
            device_ms: float | None = None, batch: int = 4, run: int = 0, change: str = "", claim=None,
            component: str = "", config: dict | None = None, step_list=None, workload: str = "unet3d") -> RunRecord:
    low, high, label = claim if claim is not None else (None, None, "")
    steps = step_list if step_list is not None else [step_ms + 0.01 * (i % 3) for i in range(STEPS)]
    return RunRecord(
        run_id=f"r{rung}-{run}", status="ok", timestamp=f"2026-11-22T10:{rung:02d}:{run:02d}", workload=workload,
        round=run, size="smoke", device=device, env_key="e", sweep_id="s", ladder="no-such-ladder", rung=rung,
        change=change if rung else "", samples_per_step=batch, samples_per_s=samples_per_s,
        step_ms=steps, data_wait_ms=[wait_ms] * len(steps), step_ms_p50=step_ms,
        data_wait_frac=wait_ms / step_ms, warmup_steps=3, measured_steps=len(steps),
        device_step_ms=[device_ms] * len(steps) if device_ms is not None else [],
        device_step_ms_p50=device_ms, cpu_model="cpu", cpu_count=2, gpu_name="GPU", gpu_count=1,
        ladder_sha="0123456789abcdef", claim_low=low, claim_high=high, claim_label=label,
        claim_source="guide" if label else "", claim_component=component, config_json=json.dumps(config or {}))


def _frame(records: list[RunRecord]) -> pd.DataFrame:
    return pd.DataFrame([{c: getattr(r, c) for c in COLUMNS} for r in records])


def _phase2_on_a_gpu(repeats: int = 3) -> pd.DataFrame:
    """phase2's shape on the H100: bf16 moves the device's step 32 -> 27 ms while the loop waits on data 75%."""
    rows = []
    for run in range(repeats):
        jitter = 1 + 0.01 * run
        rows.append(_record(0, samples_per_s=54 * jitter, step_ms=74, wait_ms=55, device="cuda", device_ms=32.0,
                            run=run))
        rows.append(_record(1, samples_per_s=58 * jitter, step_ms=69, wait_ms=50, device="cuda", device_ms=27.0,
                            run=run, change="precision=bf16-mixed", claim=(2.0, 3.0, "2-3x")))
    return _frame(rows)


def test_the_compute_column_is_the_devices_own_step_on_a_gpu_and_a_reading_says_why_the_loop_did_not_follow():
    table = table_mod.build_table(_phase2_on_a_gpu(), "s")
    bf16 = table.rows[1]
    assert bf16.parts.compute_source == "device" and bf16.parts.compute_ms == pytest.approx(27.0)
    assert bf16.parts.x_compute.value == pytest.approx(32.0 / 27.0, rel=1e-3)
    assert bf16.x_previous.value == pytest.approx(58 / 54, rel=1e-3)
    text = render.to_markdown(table)
    assert "| compute x previous |" in text and f"| {32 / 27:.2f}x |" in text
    assert (f"precision=bf16-mixed: the device's step {32 / 27:.2f}x faster per sample, end to end 1.07x; "
            "the loop is data-bound: 74% -> 72% waiting.") in text
    assert "the device's own step time (CUDA events)" in text
    assert render.row_cells(table.rows[0])[render.HEADER.index(render.COMPUTE_HEADER)] == "-"


def test_on_a_cpu_the_compute_part_is_the_step_minus_the_data_wait_per_sample():
    # batch 4 -> 8: the step 100 -> 150 ms of which 50 ms waiting both times: compute 50 -> 100 ms for twice the samples
    frame = _frame([_record(0, samples_per_s=40, step_ms=100, wait_ms=50),
                    _record(1, samples_per_s=53, step_ms=150, wait_ms=50, batch=8, change="batch_size=8")])
    table = table_mod.build_table(frame, "s")
    parts = table.rows[1].parts
    assert parts.compute_source == "host" and parts.compute_ms == pytest.approx(100.0, abs=0.02)
    assert parts.x_compute.value == pytest.approx(1.0, abs=0.01)
    assert "step time minus the time waiting on the loader" in render.to_markdown(table)


def test_no_reading_when_the_compute_part_and_the_loop_moved_alike():
    frame = _frame([_record(0, samples_per_s=40, step_ms=100), _record(1, samples_per_s=80, step_ms=50,
                                                                       change="precision=bf16-mixed")])
    table = table_mod.build_table(frame, "s")
    assert table.rows[1].parts.x_compute.value == pytest.approx(2.0, rel=1e-3) and table.readings == []


def test_a_claim_about_the_compute_part_is_judged_on_it_and_marked_so():
    rows = []
    for run in range(3):
        rows.append(_record(0, samples_per_s=50 + run * 0.1, step_ms=80, wait_ms=60, device="cuda",
                            device_ms=30.0 + 0.3 * run, run=run))
        rows.append(_record(1, samples_per_s=51 + run * 0.1, step_ms=78, wait_ms=58, device="cuda",
                            device_ms=20.0 + 0.2 * (2 - run), run=run, change="tf32=true", claim=(1.5, 1.5, "1.5x"),
                            component="compute"))
    table = table_mod.build_table(_frame(rows), "s")
    row = table.rows[1]
    assert row.component_measured.value == pytest.approx(1.5, rel=0.01)
    assert row.verdict == "confirms (compute 1.50x)"  # end to end (1.02x) it would fall short
    assert "| 1.5x (compute) | confirms (compute 1.50x) |" in render.to_markdown(table)


def test_a_claim_about_data_loading_is_judged_on_the_loaders_pace():
    def sweep(wait_after: float, after: float) -> table_mod.SweepTable:
        rows = []
        for run in range(3):
            rows.append(_record(0, samples_per_s=10 + run * 0.01, step_ms=100, wait_ms=90, run=run))
            rows.append(_record(1, samples_per_s=after + run * 0.01, step_ms=100, wait_ms=wait_after, run=run,
                                change="data.num_workers=4", claim=(2.0, 3.0, "2-3x"), component="data"))
        return table_mod.build_table(_frame(rows), "s")

    still_waiting = sweep(wait_after=60, after=25)  # the loop still waits: its pace is the loader's
    assert still_waiting.rows[1].verdict == "confirms (data: loader 2.50x)"
    outran = sweep(wait_after=1, after=15)  # the model sets the pace now: 1.5x is only a lower bound
    assert outran.rows[1].verdict.startswith("inconclusive (data: loader at least 1.50x; the loop now waits 1%")
    assert "| 2-3x (data) |" in render.to_markdown(outran)


def test_a_data_claim_is_not_measurable_where_the_loop_did_not_wait_on_data():
    rows = [_record(0, samples_per_s=10, step_ms=100, wait_ms=5),
            _record(1, samples_per_s=10, step_ms=100, wait_ms=1, change="data.num_workers=4",
                    claim=(2.0, 3.0, "2-3x"), component="data")]
    table = table_mod.build_table(_frame(rows), "s")
    assert table.rows[1].verdict.startswith("not measurable here: the loop waited on data 5% of its step")


def test_a_validation_claim_is_judged_on_the_passes_time_per_training_sample():
    # every 5 steps a pass adds 50 ms, then every 10 steps: validation's share halves, the step barely moves
    def steps(every: int, extra: float) -> list[float]:
        return [100.0 + (extra if (3 + i + 1) % every == 0 else 0.0) for i in range(STEPS)]

    def sweep(rounds: int) -> table_mod.SweepTable:
        rows = []
        for run in range(rounds):  # the passes' cost 1% apart from round to round
            extra = 50.0 * (1 + 0.01 * run)
            rows.append(_record(0, samples_per_s=38, step_ms=100, step_list=steps(5, extra), run=run,
                                config={"val": {"every_n_steps": 5}}))
            rows.append(_record(1, samples_per_s=39, step_ms=100, step_list=steps(10, extra * (1 + 0.002 * run)),
                                run=run, config={"val": {"every_n_steps": 10}}, change="val.every_n_steps=10",
                                claim=(1.9, 2.1, "1.9-2.1x"), component="validation"))
        return table_mod.build_table(_frame(rows), "s")

    two = sweep(2).rows[1]
    assert two.component_measured.value == pytest.approx(2.0 / 1.001, rel=1e-3)
    assert two.component_measured.method == "rung x round model, pooled variance"
    assert two.verdict == "confirms (validation 2.00x)"
    # one run a rung: a part of the step has no calibration of its own, so no band and no verdict, said so
    one = sweep(1).rows[1]
    assert one.component_measured.value == pytest.approx(2.0, rel=1e-6)
    assert one.verdict == components.NO_PART_BAND + " (validation 2.00x)"


def test_a_claim_with_no_figure_reports_the_measured_effect_and_no_verdict():
    config = {"data": {"pin_memory": True}}
    rows = [_record(0, samples_per_s=40, step_ms=100, device="cuda", device_ms=90, config=config),
            _record(1, samples_per_s=40.8, step_ms=98, device="cuda", device_ms=90, change="log_every_n_steps=50",
                    claim=(None, None, "minor"))]
    table = table_mod.build_table(_frame(rows), "s")
    assert table.rows[1].verdict == "no figure claimed: 1.02x, no band (no variance known)"  # one run a rung
    assert "| minor | no figure claimed: 1.02x, no band (no variance known) |" in render.to_markdown(table)


@pytest.mark.parametrize("device,workload,change,config,reason", [
    ("cpu", "unet3d", "log_every_n_steps=50", {},
     "log_every_n_steps saves no device sync on a CPU: reading the loss waits for no device queue; fewer logging "
     "steps save only their metrics lines, a small write each"),
    ("cuda", "detr", "log_every_n_steps=200", {},
     "log_every_n_steps saves no device sync on detr: its Hungarian matcher copies predictions to the host every "
     "step, a sync of its own; fewer logging steps save only their metrics lines, a small write each"),
    ("cuda", "unet3d", "data.non_blocking=true", {"data": {"pin_memory": False}},
     "data.non_blocking cannot act without pinned memory"),
    ("cpu", "unet3d", "data.non_blocking=true", {}, "data.non_blocking cannot act on a CPU"),
    ("cpu", "seresnet_speech", "cudnn_deterministic=false", {}, "cudnn_deterministic cannot act on a CPU"),
])
def test_a_knob_that_cannot_act_here_gets_a_note_not_a_verdict(device, workload, change, config, reason):
    rows = [_record(0, samples_per_s=40, step_ms=100, device=device, device_ms=90 if device == "cuda" else None,
                    workload=workload, config=config),
            _record(1, samples_per_s=38, step_ms=105, device=device, device_ms=90 if device == "cuda" else None,
                    workload=workload, config=config, change=change, claim=(1.0, 1.05, "1-1.05x"))]
    table = table_mod.build_table(_frame(rows), "s")
    assert table.rows[1].verdict == components.NOT_JUDGED and reason in table.rows[1].note


def test_the_same_knobs_act_where_they_can():
    config = {"data": {"pin_memory": True}}
    rows = [_record(0, samples_per_s=40, step_ms=100, device="cuda", device_ms=90, config=config),
            _record(1, samples_per_s=44, step_ms=91, device="cuda", device_ms=90, config=config,
                    change="log_every_n_steps=50", claim=(1.0, 1.05, "1-1.05x"))]
    table = table_mod.build_table(_frame(rows), "s")
    assert table.rows[1].note == "" and table.rows[1].verdict != components.NOT_JUDGED


def test_word_and_component_claims_travel_with_the_records():
    lad = ladder_mod.parse("w", {"rungs": [
        {"set": {"log_every_n_steps": 10}, "claim": "minor", "source": "Level 1 #5"},
        {"set": {"data.num_workers": 4}, "claim": [2, 3], "component": "data", "source": "Phase 2"}],
        "group_claims": [{"rungs": [1, 2], "claim": [1.2, 1.4], "component": "compute", "source": "g"}]})
    word = ladder_mod.claim_fields(lad, 1)
    assert word["claim_low"] is None and word["claim_label"] == "minor" and "claim_component" not in word
    data = ladder_mod.claim_fields(lad, 2)
    assert (data["claim_low"], data["claim_label"], data["claim_component"]) == (2.0, "2-3x", "data")
    assert json.loads(data["group_claims_json"])[0]["component"] == "compute"


@pytest.mark.parametrize("entry,message", [
    ({"set": {"batch_size": 4}, "claim": [2, 3], "component": "loader"}, r"unknown claim component .* 'loader'"),
    ({"set": {"batch_size": 4}, "component": "data"}, r"component 'data' without a claim"),
    ({"set": {"batch_size": 4}, "claim": ""}, r"a claim with no figure needs the guide's word"),
    ({"set": {"batch_size": 4}, "claims": [2, 3]}, r"unknown field of rung 1 in ladder 'w': 'claims'"),
])
def test_a_bad_claim_is_refused_naming_it(entry, message):
    with pytest.raises(ValueError, match=message):
        ladder_mod.parse("w", {"rungs": [entry]})


def test_a_total_claim_needs_a_figure():
    with pytest.raises(ValueError, match=r"total_claim 'minor' has no figure"):
        ladder_mod.parse("w", {"rungs": [{"set": {"batch_size": 4}}], "total_claim": "minor"})


def test_a_data_bound_window_shorter_than_two_waves_of_its_workers_says_so():
    # 16 workers, 5 measured steps, 90% waiting: a wave is 16 batches, the window a third of one; 40 steps: two
    # and a half waves, no note; 5 steps of a compute-bound loop: no note either
    def runs(steps: int, wait_ms: float, accum: int = 1):
        config = {"data": {"num_workers": 16}, "accumulate_grad_batches": accum}
        return [_record(0, samples_per_s=4, step_ms=100, wait_ms=wait_ms, run=r, config=config,
                        step_list=[100.0] * steps) for r in range(3)]

    note = table_mod.build_table(_frame(runs(5, 90.0)), "s").rows[0].note
    assert note == ("its window of 5 steps waited on data and is shorter than two waves of the loader's 16 workers "
                    "(they hand over 16 batches together, then none until the next): it cannot measure their pace; "
                    "measure.steps=32 can")
    assert not table_mod.build_table(_frame(runs(40, 90.0)), "s").rows[0].note
    assert not table_mod.build_table(_frame(runs(5, 5.0)), "s").rows[0].note
    assert not table_mod.build_table(_frame(runs(8, 90.0, accum=4)), "s").rows[0].note  # 32 micro-batches
    # 20 steps of 4 workers in step: five waves, each one long wait and three short ones: up to a fifth off; the same
    # wait spread over every step (workers drifted apart), or 40 steps (ten waves): no note
    def waves(steps: int, in_step: bool):
        config = {"data": {"num_workers": 4}}
        waits = [200.0, 1.0, 1.0, 1.0] * (steps // 4) if in_step else [50.75] * steps
        out = []
        for r in range(3):
            rec = _record(0, samples_per_s=4, step_ms=100, run=r, config=config, step_list=[w + 5 for w in waits])
            rec.data_wait_ms = waits
            out.append(rec)
        return out

    assert table_mod.build_table(_frame(waves(20, True)), "s").rows[0].note == (
        "its loader's 4 workers hand over their batches in waves (99% of the window's data wait fell on one step in "
        "4): a window of 20 steps holds 5 waves and can be off their pace by up to 1/5; measure.steps=32 makes that "
        "1/8")
    assert not table_mod.build_table(_frame(waves(20, False)), "s").rows[0].note
    assert not table_mod.build_table(_frame(waves(40, True)), "s").rows[0].note
    epochs = waves(20, True)
    for rec in epochs:  # an epoch of 4 steps: the waits' period is the epoch's (its workers start again)
        rec.config_json = json.dumps({"data": {"num_workers": 4, "epoch_steps": 4}})
    assert not table_mod.build_table(_frame(epochs), "s").rows[0].note
    # `harness run`'s card says it beside the data wait
    import io

    from rich.console import Console

    from harness.commands.console import run_summary

    out = io.StringIO()
    Console(file=out, width=300).print(run_summary(runs(5, 90.0)[0]))
    assert "90.0 % of the measured time  its window of 5 steps waited on data and is shorter than two waves" in \
        out.getvalue()


def test_records_written_before_claim_components_read_back_as_whole_step_claims(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from harness.store import load_runs, write_record

    old = _record(1, samples_per_s=10, step_ms=100, change="batch_size=8", claim=(1.3, 1.5, "1.3-1.5x"))
    frame = pd.DataFrame([{c: getattr(old, c) for c in COLUMNS if c != "claim_component"}])
    (tmp_path / "runs").mkdir()
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), tmp_path / "runs" / "old.parquet")
    new = _record(2, samples_per_s=20, step_ms=50, change="data.num_workers=4", claim=(2.0, 3.0, "2-3x"),
                  component="data")
    write_record(new, tmp_path)
    got = load_runs(tmp_path).set_index("rung")["claim_component"].fillna("")
    assert got[1] == "" and got[2] == "data"


def test_a_window_that_opened_on_batches_queued_in_the_warm_up_says_so():
    # the first 10 steps served from the queue the workers filled while the model compiled, then 80 ms of each
    # 100 ms step waiting on the loader: the note; an even wait throughout: none
    queued = [_record(0, samples_per_s=40, step_ms=100, step_list=[20.0] * 10 + [100.0] * 10),
              _record(1, samples_per_s=40, step_ms=100, step_list=[100.0] * 20, change="compile=default")]
    queued[0].data_wait_ms = [0.0] * 10 + [80.0] * 10
    queued[1].data_wait_ms = [80.0] * 20
    table = table_mod.build_table(_frame(queued), "s")
    assert table.rows[0].note.startswith("the window opened on batches made during the warm-up: waiting on data 0% "
                                         "of its first third, 80% of its last")
    assert "warm-up" not in (table.rows[1].note or "")


def test_a_run_of_the_loader_alone_has_no_compute_part_to_compare():
    # diagnose's sweep on an H200: the model-alone rung read "compute x previous 0.00x" against the loader-alone rung
    loader = {"mode": "loader", "device": "cuda", "step_ms": [30.0, 31.0], "data_wait_ms": [29.6, 30.5],
              "device_step_ms": [], "samples_per_step": 4, "round": 0}
    model = {**loader, "mode": "model", "data_wait_ms": [0.0, 0.0], "device_step_ms": [28.0, 29.0]}
    assert components.parts_of(pd.DataFrame([loader])).compute is None
    parts = components.parts_of(pd.DataFrame([model]))
    assert parts.compute_source == "device" and set(parts.compute) == {0}
