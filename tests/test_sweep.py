"""Sweeps end to end on the CPU: one record per rung, one knob per rung, cache, resume, faults."""

import json

import pytest

from harness.store import load_runs
from tests.conftest import REPO, TINY_MODEL_ARGS, TINY_STEPS_ARGS, copy_store, harness_cli, in_process

TINY = (*TINY_MODEL_ARGS, *TINY_STEPS_ARGS)  # what each rung trains is not what these tests are about


def _sweep(results, *args):
    # one round unless a test asks for more (the default, repeats=auto, measures until decided); one record a rung
    # and round however busy the machine (a busy run is measured again by default)
    return harness_cli("sweep", "sweep.repeats=1", *args, *TINY, "sweep.remeasure_busy=false", f"results_dir={results}")


def _refused(results, capfd, *args):
    """A sweep refused before anything runs, in this process (``in_process``): its exit code and stderr."""
    out = in_process(capfd, "sweep", "sweep.repeats=1", *args, *TINY, "sweep.remeasure_busy=false",
                     f"results_dir={results}")
    return out.returncode, out.stderr


def _flat(d, prefix=""):
    out = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def test_phase2_climbs_one_knob_per_rung_then_reruns_from_the_cache(measured_sweep, tmp_path):
    frame = load_runs(measured_sweep.results).sort_values("rung")
    assert list(frame["rung"]) == [0, 1, 2, 3] and set(frame["status"]) == {"ok"}
    assert list(frame["change"]) == ["", "precision=bf16-mixed", "batch_size=8", "data.num_workers=4"]
    # the tiny model is a user's own, inline: it trained in each rung's process
    assert set(frame["workload"]) == {"custom"} and set(frame["unit"]) == {"samples"}
    assert (frame["loss_first"] > 0).all()
    configs = [_flat(json.loads(c)) for c in frame["config_json"]]
    for before, after, change in zip(configs, configs[1:], frame["change"].iloc[1:]):
        changed = {k for k in before if before[k] != after[k] and not k.startswith("sweep.")}
        assert changed == {change.split("=")[0]}
    for column in ("samples/s", "x baseline", "x previous", "guide claims", "verdict", "2-3x", "Total: measured"):
        assert column in measured_sweep.stdout
    # forked from one warm launcher, each run's wall time split into its phases, and the duty cycle said
    assert set(frame["launched_by"]) == {"fork"} and frame["phase_launch_s"].notna().all()
    assert frame["phase_gap_s"].notna().all() and (frame["phase_wall_s"] > frame["measured_s"]).all()
    assert "duty cycle " in measured_sweep.stdout and "4 runs measured" in measured_sweep.stdout

    results = copy_store(measured_sweep.results, tmp_path / "results")
    again = harness_cli(*measured_sweep.args, f"results_dir={results}")  # the same sweep again
    assert again.returncode == 0 and "duty cycle" not in again.stdout  # it measured nothing
    frame = load_runs(results)
    second = frame[frame["sweep_id"] != frame.loc[frame["cached_from"] == "", "sweep_id"].iloc[0]]
    assert len(second) == 4 and (second["cached_from"] != "").all()  # no rung ran again
    # the claims travel with the records, cached copies included
    for records in (frame[frame["cached_from"] == ""], second):
        by_rung = records.set_index("rung")
        assert by_rung.loc[1, "claim_label"] == "2-3x" and by_rung.loc[3, "total_claim_label"] == "3-4x"
        assert by_rung.loc[0, "claim_label"] == "" and len(by_rung.loc[0, "ladder_sha"]) == 16
    assert "(cached)" in again.stdout  # how much faster it was depends on the machine: not asserted here


def test_an_interrupted_sweep_resumes_at_the_first_rung_not_measured(measured_sweep, tmp_path):
    results = copy_store(measured_sweep.results, tmp_path / "results")
    frame = load_runs(results)
    for run_id in frame.loc[frame["rung"] == 3, "run_id"]:  # as if killed before the last rung finished
        (results / "runs" / f"{run_id}.parquet").unlink()
    out = harness_cli(*measured_sweep.args, f"results_dir={results}")
    assert out.returncode == 0, out.stdout + out.stderr
    latest = load_runs(results)
    latest = latest[latest["sweep_id"] == latest.sort_values("timestamp")["sweep_id"].iloc[-1]].sort_values("rung")
    assert list(latest["cached_from"] != "") == [True, True, True, False]


def test_a_faulted_rung_is_recorded_and_later_rungs_build_on_the_last_ok_one(results):
    out = _sweep(results, "+ladder=selftest")
    assert out.returncode == 0, out.stdout + out.stderr
    frame = load_runs(results).sort_values("rung")
    assert list(frame["status"]) == ["ok", "ok", "oom", "ok"]
    last = json.loads(frame["config_json"].iloc[3])
    assert last["debug"]["fault"] == "none" and last["batch_size"] == 4 and last["log_every_n_steps"] == 10
    assert "| oom" in out.stdout and "built on rung 1" in out.stdout


@pytest.mark.slow  # a whole sweep in fresh processes: the default tier keeps test_sweep_rounds' (fake measurements)
def test_repeats_interleave_rounds_in_serpentine_order(results):
    # the two rungs of ladder bf16: the second round starts at the last rung, not at the baseline (the order of a
    # longer ladder, three rungs, without running it: test_the_loop_runs_rounds_outermost_and_labels_each_turn)
    out = _sweep(results, "+ladder=bf16", "sweep.repeats=2")
    assert out.returncode == 0
    frame = load_runs(results).sort_values("timestamp", kind="stable")
    order = [(int(r), int(k)) for r, k in zip(frame["round"], frame["rung"]) if r == r]
    measured = list(dict.fromkeys(order))  # a run of a busy machine is measured again in its round
    assert measured == [(0, 0), (0, 1), (1, 1), (1, 0)]
    assert " x2" in out.stdout  # the table reports both repeats per rung


def test_the_loop_runs_rounds_outermost_and_labels_each_turn():
    from harness.config import ladder as ladder_mod
    from harness.sweeps import loop

    turns = loop.turns(ladder_mod.load("precision"), 2)
    assert [(t.round_, t.rung.index) for t in turns] == [(0, 0), (0, 1), (0, 2), (1, 2), (1, 1), (1, 0)]
    assert turns[4].label == "[rung 2/3, round 2/2]" and loop.turns(ladder_mod.load("precision"), 1)[0].label == \
        "[rung 1/3]"


def test_override_of_what_the_ladder_varies_is_refused(results, capfd):
    code, err = _refused(results, capfd, "+ladder=phase2", "precision=bf16-mixed")
    assert code == 2
    assert "precision is what ladder 'phase2' varies" in err
    assert not results.exists()


def test_without_a_ladder_or_with_an_unknown_one_the_ladders_are_listed(results, capfd):
    code, err = _refused(results, capfd)
    assert code == 2 and "phase2" in err and "+ladder=NAME" in err
    code, err = _refused(results, capfd, "+ladder=phase9")
    assert code == 2 and "unknown ladder 'phase9'" in err


def test_a_ladder_in_a_config_folder_is_found_and_an_unknown_one_says_where_it_looked(results, tmp_path, capfd):
    mine = tmp_path / "conf"
    (mine / "ladder").mkdir(parents=True)
    (mine / "ladder" / "two.yaml").write_text("workload: resnet50\nrungs:\n  - set: {channels_last: true}\n")
    # found: the sweep gets as far as checking the overrides against what the ladder varies
    code, err = _refused(results, capfd, "--config-dir", str(mine), "+ladder=two", "channels_last=false")
    assert code == 2 and "channels_last is what ladder 'two' varies" in err
    code, err = _refused(results, capfd, "--config-dir", str(mine), "+ladder=too")
    first = err.splitlines()[0]
    assert code == 2 and first.startswith("error: unknown ladder 'too'. Did you mean 'two'?")
    shipped = REPO / 'harness' / 'conf' / 'ladder'
    assert first.endswith(f"(looked in {shipped}, {mine / 'ladder'}, {results / 'ladders'})")
    assert not results.exists()


def test_table_renders_a_measured_sweep_as_csv(measured_sweep, capsys):
    # that the table loads neither torch nor Hydra: test_layers, which runs every analysis command in a fresh process
    from harness.commands import table

    assert table.main("table", ["--results", str(measured_sweep.results), "--format", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("sweep_id,rung,change,samples/s") and len(lines) == 1 + 4
    assert [line.split(",")[2] for line in lines[1:]] == ["(baseline)", "precision=bf16-mixed", "batch_size=8",
                                                                    "data.num_workers=4"]


def test_batch_ladder_stops_cleanly_at_the_first_oom_and_the_table_says_where(tmp_path):
    from harness.config import ladder as ladder_mod
    from harness.sweeps import rungs as sweep_mod
    from harness.analysis.views.render import render
    from harness.analysis.views.table import build_table
    from harness.run.parent.runner import Machine
    from harness.store import RunRecord, write_record

    lad = ladder_mod.load("batch")
    for rung, status in ((0, "ok"), (1, "ok"), (2, "oom")):
        write_record(RunRecord(run_id=f"r{rung}", status=status, timestamp=f"2026-11-21T10:00:0{rung}", sweep_id="s",
                               ladder="batch", rung=rung, change=lad.rungs[rung].change("smoke"), workload="unet3d",
                               device="cpu", cpu_model="x", cpu_count=2,
                               samples_per_s=10.0 * (rung + 1) if status == "ok" else None,
                               step_ms=[10.0] * 10 if status == "ok" else []), tmp_path)
    ctx = sweep_mod.SweepContext(sweep_id="s", ladder=lad, settings={"results_dir": str(tmp_path)},
                                 user_keys=frozenset())
    outcome = sweep_mod.run_rung(ctx, 3, 0, Machine(cuda_available=False))
    assert outcome.record is None and outcome.how == "not run"
    assert outcome.message == "memory ran out at rung 2; the ladder stops there"
    text = render(build_table(load_runs(tmp_path), "s"))
    assert "memory ran out at rung 2 (batch_size=4); the ladder stopped there" in text


def test_several_values_for_one_setting_are_refused(results, capfd):
    code, err = _refused(results, capfd, "+ladder=phase2", "model.width=0.5,1.0")
    assert code == 2 and "'model.width=0.5,1.0' gives several values" in err
    assert not results.exists()


def test_several_ladders_without_m_are_refused_with_the_campaign_command(results, capfd):
    code, err = _refused(results, capfd, "+ladder=phase2,bf16")
    assert code == 2 and "'+ladder=phase2,bf16' gives several ladders; a sweep climbs one ladder. Add -m" in err
    assert "(python -m harness sweep -m sweep.repeats=1 +ladder=phase2,bf16 " in err and "unknown ladder" not in err
    assert not results.exists()
