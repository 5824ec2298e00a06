"""The statistics' plain functions on hand-made inputs: the block model's arithmetic, verdict words, the busy
rule, calibration matching, the sweep loop's helpers (no torch, no simulation)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from harness.analysis.stats import blocks, busy, calibration, noise_model, sequential, speedup
from harness.store import COLUMNS, RunRecord
from tests.conftest import REPO

# ------------------------------------------------------------------------------------------
# the rung x round model


def test_a_complete_table_gives_the_two_way_anova():
    rng = np.random.default_rng(1)
    logs = rng.normal(4.0, 0.05, (5, 3))
    model = blocks.fit(logs)
    interaction = logs - logs.mean(1, keepdims=True) - logs.mean(0, keepdims=True) + logs.mean()
    assert model.residual_df == (3 - 1) * (5 - 1)
    assert model.var[0] == pytest.approx((interaction ** 2).sum() / 8)
    c = blocks.contrast(model, 2, 1)
    assert c.diff[0] == pytest.approx(logs[2].mean() - logs[1].mean())
    assert c.se[0] == pytest.approx(math.sqrt(model.var[0] * 2 / 3)) and c.df[0] == 8
    ratio = c.ratio()
    half = sps.t.isf(0.025, 8) * c.se[0]
    assert (ratio.low, ratio.high) == pytest.approx((math.exp(c.diff[0] - half), math.exp(c.diff[0] + half)))


def test_round_effects_cancel():
    base = np.array([[4.0, 4.0, 4.0], [4.1, 4.1, 4.1]])
    slow_round = base + np.array([0.0, -0.3, 0.2])  # a busy second round slows every rung alike
    c = blocks.contrast(blocks.fit(slow_round), 1, 0)
    assert c.diff[0] == pytest.approx(0.1) and c.se[0] == pytest.approx(0.0, abs=1e-12)


def test_missing_cells_disconnected_rungs_and_one_round():
    logs = np.array([[4.0, 4.1, np.nan], [4.2, np.nan, 4.3], [np.nan, np.nan, np.nan]])
    model = blocks.fit(logs)
    assert blocks.contrast(model, 2, 0) is None  # rung 2 never ran
    assert blocks.contrast(model, 1, 0) is not None and blocks.previous_ran(model, 2) == 1
    apart = blocks.fit(np.array([[4.0, np.nan], [np.nan, 4.2]]))  # no round holds both: not comparable
    assert blocks.contrast(apart, 1, 0) is None
    one = blocks.contrast(blocks.fit(np.array([[4.0], [4.2]])), 1, 0)  # one round, no calibration: no band
    assert np.isnan(one.bounds(0.05)[0]).all() and one.df[0] == 0
    calibrated = blocks.contrast(blocks.fit(np.array([[4.0], [4.2]]), 0.02, 4), 1, 0)
    assert calibrated.df[0] == 4 and calibrated.se[0] == pytest.approx(0.02 * math.sqrt(2))


@pytest.mark.parametrize("rungs, rounds, cv", [(4, 4, None), (6, 6, None), (2, 5, 0.03), (3, 4, 0.05)])
def test_the_noisier_rung_check_of_a_complete_table_equals_the_fits_without_each_rung(rungs, rounds, cv):
    logs = np.random.default_rng(rungs * rounds).normal(0, 0.05, (500, rungs, rounds))
    logs[:, 1] *= 2  # one rung twice as noisy: the check must fire often there
    model = blocks.fit(logs, cv, 4 if cv else 0)
    one_by_one = np.stack([blocks.noisier(model, k) for k in range(rungs)], axis=1)
    assert (model.noisy == one_by_one).all() and one_by_one[:, 1].mean() > 0.3


def test_from_records_leaves_busy_and_failed_runs_out():
    records = [RunRecord(run_id="a", status="ok", timestamp="t", rung=0, round=0, samples_per_s=100.0),
               RunRecord(run_id="b", status="ok", timestamp="t", rung=1, round=0, samples_per_s=120.0,
                         other_cpu_pct=50.0),
               RunRecord(run_id="c", status="oom", timestamp="t", rung=1, round=1),
               {"rung": 0, "round": 1, "status": "ok", "samples_per_s": 101.0}]
    logs, why = blocks.from_records(records, rungs=2, rounds=2)
    assert logs[0, 0] == pytest.approx(math.log(100.0)) and np.isnan(logs[1]).all()
    assert why == {(1, 0): "other processes used 50% of the CPUs"}
    qs = sequential.questions_for(2, {1: (1.1, 1.3)})
    answer = sequential.fixed(logs, qs, busy=why).answers[0]
    assert answer.verdict == "no verdict: machine busy (other processes used 50% of the CPUs): not trustworthy"


# ------------------------------------------------------------------------------------------
# verdicts


def test_claims_that_hold_1x_need_the_band_inside():
    assert speedup.verdict(speedup.Ratio(1.01, 1.002, 1.03), 1.0, 1.05) == "confirms"
    assert speedup.verdict(speedup.Ratio(0.96, 0.90, 1.02), 1.0, 1.05).startswith("inconclusive")  # overlaps only
    assert speedup.verdict(speedup.Ratio(0.90, 0.85, 0.95), 1.0, 1.05) == "reverses (slower)"
    assert speedup.verdict(speedup.Ratio(0.97, 0.93, 0.99), 0.95, 1.05).startswith("inconclusive")
    assert speedup.verdict(speedup.Ratio(1.10, 1.07, 1.13), 0.95, 1.05) == "exceeds"


def test_bands_wider_than_10x_say_nothing():
    wide = speedup.Ratio(0.85, 0.00004, 17566.53)
    assert speedup.verdict(wide, 1.1, 1.3) == "too wide to say" and speedup.band_text(wide) == "0.85x [too wide to say]"
    assert speedup.band_text(speedup.Ratio(1.07, 0.83, 1.37)) == "1.07x [0.83-1.37]"
    assert speedup.verdict(speedup.Ratio(1.2, math.nan, math.nan), 1.1, 1.3) == speedup.NO_BAND_TEXT
    assert speedup.verdict(speedup.Ratio(1.2, 1.1, 1.3), 1.1, 1.3, busy="GPU clocks held back: thermal (hardware)") == (
        "no verdict: machine busy (GPU clocks held back: thermal (hardware)): not trustworthy")


def test_totals_and_groups_over_rungs_that_did_not_run_are_not_measured():
    assert speedup.span_status({0, 1, 2}, 0, 4) == "not measured (rungs [3, 4] did not run ok)"
    assert speedup.span_status({0, 1, 2}, 1, 2) is None
    logs = np.log(np.array([[100.0, 101.0], [130.0, 128.0], [np.nan, np.nan]]))
    answers = {a.question.label: a for a in
               sequential.fixed(logs, sequential.questions_for(3, {1: (1.2, 1.4)}, (1.2, 2.0))).answers}
    assert answers["total"].verdict == "not measured (rungs [2] did not run ok)"
    assert answers["rung 1"].verdict == "confirms" and not answers["total"].waiting
    assert answers["rung 1"].built_on == 0 and answers["rung 2"].built_on is None


# ------------------------------------------------------------------------------------------
# the busy rule


H100_RUN = {"device": "cuda", "gpu_mem_used_bytes": 3.727 * 2**30, "peak_vram_reserved_bytes": 2.635 * 2**30,
            "gpu_throttle_reasons": "", "other_cpu_pct": 6.3}  # a quiet run of results/h100


def test_busy_reason_reads_the_cpu_the_gpu_clocks_and_the_gpu_memory():
    assert busy.busy_reason(H100_RUN) is None
    assert busy.busy_reason({**H100_RUN, "other_cpu_pct": 50.0}) == "other processes used 50% of the CPUs"
    assert busy.busy_reason({**H100_RUN, "gpu_throttle_reasons": "power cap (software)"}) is None  # full load
    held = busy.busy_reason({**H100_RUN, "gpu_throttle_reasons": "power cap (software), thermal (hardware)"})
    assert held == "GPU clocks held back: thermal (hardware)"
    crowded = busy.busy_reason({**H100_RUN, "gpu_mem_used_bytes": 9.0 * 2**30})
    assert crowded == "another process held ~6.4 GiB on the GPU"
    assert busy.busy_reason({**H100_RUN, "gpu_mem_used_bytes": 9.0 * 2**30, "world_size": 2}) is None


def test_busy_reason_reads_only_its_columns_so_a_judge_reading_those_alone_judges_alike():
    read = set()

    class Logged(dict):
        def get(self, name, default=None):
            read.add(name)
            return super().get(name, default)

    for run in (H100_RUN, {**H100_RUN, "other_cpu_pct": 50.0, "gpu_throttle_reasons": "thermal (hardware)"},
                {**H100_RUN, "gpu_mem_used_bytes": 9.0 * 2**30}, {"device": "cpu"}):
        busy.busy_reason(Logged(run))
    assert read == set(busy.COLUMNS)
    from harness.analysis.stats import noise_model, sweepstats
    rows = [{c: getattr(RunRecord(run_id=f"r{i}", status="ok", timestamp="t"), c) for c in COLUMNS}
            | {"rung": i % 2, "round": i // 2, "samples_per_s": 10.0 + i % 2 + (i % 3) * 0.1,
               "other_cpu_pct": 50.0 if i == 3 else 1.0, "ladder_sha": "x"} for i in range(8)]
    frame = pd.DataFrame(rows)
    judged = sweepstats.judge(frame, 2, {1: (1.05, 1.2)}, None, [], sweepstats.SweepNoise(noise_model.Noise()))
    assert judged.busy == {(1, 1): "other processes used 50% of the CPUs"} and judged.busy_runs == 1
    # a look reads only FRAME_COLUMNS of the store: judged on those alone, the same judgement (a column judge
    # reads beyond them is a KeyError here)
    narrow = sweepstats.judge(frame[list(sweepstats.FRAME_COLUMNS)], 2, {1: (1.05, 1.2)}, None, [],
                              sweepstats.SweepNoise(noise_model.Noise()))
    assert {k: (a.verdict, a.ratio) for k, a in judged.answers.items()} == {
        k: (a.verdict, a.ratio) for k, a in narrow.answers.items()}
    assert (narrow.busy, narrow.busy_runs, narrow.rounds, narrow.max_rounds) == (
        judged.busy, judged.busy_runs, judged.rounds, judged.max_rounds)


def test_busy_reason_takes_records_dicts_and_pandas_rows_and_missing_fields():
    record = RunRecord(run_id="r", status="ok", timestamp="t", other_cpu_pct=35.0)
    row = pd.DataFrame([{c: getattr(record, c) for c in COLUMNS}]).iloc[0]
    assert busy.busy_reason(record) == busy.busy_reason(row) == "other processes used 35% of the CPUs"
    assert busy.busy_reason({}) is None and busy.busy_reason({"other_cpu_pct": float("nan")}) is None
    assert busy.busy_reason({"other_cpu_pct": 10.0}) is None  # the threshold itself is not busy (table's rule)


# ------------------------------------------------------------------------------------------
# calibration matching


def cand(sweep_id, finished, values, workload="unet3d", size="smoke", env="env-a", busy_runs=()):
    return calibration.Candidate(sweep_id, env, workload, size, finished, finished, tuple(values),
                                 tuple(busy_runs) or ("",) * len(values))


QUIET = [100.0, 101.0, 99.5, 100.4, 100.2]


def test_the_newest_calibration_of_this_environment_workload_and_size_made_before_the_sweep_speaks_for_it():
    candidates = [cand("old-ok", "2026-01-01T00:00:00+0000", QUIET),
                  cand("noisy", "2026-01-02T00:00:00+0000", [100.0, 130.0, 80.0, 110.0, 95.0]),
                  cand("busy", "2026-01-03T00:00:00+0000", QUIET, busy_runs=["", "other processes used 50% of "
                                                                             "the CPUs", "", "", ""]),
                  cand("outlier", "2026-01-04T00:00:00+0000", [100.0, 100.1, 99.9, 100.05, 95.0]),
                  cand("ok", "2026-01-04T12:00:00+0000", QUIET),
                  cand("other-size", "2026-01-05T00:00:00+0000", QUIET, size="full"),
                  cand("other-workload", "2026-01-05T00:00:00+0000", QUIET, workload="resnet50"),
                  cand("other-env", "2026-01-05T00:00:00+0000", QUIET, env="env-b"),
                  cand("after", "2026-01-09T00:00:00+0000", QUIET)]
    choice = calibration.choose_calibration(candidates, "env-a", "unet3d", "smoke", "2026-01-06T00:00:00+0000")
    assert choice.noise.sweep_id == "ok" and choice.noise.df == 4
    assert choice.noise.cv == pytest.approx(float(np.std(np.log(QUIET), ddof=1)))
    assert [s.sweep_id for s in choice.skipped] == ["after"]
    assert choice.notes()[0].startswith("skipped calibration after: made after this sweep started")
    assert "(same environment, workload and size)" in choice.noise.describe()
    # the newest unfit: no calibration, and the older fit one it blocked is named
    for newest, reason in (("outlier", "run 4 is an outlier"), ("busy", "busy (other processes used 50% of the "
                                                                       "CPUs)"), ("noisy", "CV ")):
        older = [c for c in candidates if c.finished <= dict((c.sweep_id, c.finished) for c in candidates)[newest]]
        choice = calibration.choose_calibration(older, "env-a", "unet3d", "smoke", "2026-01-06T00:00:00+0000")
        assert not choice.noise.calibrated
        reasons = {s.sweep_id: s.reason for s in choice.skipped}
        assert list(reasons) == [newest, "old-ok"] and reasons[newest].startswith(reason)
        assert reasons["old-ok"] == f"older than {newest}, which was unfit: the machine's state since is that one's"
    none = calibration.choose_calibration(candidates, "env-a", "unet3d", "tiny", "2026-01-06T00:00:00+0000")
    assert not none.noise.calibrated and none.skipped == ()


def test_calibration_for_reads_a_store_frame():
    def rows(sweep_id, ladder, values, day, **extra):
        return [{**{c: None for c in COLUMNS}, "run_id": f"{sweep_id}-{i}", "sweep_id": sweep_id, "ladder": ladder,
                 "status": "ok", "samples_per_s": v, "env_key": "env-a", "workload": "unet3d", "size": "smoke",
                 "rung": 0, "round": i, "timestamp": f"2026-01-{day:02d}T10:00:{i:02d}+0000", **extra}
                for i, v in enumerate(values)]

    frame = pd.DataFrame(rows("noise-1", "noise", QUIET, 1) + rows("noise-2", "noise", QUIET, 3, other_cpu_pct=40.0)
                         + rows("s", "phase2", [50.0, 60.0], 4))
    choice = calibration.calibration_for(frame, frame[frame["sweep_id"] == "s"])
    assert not choice.noise.calibrated  # the newer calibration found the machine busy: the older one is blocked
    assert choice.notes() == ["skipped calibration noise-2: busy (other processes used 40% of the CPUs; 5 runs busy)",
                              "skipped calibration noise-1: older than noise-2, which was unfit: the machine's state "
                              "since is that one's"]
    quiet = frame[frame["sweep_id"] != "noise-2"]
    assert calibration.calibration_for(quiet, quiet[quiet["sweep_id"] == "s"]).noise.sweep_id == "noise-1"


# ------------------------------------------------------------------------------------------
# the sweep loop's helpers


def test_serpentine_order():
    assert sequential.serpentine_order(3, 0) == [0, 1, 2] and sequential.serpentine_order(3, 1) == [2, 1, 0]
    assert sequential.serpentine_order([0, 2, 5], 3) == [5, 2, 0]


def test_look_levels_spend_little_early_and_nearly_all_at_the_budget():
    first = sequential.look_level(2, 6, calibrated=False)
    last = sequential.look_level(6, 6, calibrated=False)
    assert first < 0.002 and 0.035 < last < 0.05
    assert sequential.look_level(1, 6, calibrated=False) == 0.0  # no variance after one round
    assert sequential.look_level(1, 6, calibrated=True) > 0.0
    assert sequential.look_level(3, 3, calibrated=False) < 0.05  # two looks (rounds 2 and 3) share the 5%
    assert sequential.look_level(2, 2, calibrated=False) == pytest.approx(0.05)  # one look: a plain 95% band
    with pytest.raises(ValueError, match="valid choices are obrien-fleming, pocock"):
        sequential.spent(0.5, spending="haybittle")


def test_a_looks_boundaries_are_kept_between_processes_with_the_same_numbers_and_no_root_finder(tmp_path):
    """The boundaries a process computed are kept (a file in the harness's cache folder): the next process reads
    the very same levels and loads no scipy.optimize; a file kept by other code, or unreadable, is computed anew."""
    fractions = (2 / 6, 3 / 6, 4 / 6, 5 / 6, 1.0)
    code = ("import sys; from harness.analysis.stats import sequential as s; "
            f"print(repr(s.nominal_levels({fractions!r}, 0.05, 'obrien-fleming'))); "
            "print('scipy.optimize' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": str(REPO), "HARNESS_CACHE_DIR": str(tmp_path)}
    kept = tmp_path / "look-levels.json"

    def levels() -> list[str]:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                              check=True).stdout.splitlines()

    here = repr(sequential._nominal_levels(fractions, 0.05, "obrien-fleming"))
    assert levels() == [here, "True"] and kept.is_file()  # computed, with the root finder
    assert levels() == [here, "False"]  # read back: the same digits, no root finder loaded
    saved = json.loads(kept.read_text())
    kept.write_text(json.dumps({**saved, "entries": {k: ["0.05"] for k in saved["entries"]}}))
    assert levels() == [here, "True"]  # an entry that is not the levels asked for is computed anew
    kept.write_text(json.dumps({**saved, "code": "another"}))
    assert levels() == [here, "True"]  # another code's boundaries are not used
    kept.write_text("{not json")
    assert levels() == [here, "True"]


def test_next_action_stops_when_decided_or_spent():
    rng = np.random.default_rng(3)
    clear = np.log(100.0) + rng.normal(0, 0.01, (2, 6))
    clear[1] += math.log(1.5)
    qs = sequential.questions_for(2, {1: (1.3, 1.7)})
    assert sequential.next_action(sequential.look(clear, qs, 3, 6)) == "stop: decided"
    flat = np.log(100.0) + rng.normal(0, 0.05, (2, 6))
    early = sequential.look(flat, qs, 2, 6)
    assert sequential.next_action(early) == "another round" and not early.answers[0].decided
    assert sequential.next_action(sequential.look(flat, qs, 6, 6)) in ("stop: decided", "stop: budget spent")
    assert sequential.decided(speedup.Ratio(1.5, 1.4, 1.6), (1.3, 1.7)) and not sequential.decided(None, None)
    assert sequential.decided(speedup.Ratio(1.0, 0.99, 1.02), None)  # no claim: no change beyond 3%


def test_a_calibration_made_on_a_busy_gpu_says_so():
    cal = noise_model.calibrate([100.0, 100.5, 99.8, 100.2], busy=[None, "GPU clocks held back: thermal (hardware)"])
    assert cal.warnings == ["machine busy during 1 run(s) (run 1: GPU clocks held back: thermal (hardware)): "
                            "measure on an idle machine"]
