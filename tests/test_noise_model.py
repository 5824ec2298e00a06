"""The run-level noise model: error rates of `check` over simulated sweeps, verdicts, table vs check.

No torch and no runs here in the default tier; ONE end-to-end `noise` command at the tiniest settings in the slow
tier (the default tier runs that command in-process, with the same checks: test_launcher_command.py).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from harness.analysis.gate import check, check_throughput
from harness.analysis.stats import noise_model, speedup
from harness.analysis.views import render
from harness.analysis.views import table as table_mod
from harness.store import COLUMNS, RunRecord, load_runs, write_record

CPU = "Sim CPU"
RUNGS = 4


def records(sweep_id: str, throughputs: list[list[float]], day: int = 1) -> pd.DataFrame:
    """A sweep's records as the store returns them: rung k has one ok run per throughput in throughputs[k]."""
    rows = []
    for rung, values in enumerate(throughputs):
        for rnd, sps in enumerate(values):
            rows.append(RunRecord(
                run_id=f"{sweep_id}-{rung}-{rnd}", status="ok", timestamp=f"2024-06-{day:02d}T10:{rung:02d}:{rnd:02d}",
                workload="unet3d", size="smoke", device="cpu", config_hash=f"cfg-{rung}", env_key="env-sim",
                sweep_id=sweep_id, ladder="sim", rung=rung, change=f"knob{rung}=on" if rung else "", round=rnd,
                samples_per_step=2, samples_per_s=sps, peak_host_rss_bytes=1e9, cpu_model=CPU, cpu_count=2,
                torch_version="2.4.0"))
    return pd.DataFrame([{c: getattr(r, c) for c in COLUMNS} for r in rows])


def check_flags(base: pd.DataFrame, cur: pd.DataFrame, noise: noise_model.Noise) -> bool:
    """What `check` decides (its compare, Holm included): did anything regress?"""
    rows = check.compare(base, cur, check.Thresholds(0.05), check.Thresholds(0.10), noise)
    return check.exit_code(rows) == 1


def simulate(rng, runs: int, cv: float, slowdown: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """Log throughputs [config, run] of one A/B sweep pair (baseline, current), log-normal process noise."""
    base = np.log(100.0) + rng.normal(0.0, cv, (len(slowdown), runs))
    return base, np.log(100.0 * np.array(slowdown))[:, None] + rng.normal(0.0, cv, (len(slowdown), runs))


def flags(pair, noise) -> bool:
    """check's throughput decision for one sweep (the function compare calls): anything regressed?"""
    judged = check_throughput.throughput_logs(*pair, noise)
    return any(check.classify(est, 0.05, sig) == "regressed" for est, sig in judged)


def frames(pair) -> tuple[pd.DataFrame, pd.DataFrame]:
    return (records("base", [list(np.exp(b)) for b in pair[0]]),
            records("cur", [list(np.exp(c)) for c in pair[1]], day=2))


def flag_rate(runs: int, cv: float, slowdown: list[float], noise, sims: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    return sum(flags(simulate(rng, runs, cv, slowdown), noise) for _ in range(sims)) / sims


CALIBRATED = noise_model.Noise(cv=0.03, df=4, sweep_id="noise-sim", runs=5, match="environment")

# ------------------------------------------------------------------------------------------
# error rates of check (family-wise over the 4 rungs of one call)


def test_aa_sweeps_with_three_runs_per_side_flag_at_most_5_percent():
    # 5% process noise, no calibration: the runs' own spread, Holm over 4 configs
    assert flag_rate(3, 0.05, [1.0] * RUNGS, noise_model.DEFAULT, sims=1000, seed=18) <= 0.05


def test_one_run_per_side_without_a_calibration_flags_nothing():
    # no variance is known: no band, nothing flagged even at a true CV of 20% (the old default CV flagged 42%+)
    assert flag_rate(1, 0.20, [1.0] * RUNGS, noise_model.DEFAULT, sims=200, seed=19) == 0.0


def test_aa_sweeps_with_one_run_per_side_and_a_calibration_flag_at_most_5_percent():
    assert flag_rate(1, 0.03, [1.0] * RUNGS, CALIBRATED, sims=1000, seed=22) <= 0.05


def test_a_true_15_percent_slowdown_is_flagged_with_three_repeats_at_3_percent_noise():
    # calibrated (5 runs, CV 3%); one rung of four got 15% slower: its band must lie below 0.95 to regress
    assert flag_rate(3, 0.03, [0.85, 1.0, 1.0, 1.0], CALIBRATED, sims=500, seed=20) >= 0.80


def test_the_simulation_takes_the_same_decisions_as_the_whole_check():
    # the rates above call check's decision function directly (fast); compare() must agree with it
    rng = np.random.default_rng(21)
    for runs, noise in ((1, noise_model.DEFAULT), (3, noise_model.DEFAULT), (3, CALIBRATED)):
        for _ in range(15):
            pair = simulate(rng, runs, 0.05, [0.80, 1.0, 0.90, 1.0])
            assert check_flags(*frames(pair), noise) == flags(pair, noise)


def test_holm_steps_down():
    assert speedup.holm([0.01, 0.04, 0.03, 0.005], 0.05)[0].tolist() == [True, False, False, True]
    assert speedup.holm([0.001, 0.02, 0.03], 0.05)[0].tolist() == [True, True, True]  # 0.03 <= 0.05 / 1 at the last
    assert speedup.holm([], 0.05)[0].tolist() == []


# ------------------------------------------------------------------------------------------
# verdicts, and table and check agreeing on the same data


def test_verdicts_of_the_issue():
    assert speedup.verdict(speedup.Ratio(1.04, 0.97, 1.11), 1.1, 1.15).startswith("inconclusive (~")
    assert speedup.verdict(speedup.Ratio(2.4, 2.2, 2.6), 2.0, 3.0) == "confirms"


def test_check_compares_the_runs_the_table_shows():
    rng = np.random.default_rng(7)
    factors = [1.0, 0.85, 1.03, 1.25]
    base = records("s1", [list(100 * np.exp(rng.normal(0, 0.03, 3))) for _ in factors])
    cur = records("s2", [list(100 * f * np.exp(rng.normal(0, 0.03, 3))) for f in factors], day=2)
    frame = pd.concat([base, cur], ignore_index=True)
    rows = {r.rung: r for r in check.compare(base, cur, check.Thresholds(0.05), check.Thresholds(0.1))}
    tables = {s: table_mod.build_table(frame, s) for s in ("s1", "s2")}
    for rung in range(len(factors)):
        geometric = [np.exp(np.mean(np.log(tables[s].rows[rung].samples_per_s_runs))) for s in ("s1", "s2")]
        assert rows[rung].ratio == pytest.approx(geometric[1] / geometric[0])
        assert rows[rung].ci_low < rows[rung].ratio < rows[rung].ci_high
    assert rows[1].status == "regressed" and rows[3].status == "improved"
    assert rows[0].status == rows[2].status == "unchanged"


def test_a_calibration_in_the_store_gives_one_run_a_rung_its_band_and_the_table_says_so():
    frame = pd.concat([records("s1", [[100.0], [104.0]], day=2),
                       records("noise-20240601-000000-abcd", [[50.0, 51.0, 49.0, 50.5, 50.2]])
                       .assign(ladder="noise")], ignore_index=True)
    table = table_mod.build_table(frame, "s1")
    cv = float(np.std(np.log([50.0, 51.0, 49.0, 50.5, 50.2]), ddof=1))
    assert table.noise.calibrated and table.noise.cv == pytest.approx(cv)
    half = scipy_stats.t.isf(0.025, 4) * cv * math.sqrt(2)  # one run a side: the calibration's variance, its 4 df
    assert table.rows[1].x_previous.high == pytest.approx(1.04 * math.exp(half))
    text = render.to_markdown(table)
    assert f"noise: calibrated CV {cv:.1%} from sweep noise-20240601-000000-abcd, 5 runs" in text
    moved = frame.ladder == "noise"
    frame.loc[moved, "env_key"], frame.loc[moved, "cpu_model"] = "elsewhere", "Other CPU"
    other = render.to_markdown(table_mod.build_table(frame, "s1"))
    assert "noise: no calibration here and one run a rung: no bands, no verdicts" in other
    assert "1.04x [no band: no variance known]" in other


def test_failed_repeats_are_shown_in_the_status():
    frame = records("s1", [[100.0, 101.0], [90.0, 91.0]])
    frame.loc[3, ["status", "samples_per_s"]] = ["nan", math.nan]
    row = table_mod.build_table(frame, "s1").rows[1]
    assert render.row_cells(row)[-1].startswith("ok 1/2, nan 1")


def test_stored_claims_win_over_an_edited_ladder_file():
    frame = records("s1", [[100.0, 101.0], [104.0, 103.0]]).assign(ladder="phase2", ladder_sha="0123456789abcdef")
    frame.loc[frame["rung"] == 1, ["claim_low", "claim_high", "claim_label", "claim_source"]] = [5.0, 6.0, "5-6x",
                                                                                             "a guide"]
    table = table_mod.build_table(frame, "s1")
    assert table.rows[1].claim == "5-6x" and table.rows[1].verdict == "falls short (no measurable change)"
    assert any("the ladder file changed since this sweep" in n for n in table.notes)


# ------------------------------------------------------------------------------------------
# calibration


def test_calibration_numbers_and_warnings():
    cal = noise_model.calibrate([100.0, 102.0, 98.0, 101.0, 99.0])
    cv = float(np.std(np.log([100.0, 102.0, 98.0, 101.0, 99.0]), ddof=1))
    assert cal.cv == pytest.approx(cv) and not cal.warnings
    # repeats=1: the speedup whose band (t, 4 df) excludes 1x in 80% of sweeps: noncentral t with 4 df
    from scipy import optimize
    from scipy import stats as sps

    nc = optimize.brentq(lambda d: sps.nct.sf(sps.t.isf(0.025, 4), 4, d) - 0.80, 0.0, 20.0)
    assert cal.detectable[1] == pytest.approx(math.exp(nc * cv * math.sqrt(2)), rel=1e-5)
    assert cal.detectable[1] > cal.detectable[3] > cal.detectable[5] > 1
    noisy = noise_model.calibrate([100.0, 130.0, 80.0, 110.0], other_cpu_pct=[0.0, 35.0, 0.0, 0.0])
    assert any("too noisy" in w for w in noisy.warnings) and any("other processes" in w for w in noisy.warnings)
    outlier = noise_model.calibrate([100.0, 100.5, 99.5, 100.2, 70.0])
    assert any("run 4 is an outlier" in w for w in outlier.warnings)
    with pytest.raises(ValueError, match="at least 2 ok runs"):
        noise_model.calibrate([100.0])


def test_noise_runs_must_be_a_whole_number_of_two_or_more(capsys):
    from harness import cli

    for bad in ("0", "abc", "1"):
        assert cli.main(["noise", f"noise.runs={bad}"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and f"noise.runs={bad!r}" in err and ">= 2" in err


# the tiniest settings; NOISE_ARGS and TINY_MODEL_ARGS make the command of both tests of it
NOISE_ARGS = ("noise.runs=2", "measure.steps=3", "measure.warmup_steps=1")


def check_noise_command(stdout: str, results) -> None:
    """What the `noise` command of NOISE_ARGS printed and stored, and a later sweep's table using or skipping it."""
    out = " ".join(stdout.split())  # the console wraps long lines
    assert "process-to-process CV of samples/s" in out and "sweep.repeats=3" in out
    frame = load_runs(results)
    assert len(frame) == 2 and set(frame["ladder"]) == {"noise"} and frame["sweep_id"].iloc[0].startswith("noise-")
    same = ["env_key", "workload", "size", "device", "cpu_model", "cpu_count"]
    write_record(RunRecord(**{**frame.iloc[0][same].to_dict(), "run_id": "other", "status": "ok",
                              "timestamp": "2099-01-01T00:00:00", "sweep_id": "s", "ladder": "x", "rung": 0,
                              "samples_per_s": 1.0}), results)
    table = table_mod.build_table(load_runs(results), "s")
    calibration_id = frame["sweep_id"].iloc[0]
    # a later sweep of this environment, workload and size uses it, or (a busy or noisy machine) names it skipped
    skipped = [n for n in table.notes if n.startswith(f"skipped calibration {calibration_id}: ")]
    assert (table.noise.calibrated and table.noise.sweep_id == calibration_id) != bool(skipped)


# the default tier runs this command in the test process itself (cli.main), with every check here and its
# launcher's:
# test_launcher_command.py::test_noise_forks_its_runs_from_one_launcher_as_a_sweeps_runs
@pytest.mark.slow
def test_noise_command_end_to_end(results):
    from tests.conftest import TINY_MODEL_ARGS, harness_cli

    out = harness_cli("noise", *NOISE_ARGS, *TINY_MODEL_ARGS, f"results_dir={results}")
    assert out.returncode == 0, out.stdout + out.stderr
    check_noise_command(out.stdout, results)


def test_a_calibration_on_a_busy_machine_prints_not_fit_and_the_next_table_skips_it(tmp_path, capsys):
    from harness.commands import noise as noise_cmd

    calib = [RunRecord(run_id=f"n{i}", status="ok", timestamp=f"2024-06-01T10:00:0{i}", workload="unet3d",
                       size="smoke", device="cpu", env_key="env-sim", sweep_id="noise-busy", ladder="noise", rung=0,
                       round=i, samples_per_s=v, cpu_model=CPU, cpu_count=2, other_cpu_pct=45.0 if i == 2 else 1.0)
             for i, v in enumerate([100.0, 101.0, 99.5, 100.4, 100.2])]
    for record in calib:
        write_record(record, tmp_path)
    assert noise_cmd.report(calib, "noise-busy", str(tmp_path)) == 0
    out = " ".join(capsys.readouterr().out.split())  # the console wraps long lines
    assert "NOT FIT TO MEASURE" in out and "machine busy during 1 run(s) (run 2: other processes used 45% of" in out
    assert "but not fit: later sweeps of this environment, workload and size skip it" in out
    for frame_rows in records("s1", [[100.0, 101.0], [120.0, 119.0]], day=2).to_dict("records"):
        write_record(RunRecord(**frame_rows), tmp_path)
    table = table_mod.load_table(str(tmp_path), "s1")
    assert not table.noise.calibrated
    assert "skipped calibration noise-busy: busy (other processes used 45% of the CPUs)" in table.notes
