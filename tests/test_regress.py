"""Regression checks (`baseline`, `check`) on synthetic records: no torch, no runs, seconds in all."""

from __future__ import annotations

import json
import re
import shlex
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from harness.analysis.gate import baseline as baseline_mod
from harness.analysis.gate import check_throughput
from harness.analysis.gate.check_throughput import RatioEstimate, classify
from harness.commands import baseline as baseline_cmd
from harness.commands import check as check_cmd
from harness.store import SCHEMA_VERSION, RunRecord, load_runs, write_record

CPU = "Test CPU @ 3.0GHz"


def sweep(results, sweep_id, configs, *, repeats=3, day=1, cv=0.02, run_cv=0.01, steps=30, seed=0, status="ok",
          **env):
    """Write one sweep: ``configs`` maps config_hash -> throughput (samples/s), or a dict of record fields.

    Runs differ by a process-to-process noise of CV ``run_cv`` whose logs sum to zero, so the geometric mean
    of a config's runs is exact; step times are normal noise of CV ``cv`` around each run's throughput,
    rescaled so their mean is exact: the tests control the ratio exactly and only the noise varies.
    """
    rng = np.random.default_rng(seed)
    for rung, (config, spec) in enumerate(configs.items()):
        spec = spec if isinstance(spec, dict) else {"sps": spec}
        jitter = rng.standard_normal(repeats)
        jitter = np.exp(run_cv * (jitter - jitter.mean()) / (jitter.std() or 1.0))
        for rnd in range(repeats):
            z = rng.standard_normal(steps)
            z = (z - z.mean()) / z.std()
            sps = spec["sps"] * jitter[rnd]
            per_step_ms = 1000.0 / sps * 4  # 4 samples per step
            fields = dict(
                run_id=f"{sweep_id}-{rung}-{rnd}", status=spec.get("status", status),
                timestamp=f"2024-06-{day:02d}T10:{rung:02d}:{rnd:02d}+00:00", workload=spec.get("workload", "unet"),
                size="small", device="cpu", config_hash=config, sweep_id=sweep_id, ladder="phase2", rung=rung,
                change=spec.get("change", f"knob{rung}=on"), round=rnd, samples_per_step=4,
                samples_per_s=sps, step_ms=list(per_step_ms * (1 + spec.get("cv", cv) * z)),
                peak_host_rss_bytes=spec.get("rss", 1e9), cpu_model=CPU, cpu_count=8, torch_version="2.4.0")
            fields.update(env)
            fields.update({k: spec[k] for k in ("other_cpu_pct", "data_wait_frac") if k in spec})
            write_record(RunRecord(**fields), results)


def save(results, name="base", *extra):
    return baseline_cmd.main("baseline", ["save", name, "--results", str(results), *extra])


def check(results, *extra, baseline="base"):
    return check_cmd.main("check", ["--baseline", baseline, "--results", str(results), *extra])


def setup_check(tmp_path, current, baseline=None, history=False, **kwargs):
    """A baseline sweep s1 saved as 'base', then a current sweep s2 (the latest); ``history``: two earlier sweeps
    of the baseline's configs at the same speed, so the between-session sd is estimated (small) instead of the
    default 3%, which alone keeps a band wider than a 5% threshold: no config could be shown unchanged."""
    if history:
        sweep(tmp_path, "s0a", baseline or {"cfg-a": 100.0}, day=1, seed=5)
        sweep(tmp_path, "s0b", baseline or {"cfg-a": 100.0}, day=1, seed=6)
    sweep(tmp_path, "s1", baseline or {"cfg-a": 100.0}, day=1)
    assert save(tmp_path) == 0
    sweep(tmp_path, "s2", current, day=2, seed=1, **kwargs)


def row_status(capsys, results, *extra):
    """Run check --format json; the exit code and the rows by config_hash."""
    capsys.readouterr()  # drop what setup printed
    code = check(results, "--format", "json", *extra)
    doc = json.loads(capsys.readouterr().out)
    return code, {r["config_hash"]: r for r in doc["rows"]}


# ------------------------------------------------------------------------------------------
# decisions


def test_clear_drop_regresses_and_names_the_config(tmp_path, capsys):
    setup_check(tmp_path, {"cfg-a": 80.0})
    assert check(tmp_path) == 1
    out = capsys.readouterr().out
    assert "regressed" in out and "cfg-a" in out and "knob0=on" in out
    assert "FAIL" in out and "0.800x" in out


def test_small_drop_within_threshold_passes(tmp_path, capsys):
    setup_check(tmp_path, {"cfg-a": 98.0}, history=True)
    code, rows = row_status(capsys, tmp_path)
    assert code == 0
    assert rows["cfg-a"]["status"] == "unchanged" and rows["cfg-a"]["ci_low"] > 0.95
    assert rows["cfg-a"]["ratio"] == pytest.approx(0.98, rel=1e-6)


def test_drop_inside_wide_noise_is_undecided_and_asks_for_repeats(tmp_path, capsys):
    sweep(tmp_path, "s1", {"cfg-a": 100.0}, day=1, repeats=2, run_cv=0.3)
    assert save(tmp_path) == 0
    sweep(tmp_path, "s2", {"cfg-a": 90.0}, day=2, seed=1, repeats=2, run_cv=0.3)
    code, rows = row_status(capsys, tmp_path)
    assert code == 6
    row = rows["cfg-a"]
    assert row["status"] == "undecided"
    assert row["ci_low"] < 0.95 and row["ci_high"] > 1.0
    assert any("sweep.repeats" in n for n in row["notes"])


def test_a_drop_is_a_regression_only_when_the_band_lies_below_the_threshold(tmp_path, capsys):
    # 6% slower (3 runs a side, CV 1%), but with the term between sessions the band reaches above 0.95: the drop is
    # not shown to be beyond -5% (the p-value is that of "slower by more than the threshold"): undecided, exit 6
    setup_check(tmp_path, {"cfg-a": 94.0})
    code, rows = row_status(capsys, tmp_path)
    row = rows["cfg-a"]
    assert code == 6 and row["status"] == "undecided" and row["p_value"] > 0.05
    assert row["ci_low"] < 0.94 < 0.95 < row["ci_high"]
    assert any("neither beyond nor within -5%" in n for n in row["notes"])


def test_busy_runs_exit_5_naming_their_configs(tmp_path, capsys):
    setup_check(tmp_path, {"cfg-a": 80.0, "cfg-b": {"sps": 100.0, "other_cpu_pct": 60.0}},
                baseline={"cfg-a": 100.0, "cfg-b": 100.0})
    code, rows = row_status(capsys, tmp_path)
    assert code == 5  # never 1, though cfg-a regressed: a busy machine's check is run again on a quiet one
    assert rows["cfg-b"]["status"] == "busy" and rows["cfg-a"]["status"] == "regressed"
    assert "machine busy during 3 run(s) (current: other processes used 60% of the CPUs)" in rows["cfg-b"]["notes"][0]
    assert check(tmp_path) == 5
    captured = capsys.readouterr()
    assert ("result: BUSY: no verdict, the machine was busy: phase2 rung 1 knob1=on [unet cfg-b] (exit 5)"
            in captured.out)
    assert "machine busy during the runs of 1 config(s), which decide nothing: phase2 rung 1" in captured.err
    sweep(tmp_path, "s3", {"cfg-a": 100.0, "cfg-b": 100.0}, day=3, seed=2, other_cpu_pct=0.0)  # quiet again
    code, rows = row_status(capsys, tmp_path)  # no longer busy; s1 and s2 differ by 20% on cfg-a: a large
    assert code == 6 and {r["status"] for r in rows.values()} == {"undecided"}  # session sd, nothing shown


def test_a_busy_run_measured_again_quietly_in_its_round_does_not_make_the_check_busy(tmp_path, capsys):
    setup_check(tmp_path, {"cfg-a": 80.0})
    write_record(RunRecord(run_id="s2-0-1-busy", status="ok", timestamp="2024-06-02T10:00:01+00:00", workload="unet",
                           device="cpu", config_hash="cfg-a", sweep_id="s2", ladder="phase2", rung=0, round=1,
                           samples_per_s=20.0, other_cpu_pct=70.0, cpu_model=CPU, cpu_count=8), tmp_path)
    code, rows = row_status(capsys, tmp_path)
    assert code == 1 and rows["cfg-a"]["status"] == "regressed"
    assert rows["cfg-a"]["ratio"] == pytest.approx(0.8, rel=1e-6)  # the busy 20 samples/s is not in it


def test_a_busy_run_measured_again_quietly_is_neither_a_failure_nor_in_the_mean(tmp_path, capsys):
    setup_check(tmp_path, {"cfg-a": 98.0}, history=True)
    code, rows = row_status(capsys, tmp_path)
    assert code == 0 and rows["cfg-a"]["status"] == "unchanged"
    write_record(RunRecord(run_id="s2-0-1-busy", status="ok", timestamp="2024-06-02T10:00:01+00:00", workload="unet",
                           device="cpu", config_hash="cfg-a", sweep_id="s2", ladder="phase2", rung=0, round=1,
                           samples_per_s=20.0, other_cpu_pct=70.0, cpu_model=CPU, cpu_count=8), tmp_path)
    code, rows = row_status(capsys, tmp_path)
    assert code == 0 and rows["cfg-a"]["status"] == "unchanged"  # was: regressed, "ok in 1 of 4 rounds"
    assert not any(" of 4 rounds" in note for note in rows["cfg-a"]["notes"])
    assert rows["cfg-a"]["current_samples_per_s"] == pytest.approx(98.0, rel=0.02)  # the busy 20 is not in it


def test_improvement_is_reported(tmp_path, capsys):
    setup_check(tmp_path, {"cfg-a": 130.0})
    code, rows = row_status(capsys, tmp_path)
    assert code == 0
    assert rows["cfg-a"]["status"] == "improved"
    assert rows["cfg-a"]["ci_low"] > 1.0


def test_memory_growth_beyond_threshold_regresses(tmp_path, capsys):
    setup_check(tmp_path, {"cfg-a": {"sps": 100.0, "rss": 1.2e9}})
    code, rows = row_status(capsys, tmp_path)
    assert code == 1
    assert rows["cfg-a"]["status"] == "regressed"
    assert rows["cfg-a"]["mem_ratio"] == pytest.approx(1.2)
    assert any("peak memory" in n for n in rows["cfg-a"]["notes"])


def test_memory_growth_within_threshold_passes(tmp_path, capsys):
    setup_check(tmp_path, {"cfg-a": {"sps": 100.0, "rss": 1.05e9}}, history=True)
    code, rows = row_status(capsys, tmp_path)
    assert code == 0 and rows["cfg-a"]["status"] == "unchanged"


def test_config_that_now_fails_regresses(tmp_path, capsys):
    setup_check(tmp_path, {"cfg-a": 100.0, "cfg-b": {"sps": 100.0, "status": "oom"}},
                baseline={"cfg-a": 100.0, "cfg-b": 100.0}, history=True)
    code, rows = row_status(capsys, tmp_path)
    assert code == 1
    assert rows["cfg-b"]["status"] == "regressed"
    assert "now oom" in rows["cfg-b"]["notes"][0]
    assert rows["cfg-a"]["status"] == "unchanged"


def test_one_failed_round_regresses_even_if_the_rest_is_fast(tmp_path, capsys):
    setup_check(tmp_path, {"cfg-a": 100.0})
    write_record(RunRecord(run_id="s2-0-1", status="oom", timestamp="2024-06-02T10:00:01+00:00", workload="unet",
                           device="cpu", config_hash="cfg-a", sweep_id="s2", ladder="phase2", rung=0, round=1,
                           cpu_model=CPU, cpu_count=8), tmp_path)
    code, rows = row_status(capsys, tmp_path)
    assert code == 1
    assert rows["cfg-a"]["status"] == "regressed"
    assert "oom in 1 of 3 rounds" in rows["cfg-a"]["notes"]


def test_missing_and_new_configs(tmp_path, capsys):
    setup_check(tmp_path, {"cfg-a": 100.0, "cfg-new": 50.0}, baseline={"cfg-a": 100.0, "cfg-gone": 50.0},
                history=True)
    code, rows = row_status(capsys, tmp_path)
    assert code == 0
    assert rows["cfg-new"]["status"] == "new"
    assert rows["cfg-gone"]["status"] == "missing"


def test_software_differences_are_shown(tmp_path, capsys):
    setup_check(tmp_path, {"cfg-a": 100.0}, history=True, torch_version="2.5.0")
    assert check(tmp_path) == 0
    assert "torch 2.4.0 -> 2.5.0" in capsys.readouterr().out


def test_thresholds_per_workload_and_ladder(tmp_path, capsys):
    # 20% slower: beyond 5% even with the 3% between-session term, within 30%
    setup_check(tmp_path, {"cfg-a": 80.0})
    assert check(tmp_path) == 1
    assert check(tmp_path, "--threshold", "unet=0.3") == 0
    assert check(tmp_path, "--threshold", "ladder:phase2=0.3") == 0
    assert check(tmp_path, "--threshold", "0.3", "--threshold", "ladder:phase2=0.05") == 1
    capsys.readouterr()
    assert check(tmp_path, "--threshold", "unte=0.1") == 2
    assert "'unte'" in capsys.readouterr().err
    assert check(tmp_path, "--threshold", "5") == 2
    assert "between 0 and 1" in capsys.readouterr().err


def test_different_cpu_is_not_comparable(tmp_path, capsys):
    setup_check(tmp_path, {"cfg-a": 100.0}, cpu_model="Other CPU")
    code, rows = row_status(capsys, tmp_path)
    assert code == 2
    assert rows["cfg-a"]["status"] == "not comparable"
    assert check(tmp_path) == 2
    assert "nothing comparable" in capsys.readouterr().err


def test_a_data_bound_config_on_another_host_is_not_comparable_a_compute_bound_one_is(tmp_path, capsys):
    """Same GPU, another host: the config waiting on data 30% of the step is not comparable (the host's CPUs feed
    it), the one waiting 2% is compared; the key names the host."""
    gpu = dict(device="cuda", gpu_name="NVIDIA H100 80GB HBM3", gpu_count=1)
    configs = {"cfg-data": {"sps": 100.0, "data_wait_frac": 0.30}, "cfg-gpu": {"sps": 100.0, "data_wait_frac": 0.02}}
    for sweep_id, day, host, cpus in (("s1", 1, CPU, "0-15"), ("s2", 2, "Other CPU", "0-7")):
        sweep(tmp_path, sweep_id, configs, day=day, cpu_model=host, threads=f"affinity={cpus}", **gpu)
        if sweep_id == "s1":
            assert save(tmp_path) == 0
    code, rows = row_status(capsys, tmp_path)
    assert rows["cfg-data"]["status"] == "not comparable" and rows["cfg-gpu"]["status"] != "not comparable"
    assert rows["cfg-data"]["hardware"] == ("cuda 1x NVIDIA H100 80GB HBM3; data-bound: host Other CPU, 8 usable "
                                            "CPUs")
    assert f"host {CPU}, 16 usable CPUs" in rows["cfg-data"]["notes"][0]
    assert rows["cfg-gpu"]["hardware"] == "cuda 1x NVIDIA H100 80GB HBM3"


# ------------------------------------------------------------------------------------------
# bad input


def test_missing_baseline_file(tmp_path, capsys):
    sweep(tmp_path, "s1", {"cfg-a": 100.0})
    assert check(tmp_path, baseline="nope") == 2
    err = capsys.readouterr().err
    assert "'nope'" in err and "not found" in err
    assert check(tmp_path, baseline=str(tmp_path / "x.parquet")) == 2


def test_corrupt_baseline_file(tmp_path, capsys):
    sweep(tmp_path, "s1", {"cfg-a": 100.0})
    bad = baseline_mod.baselines_dir(tmp_path) / "broken.parquet"
    bad.parent.mkdir()
    bad.write_bytes(b"not a parquet file")
    assert check(tmp_path, baseline="broken") == 2
    err = capsys.readouterr().err
    assert "not a readable baseline" in err and "broken.parquet" in err
    assert bad.read_bytes() == b"not a parquet file"  # nothing overwritten


def test_baseline_of_other_schema_version(tmp_path, capsys):
    sweep(tmp_path, "s1", {"cfg-a": 100.0}, schema_version=SCHEMA_VERSION + 1)
    baseline_mod.write_baseline(load_runs(tmp_path), baseline_mod.baselines_dir(tmp_path) / "old.parquet")
    sweep(tmp_path, "s2", {"cfg-a": 100.0}, day=2)
    assert check(tmp_path, baseline="old") == 2
    assert f"schema_version [{SCHEMA_VERSION + 1}]" in capsys.readouterr().err


def test_empty_sweep(tmp_path, capsys):
    setup_check(tmp_path, {"cfg-a": 100.0}, status="oom")
    assert check(tmp_path) == 2
    assert "'s2' has no records with status ok" in capsys.readouterr().err


def test_unknown_sweep_id(tmp_path, capsys):
    setup_check(tmp_path, {"cfg-a": 100.0})
    assert check(tmp_path, "--sweep", "s9") == 2
    err = capsys.readouterr().err
    assert "'s9'" in err and "s1" in err and "s2" in err


def test_unknown_format(tmp_path, capsys):
    setup_check(tmp_path, {"cfg-a": 100.0})
    assert check(tmp_path, "--format", "xml") == 2
    assert "junit" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------
# baselines and output formats


def test_save_then_list(tmp_path, capsys):
    sweep(tmp_path, "s1", {"cfg-a": 100.0})
    assert save(tmp_path, "main-cpu") == 0
    assert (tmp_path / "baselines" / "main-cpu.parquet").is_file()
    capsys.readouterr()
    assert baseline_cmd.main("baseline", ["list", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "main-cpu" in out and "s1" in out and "3/3 ok" in out


def test_save_refuses_overwrite_without_force(tmp_path, capsys):
    sweep(tmp_path, "s1", {"cfg-a": 100.0})
    assert save(tmp_path) == 0
    path = tmp_path / "baselines" / "base.parquet"
    before = path.read_bytes()
    sweep(tmp_path, "s2", {"cfg-a": 50.0}, day=2)
    assert save(tmp_path) == 2
    assert "--force" in capsys.readouterr().err
    assert path.read_bytes() == before
    assert save(tmp_path, "base", "--force") == 0
    assert set(baseline_mod.load_baseline(path)["sweep_id"]) == {"s2"}


def test_save_rejects_bad_name_and_empty_sweep(tmp_path, capsys):
    sweep(tmp_path, "s1", {"cfg-a": 100.0}, status="error")
    assert save(tmp_path, "../evil") == 2
    assert "'../evil'" in capsys.readouterr().err
    assert save(tmp_path) == 2
    assert not (tmp_path / "baselines" / "base.parquet").exists()


def test_junit_output_has_a_failure_for_the_regressed_config(tmp_path, capsys):
    setup_check(tmp_path, {"cfg-a": 80.0, "cfg-b": 100.0}, baseline={"cfg-a": 100.0, "cfg-b": 100.0})
    capsys.readouterr()
    assert check(tmp_path, "--format", "junit") == 1
    root = ET.fromstring(capsys.readouterr().out)
    cases = {c.get("name"): c for c in root.iter("testcase")}
    assert len(cases) == 2
    failed = [name for name, c in cases.items() if c.find("failure") is not None]
    assert len(failed) == 1 and "cfg-a" in failed[0]
    assert root.find("testsuite").get("failures") == "1"


def test_markdown_summary_leads_with_the_verdict_and_its_commands_run_as_printed(tmp_path, capsys, monkeypatch):
    setup_check(tmp_path, {"cfg-a": 80.0})
    step = tmp_path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    capsys.readouterr()
    assert check(tmp_path, "--format", "md", "--summary", str(tmp_path / "summary.md"),
                 "--history-url", "https://ci.example.org/history/") == 1
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("### FAIL: decided slowdown: 1 regressed, ") and lines[0].endswith(" (exit 1)")
    assert re.search(r"\| phase2 rung 0 knob0=on \[unet cfg-a\] \| 100\.0\d \| 80\.00 \| 0\.800 \[0\.7\d\d, "
                     r"0\.8\d\d\] \| regressed: throughput -20\.0%", out)
    assert "History of every config: [https://ci.example.org/history/](https://ci.example.org/history/)" in out
    assert (tmp_path / "summary.md").read_text() == out.rstrip("\n") + "\n" == step.read_text()
    commands = out.split("```sh\n")[1].split("```")[0].strip().splitlines()
    assert commands == [f"python -m harness check --baseline base --sweep s2 --results {tmp_path}",
                        f"python -m harness history --results {tmp_path} --out {tmp_path / 'history'}"]
    from harness import cli

    for line, expected in zip(commands, (1, 0)):
        argv = shlex.split(line)
        assert argv[:3] == ["python", "-m", "harness"] and cli.main(argv[3:]) == expected, line


def test_baseline_given_by_path(tmp_path, capsys):
    setup_check(tmp_path, {"cfg-a": 100.0}, history=True)
    assert check(tmp_path, baseline=str(tmp_path / "baselines" / "base.parquet")) == 0


# ------------------------------------------------------------------------------------------
# pure statistics


def test_classify_needs_significance_and_the_band_below_the_threshold():
    assert classify(RatioEstimate(0.8, 0.78, 0.82), 0.05) == "regressed"
    assert classify(RatioEstimate(0.8, 0.78, 0.82), 0.05, significant=False) == "warned"
    assert classify(RatioEstimate(0.93, 0.91, 0.96), 0.05, significant=True) == "warned"
    assert classify(RatioEstimate(0.9, 0.75, 1.05), 0.05) == "warned"
    assert classify(RatioEstimate(0.9), 0.05) == "warned"  # no band: cannot tell noise
    assert classify(RatioEstimate(0.97, 0.96, 0.98), 0.05) == "unchanged"
    assert classify(RatioEstimate(1.2, 1.1, 1.3), 0.05) == "improved"
    assert classify(RatioEstimate(1.2, 0.9, 1.5), 0.05) == "unchanged"


def test_estimate_is_run_level_and_brackets_the_ratio():
    from scipy import stats as sps

    from harness.analysis.stats import noise_model

    base, cur = noise_model.Runs([100.0, 104.0, 98.0]), noise_model.Runs([80.0, 83.0, 79.0])
    first = check_throughput.estimate(base, cur, noise_model.DEFAULT)
    assert first == check_throughput.estimate(base, cur, noise_model.DEFAULT)
    assert first.low < first.ratio < first.high < 1
    b, c = np.log([100, 104, 98]), np.log([80, 83, 79])
    assert first.ratio == pytest.approx(np.exp(c.mean() - b.mean()))
    se2 = b.var(ddof=1) / 3 + c.var(ddof=1) / 3  # Welch, as a saved baseline shares no rounds
    df = se2 ** 2 / ((b.var(ddof=1) / 3) ** 2 / 2 + (c.var(ddof=1) / 3) ** 2 / 2)
    assert first.high == pytest.approx(first.ratio * np.exp(sps.t.isf(0.05, df) * np.sqrt(se2)))  # one-sided 5%
    assert first.method == "rung x round model across sweeps, the runs' own spread" and first.p_slower < 0.01


def test_one_run_per_side_and_no_calibration_has_no_band_and_says_so(tmp_path, capsys):
    sweep(tmp_path, "s1", {"cfg-a": 100.0}, day=1, repeats=1)
    assert save(tmp_path) == 0
    sweep(tmp_path, "s2", {"cfg-a": 90.0}, day=2, seed=1, repeats=1)
    capsys.readouterr()
    assert check(tmp_path) == 6  # 10% slower, but nothing measured says how noisy the machine is: undecided
    out = capsys.readouterr().out
    assert "noise: no calibration here" in out and "family-wise error <= 5% over 1 configs (Holm)" in out
    assert f"(run python -m harness noise workload=unet size=small device=cpu results_dir={tmp_path})" in out
    assert "between sessions: default sd 3%" in out
    code, rows = row_status(capsys, tmp_path)
    assert rows["cfg-a"]["status"] == "undecided" and rows["cfg-a"]["ci_low"] is None
    assert any("no variance, no band; add sweep.repeats=2" in n for n in rows["cfg-a"]["notes"])


# ------------------------------------------------------------------------------------------
# end to end on CPU: real sweeps (minutes)


def _sweep_cli(results, *overrides):
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "harness", "sweep", "+ladder=phase1", "sweep.repeats=2", "sweep.remeasure_busy=false",
           f"results_dir={results}", *overrides]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


@pytest.mark.slow
def test_end_to_end_rerun_raises_no_alarm_slowdown_fails_other_cpu_not_comparable(tmp_path, capsys):
    _sweep_cli(tmp_path)  # two runs a side: the runs' own spread gives the band
    assert save(tmp_path, "e2e") == 0
    _sweep_cli(tmp_path, "sweep.rerun=true")
    capsys.readouterr()
    # the same code: passed, or undecided where two runs a side cannot place the band above -5% (a busy minute);
    # never regressed
    assert check(tmp_path, baseline="e2e") in (0, 6), capsys.readouterr().out
    # a per-step sleep leaves config_hash unchanged, so the slowed run is compared with the baseline
    _sweep_cli(tmp_path, "sweep.rerun=true", "debug.slowdown_ms=3000")
    capsys.readouterr()
    assert check(tmp_path, baseline="e2e") == 1
    out = capsys.readouterr().out
    assert "regressed  phase1  0" in out
    doctored = baseline_mod.load_baseline(tmp_path / "baselines" / "e2e.parquet").assign(cpu_model="Other CPU")
    baseline_mod.write_baseline(doctored, tmp_path / "other-cpu.parquet")
    assert check(tmp_path, baseline=str(tmp_path / "other-cpu.parquet")) == 2
    assert "not comparable" in capsys.readouterr().out
