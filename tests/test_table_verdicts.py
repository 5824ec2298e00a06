"""The table's verdicts on synthetic records (no torch, no runs): busy runs, one run a rung without a
calibration, rungs that did not run, bands too wide to say anything, the calibration stored with a sweep or
skipped, and how a sweep.repeats=auto sweep ended."""

from __future__ import annotations

import json
import math
import shlex

import pandas as pd
import pytest

from harness import config as config_mod
from harness.analysis.views import render
from harness.analysis.stats import speedup
from harness.analysis.views import table as table_mod
from harness.commands import hydra_edge
from harness.store import COLUMNS, RunRecord

BUSY = "no verdict: machine busy (other processes used 50% of the CPUs): not trustworthy"


def frame(sweep_id: str, throughputs: list[list[float | None]], day: int = 2, busy=(), failed=(), ladder="sim",
          **fields) -> pd.DataFrame:
    """A sweep's records as the store returns them: rung k's run of round r gave throughputs[k][r] samples/s;
    ``busy`` and ``failed``: (rung, round) cells measured with other processes at 50% of the CPUs, or oom."""
    rows = []
    for rung, values in enumerate(throughputs):
        for rnd, sps in enumerate(values):
            oom = (rung, rnd) in failed
            rows.append(RunRecord(
                run_id=f"{sweep_id}-{rung}-{rnd}", status="oom" if oom else "ok",
                timestamp=f"2024-06-{day:02d}T10:{rnd:02d}:{rung:02d}+0000", workload="unet3d", size="smoke",
                device="cpu", config_hash=f"cfg-{rung}", env_key="env-sim", sweep_id=sweep_id, ladder=ladder,
                rung=rung, change=f"knob{rung}=on" if rung else "", round=rnd, samples_per_step=2,
                samples_per_s=None if oom else sps, cpu_model="Sim CPU", cpu_count=2,
                other_cpu_pct=50.0 if (rung, rnd) in busy else 1.0, **fields))
    return pd.DataFrame([{c: getattr(r, c) for c in COLUMNS} for r in rows])


def with_claims(records: pd.DataFrame, claims: dict, total=None) -> pd.DataFrame:
    """Claims stored with the records, as a sweep stores them (``{rung: (low, high)}``, total (low, high))."""
    records = records.assign(ladder_sha="0123456789abcdef")
    for rung, (low, high) in claims.items():
        at = records["rung"] == rung
        records.loc[at, ["claim_low", "claim_high", "claim_label", "claim_source"]] = [low, high, f"{low}-{high}x",
                                                                                      "a guide"]
    if total:
        records[["total_claim_low", "total_claim_high", "total_claim_label", "total_claim_source"]] = [
            total[0], total[1], f"{total[0]}-{total[1]}x", "a guide"]
    return records


def calibration_runs(sweep_id: str, values: list[float], day: int = 1, **fields) -> pd.DataFrame:
    return frame(sweep_id, [values], day=day, **fields).assign(ladder="noise")


QUIET = [100.0, 101.0, 99.5, 100.4, 100.2]
CLEAR = [[100.0, 101.0, 99.0], [150.0, 152.0, 149.0], [151.0, 150.0, 150.5]]  # rung 1 1.5x, rung 2 no change


def test_a_rung_whose_runs_were_all_busy_gets_no_verdict_and_the_table_says_why():
    records = with_claims(frame("s", CLEAR, busy={(2, 0), (2, 1), (2, 2)}), {1: (1.3, 1.7), 2: (1.1, 1.3)},
                          total=(1.3, 2.0))
    table = table_mod.build_table(records, "s")
    assert table.rows[1].verdict == "confirms"
    assert table.rows[2].verdict == BUSY and table.total_verdict == BUSY
    assert table.rows[2].x_previous is None
    text = render.to_markdown(table)
    assert "3 run(s) of rungs [2] were measured on a busy machine (other processes used 50% of the CPUs)" in text
    assert "machine busy: not trustworthy, so they are left out" in text
    assert render.status_text(table.rows[2]) == "busy x3" and render.status_text(table.rows[1]) == "ok x3"


def test_a_status_counts_the_busy_runs_left_out():
    records = frame("s", [[100.0, 101.0, 99.0], [150.0, 12.0, 149.0]], busy={(1, 1)})
    assert render.status_text(table_mod.build_table(records, "s").rows[1]) == "ok 2/3, busy 1"


def test_a_busy_run_measured_again_in_its_round_counts_once():
    records = frame("s", [[100.0, 101.0, 99.0], [150.0, 152.0, 149.0]], busy={(1, 1)})
    again = frame("s", [[None, None], [None, 151.0]]).iloc[[3]].assign(run_id="s-1-1-again")
    table = table_mod.build_table(pd.concat([records, again], ignore_index=True), "s")
    assert table.rows[1].x_previous.value == pytest.approx(math.exp(
        (math.log(150 * 151 * 149) - math.log(100 * 101 * 99)) / 3))
    text = render.to_markdown(table)
    assert "1 run(s) of rungs [1] were measured on a busy machine" in text
    assert "(1 measured again on a quiet one in the same round)" in text


def test_a_rungs_figures_are_those_of_its_quiet_runs_as_its_verdict_is():
    records = frame("s", [[100.0, 101.0, 99.0], [150.0, 12.0, 149.0]], busy={(1, 1)})
    row = table_mod.build_table(records, "s").rows[1]
    assert row.samples_per_s == pytest.approx(149.5) and row.samples_per_s_runs == [150.0, 149.0]
    everything_busy = table_mod.build_table(frame("s", [[100.0], [12.0]], busy={(1, 0)}), "s").rows[1]
    assert everything_busy.samples_per_s == 12.0  # no quiet run: the busy one is shown, and its verdict says busy


def test_one_run_a_rung_and_no_calibration_gives_no_band_and_no_verdict():
    table = table_mod.build_table(with_claims(frame("s", [[100.0], [150.0]]), {1: (1.3, 1.7)}), "s")
    row = table.rows[1]
    assert row.verdict == speedup.NO_BAND_TEXT == ("inconclusive (one run a rung and no calibration: another round "
                                                 "or a calibration decides, as the noise note says)")
    assert row.x_previous.value == pytest.approx(1.5) and math.isnan(row.x_previous.low)
    assert render.row_cells(row)[4] == "1.50x [no band: no variance known]"
    assert table.noise_note.startswith("noise: no calibration here and one run a rung: no bands, no verdicts")


def test_a_tables_noise_note_names_the_setting_that_adds_rounds_to_the_command_that_stored_its_records():
    from harness.climb import trials

    assert table_mod.CLIMB_LADDER == trials.LADDER_NAME
    notes = {ladder: table_mod.build_table(frame("s", [[100.0], [150.0]], ladder=ladder), "s").noise_note
             for ladder in ("sim", trials.LADDER_NAME, "diagnose")}
    assert "no bands, no verdicts; add sweep.repeats=2 or run python -m harness noise" in notes["sim"]
    assert "no bands, no verdicts; add climb.repeats=2 or run python -m harness noise" in notes["climb"]
    assert "no bands, no verdicts; run python -m harness noise" in notes["diagnose"]
    for given, says in (("2", "sweep.repeats=2"), ("auto", "sweep.repeats=auto")):  # it was to take more rounds
        stored = json.dumps({"sweep": {"repeats": given if given == "auto" else int(given)}})
        note = table_mod.build_table(frame("s", [[100.0], [150.0]], config_json=stored), "s").noise_note
        assert (f"no bands, no verdicts; the sweep ended after its first round (it was given {says}): run it again, "
                "or run python -m harness noise") in note
    one = json.dumps({"sweep": {"repeats": 1}})
    assert "add sweep.repeats=2 or run" in table_mod.build_table(frame("s", [[100.0], [150.0]], config_json=one),
                                                                 "s").noise_note


def test_the_noise_command_of_a_table_calibrates_what_its_sweep_is_matched_with(tmp_path):
    results = str(tmp_path / "my results")
    table = table_mod.build_table(frame("s", [[100.0], [150.0]]), "s", results)
    words = shlex.split(table.noise_note.split("add sweep.repeats=2 or run ", 1)[1])
    assert words[:4] == ["python", "-m", "harness", "noise"]
    composed = config_mod.from_dict(hydra_edge.plain_settings(hydra_edge.compose_settings(words[4:])))
    assert (composed.workload.name, composed.size, composed.device, composed.results_dir) == (
        "unet3d", "smoke", "cpu", results)  # what calibration.choose_calibration matches, in the table's store


def test_the_noise_command_carries_the_words_that_name_an_inline_workload(tmp_path):
    records = frame("s", [[100.0], [150.0]]).assign(workload="custom")
    alone = table_mod.build_table(records, "s", str(tmp_path)).noise_note
    assert "python -m harness noise" not in alone  # workload=custom alone names no model: said in words
    assert alone.endswith(f"run the noise command with this sweep's workload settings and size=smoke device=cpu "
                          f"results_dir={tmp_path}")
    given = ["workload=custom", "workload.model._target_=torch.nn.Conv1d", "size=auto", "--config-dir", "my conf"]
    note = table_mod.build_table(records, "s", str(tmp_path), given).noise_note
    assert note.endswith("run python -m harness noise workload=custom workload.model._target_=torch.nn.Conv1d "
                         f"--config-dir 'my conf' size=smoke device=cpu results_dir={tmp_path}")


def test_a_diagnose_sweep_is_not_told_to_add_rounds_it_cannot_take(tmp_path):
    note = table_mod.build_table(frame("d", [[30.0], [40.0], [25.0]], ladder="diagnose"), "d", str(tmp_path)).noise_note
    assert note == ("noise: no calibration here and one run a rung: no bands, no verdicts; run python -m harness noise "
                    f"workload=unet3d size=smoke device=cpu results_dir={tmp_path}")


def test_totals_and_groups_over_rungs_that_did_not_run_are_not_measured():
    records = with_claims(frame("s", CLEAR, failed={(2, 0), (2, 1), (2, 2)}), {1: (1.3, 1.7)}, total=(1.3, 2.0))
    table = table_mod.build_table(records, "s")
    assert table.rows[1].verdict == "confirms"
    assert table.total_measured is None and table.total_verdict == "not measured (rungs [2] did not run ok)"
    assert "**not measured (rungs [2] did not run ok)**" in render.to_markdown(table)


def test_a_guide_total_measured_by_its_two_ends_is_its_last_rung_over_rung_0_and_judges_no_rung_of_its_own():
    two_ends = [CLEAR[0], [], [], [200.0, 203.0, 199.0]]  # rungs 1 and 2 have no record: every change in rung 3
    table = table_mod.build_table(with_claims(frame("s", two_ends), {3: (1.8, 2.2)}, total=(1.5, 2.5)), "s")
    last = table.rows[-1]
    assert [r.rung for r in table.rows] == [0, 3] and last.built_on == 0
    assert last.x_previous.value == pytest.approx(2.0, rel=0.01)
    assert last.verdict == "" and "rungs [1, 2] have no record here" in last.note  # its own claim: not its change
    assert table.total_measured.value == pytest.approx(last.x_previous.value) and table.total_verdict == "confirms"
    assert (table.total_measured.low, table.total_measured.high) == (last.x_previous.low, last.x_previous.high)
    # a rung that ran and failed is dropped from the later rungs' settings: the rung after it is judged as before
    failed = with_claims(frame("s", CLEAR + [[60.0, 61.0, 60.5]], failed={(2, r) for r in range(3)}),
                         {3: (0.3, 0.5)})
    assert table_mod.build_table(failed, "s").rows[3].verdict == "confirms"


def test_a_band_wider_than_10x_is_too_wide_to_say():
    table = table_mod.build_table(with_claims(frame("s", [[100.0, 100.0], [200.0, 50.0]]), {1: (1.1, 1.3)}), "s")
    row = table.rows[1]
    assert row.verdict == "too wide to say" and row.x_previous.too_wide
    assert render.row_cells(row)[4] == "1.00x [too wide to say]"


def test_the_calibration_stored_with_the_sweep_wins_over_a_later_one():
    stored = dict(noise_calibration_id="noise-then", noise_cv=0.02, noise_df=4.0)
    records = with_claims(frame("s", [[100.0], [150.0]], **stored), {1: (1.3, 1.7)})
    later = calibration_runs("noise-now", [100.0, 104.0, 96.0, 102.0, 98.0], day=1)  # CV 3.2%, before the sweep
    table = table_mod.build_table(pd.concat([records, later], ignore_index=True), "s")
    assert table.noise.sweep_id == "noise-then" and table.noise.cv == 0.02
    assert table.rows[1].verdict == "confirms"
    assert "noise: calibrated CV 2.0% from sweep noise-then, 5 runs" in table.noise_note


def test_a_sweep_that_stored_no_calibration_keeps_none_and_names_the_skipped_one():
    records = frame("s", [[100.0], [150.0]], day=2, noise_df=0.0)
    later = calibration_runs("noise-after", QUIET, day=3)
    table = table_mod.build_table(pd.concat([records, later], ignore_index=True), "s")
    assert not table.noise.calibrated
    assert any(n.startswith("skipped calibration noise-after: made after this sweep started") for n in table.notes)


def test_a_busy_calibration_is_skipped_by_name():
    busy = calibration_runs("noise-busy", QUIET, day=1, busy={(0, r) for r in range(5)})
    table = table_mod.build_table(pd.concat([frame("s", [[100.0], [150.0]]), busy], ignore_index=True), "s")
    assert not table.noise.calibrated
    assert ("skipped calibration noise-busy: busy (other processes used 50% of the CPUs; 5 runs busy)"
            in table.notes)


def test_an_auto_sweep_says_after_how_many_rounds_it_decided():
    records = with_claims(frame("s", CLEAR, auto_max_rounds=6), {1: (1.3, 1.7), 2: (1.1, 1.3)}, total=(1.3, 2.0))
    table = table_mod.build_table(records, "s")
    assert table.rows[1].verdict == "confirms" and table.total_verdict == "confirms"
    assert table.rows[2].verdict == "falls short (no measurable change)"
    note = next(n for n in table.notes if n.startswith("sweep.repeats=auto"))
    assert note.startswith("sweep.repeats=auto: decided after 3 round(s) (2.0 minutes);")
    assert "look 3 of at most 6" in note


def test_an_auto_sweep_that_spent_its_budget_names_the_verdicts_still_open():
    wobbly = [[100.0, 103.0], [104.0, 101.0]]  # 1.01x: holds 1x and reaches the claim
    records = with_claims(frame("s", wobbly, auto_max_rounds=2), {1: (1.02, 1.3)})
    table = table_mod.build_table(records, "s")
    assert table.rows[1].verdict.startswith("inconclusive (")
    note = next(n for n in table.notes if n.startswith("sweep.repeats=auto"))
    assert note.startswith("sweep.repeats=auto: the round budget was spent after 2 round(s)")
    assert "verdicts still open: rung 1: inconclusive (" in note and ". More rounds (a larger sweep.max_repeats" in note


def test_an_auto_sweep_stopped_with_busy_rungs_says_they_need_an_idle_machine():
    records = with_claims(frame("s", [[100.0], [150.0]], busy={(1, 0)}, auto_max_rounds=6), {1: (1.3, 1.7)})
    table = table_mod.build_table(records, "s")
    assert table.rows[1].verdict == BUSY
    note = next(n for n in table.notes if n.startswith("sweep.repeats=auto"))
    assert note.startswith("sweep.repeats=auto: stopped early (time budget spent, or interrupted) after 1 round(s)")
    assert note.endswith("They need an idle machine; no look yet (one round and no calibration)")


def test_a_rung_whose_baseline_was_all_busy_has_nothing_trustworthy_to_be_compared_with():
    records = with_claims(frame("s", [[100.0, 101.0], [150.0, 151.0]], busy={(0, 0), (0, 1)}), {1: (1.3, 1.7)})
    table = table_mod.build_table(records, "s")
    assert table.rows[1].verdict == BUSY and table.rows[1].x_baseline is None


def test_a_rung_after_a_failed_one_says_what_it_was_built_on_and_over_what_it_was_compared():
    failed = table_mod.build_table(frame("s", CLEAR + [[60.0, 61.0, 60.5]], failed={(2, r) for r in range(3)}), "s")
    assert failed.rows[3].built_on == 1 and failed.rows[3].note == "built on rung 1 (rungs between did not run ok)"
    busy = table_mod.build_table(frame("s", CLEAR, busy={(1, r) for r in range(3)}), "s")
    assert busy.rows[2].built_on == 1
    assert busy.rows[2].note == "x previous over rung 0 (the runs between were all on a busy machine)"


def test_a_busy_rung_gets_no_compute_ratio_either():
    steps = {"step_ms": [20.0] * 5, "data_wait_ms": [0.0] * 5, "step_ms_p50": 20.0, "measured_steps": 5,
             "data_wait_frac": 0.0}
    records = frame("s", CLEAR, busy={(2, 0), (2, 1), (2, 2)}, **steps)
    table = table_mod.build_table(records, "s")
    assert table.rows[1].parts.x_compute is not None  # quiet rungs: the compute part's ratio
    assert table.rows[2].parts is None  # its runs were all busy: nothing of its step is told
    row = next(line for line in render.to_markdown(table).splitlines() if line.startswith("| 2 | knob2=on"))
    assert row.split(" | ")[5] == "-"  # the compute x previous cell


def test_the_table_says_which_rounds_were_copied_from_which_sweep(tmp_path):
    # round 0 copied whole from sweep "old", round 1 from sweep "older", round 2 measured now; "older" is read from
    # the store (the frame holds only this sweep and "old"), as `python -m harness table` reads one sweep
    from harness.store import write_record

    old, older = frame("old", [[100.0], [150.0]], day=1), frame("older", [[100.0], [150.0]], day=1)
    for _, run in older.iterrows():
        write_record(RunRecord(**{c: run[c] for c in COLUMNS if c in RunRecord.__dataclass_fields__}), tmp_path)
    now = frame("s", [[100.0, 101.0, 99.0], [150.0, 152.0, 149.0]])
    now["cached_from"] = ["old-0-0", "older-0-0", "", "old-1-0", "older-1-0", ""]
    table = table_mod.build_table(pd.concat([now, old], ignore_index=True), "s", str(tmp_path))
    note = ("copied from earlier sweeps (sweep.rerun=false): round 0 from sweep old; round 1 from sweep older. A round "
            "is copied whole from one earlier sweep or measured whole, so a session's shift is that round's effect and "
            "leaves the ratios (runs of this session, 30 minutes or less before, may stand beside fresh ones: an "
            "interrupted sweep resumed); sweep.rerun=true measures every round now")
    assert note in table.notes and note in render.to_markdown(table)
    assert table.rows[1].how == "partly cached"
    # a sweep resumed: round 2's first rung copied from the interrupted sweep, its second measured now
    now["cached_from"] = ["old-0-0", "older-0-0", "old-0-0", "old-1-0", "older-1-0", ""]
    resumed = table_mod.build_table(pd.concat([now, old], ignore_index=True), "s", str(tmp_path))
    said = next(n for n in resumed.notes if n.startswith("copied from"))
    assert said.startswith("copied from earlier sweeps (sweep.rerun=false): round 0 from sweep old; round 1 from "
                           "sweep older; 1 of round 2's 2 runs from sweep old, the rest measured now. "), said
    assert not any(n.startswith("copied from") for n in table_mod.build_table(frame("t", CLEAR), "t").notes)


def test_no_degrees_of_freedom_is_said_of_one_rung_or_of_rungs_that_share_too_few_rounds():
    one = table_mod.build_table(frame("s", [[100.0, 101.0]]), "s").noise_note
    assert one == "noise: no calibration here, and one rung leaves the rung x round model no degrees of freedom"
    uneven = table_mod.build_table(frame("s", [[100.0, 101.0], [150.0]]), "s").noise_note
    assert uneven == ("noise: no calibration here, and rungs that share too few rounds (a second round of one rung "
                      "alone) leave the rung x round model no degrees of freedom")
