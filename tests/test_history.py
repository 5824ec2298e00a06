"""``history``: every config's sessions over commits and dates, with the checks' verdicts (a synthetic store)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.analysis.views import history, history_page
from harness.analysis.gate import verdicts
from harness.commands import history as history_cmd
from harness.store import RunRecord, write_record

CPU = "Test CPU @ 3.0GHz"


def record(results, run_id, sweep_id, sps, day, config="cfg-a", rung=0, **fields):
    write_record(RunRecord(run_id=run_id, status=fields.pop("status", "ok"),
                           timestamp=f"2024-06-{day:02d}T10:00:00+00:00", workload="unet3d", device="cpu",
                           config_hash=config, sweep_id=sweep_id, ladder="phase2",
                           rung=rung, change="precision=bf16-mixed" if rung else "", samples_per_s=sps,
                           cpu_model=CPU, cpu_count=2, torch_version="2.4.0",
                           git_commit=fields.pop("git_commit", str(day) * 40),
                           other_cpu_pct=fields.pop("other_cpu_pct", 1.0), **fields), results)


@pytest.fixture
def store(tmp_path):
    """Two sweeps (days 1 and 2), a copy the cache made (day 2), one paired check (day 3) and two verdicts."""
    for i, sps in enumerate((100.0, 102.0, 98.0)):
        record(tmp_path, f"a{i}", "s1", sps, 1)
        record(tmp_path, f"b{i}", "s2", sps * 0.8, 2)
    record(tmp_path, "copy", "s2", 500.0, 2, config="cfg-b", cached_from="a0")
    checks = verdicts.checks_dir(tmp_path)
    for i in range(3):
        record(checks, f"r{i}", "against-1", 80.0, 3, against_side="ref", against_commit="a" * 40)
        record(checks, f"w{i}", "against-1", 60.0, 3, against_side="work", against_commit="b" * 40 + "-dirty",
               other_cpu_pct=40.0 if i == 0 else 1.0)
    verdicts.save_verdict(tmp_path, "baseline-x", {"kind": "baseline", "baseline": "results/baselines/main.parquet",
                                                   "checked_sweep": "s2", "rows": [
                                                       {"config_hash": "cfg-a", "hardware": f"cpu {CPU} (2 cores)",
                                                        "status": "regressed", "ratio": 0.8, "ci_low": 0.75,
                                                        "ci_high": 0.85}]})
    verdicts.save_verdict(tmp_path, "against-1", {"kind": "against", "check_id": "against-1", "ref": "HEAD~1",
                                                  "rows": [{"config_hash": "cfg-a", "status": "busy", "ratio": 0.75}]})
    return tmp_path


def test_points_are_sessions_with_sides_commits_and_busy_runs(store):
    found = history.collect(str(store))
    assert len(found.configs) == 1  # the cached copy is no measurement: cfg-b has no session
    config = found.configs[0]
    assert config.hardware == f"cpu {CPU} (2 cores)"
    assert [(p.session, p.source) for p in config.points] == [("s1", "sweep"), ("s2", "sweep"),
                                                                ("against-1", "check REF"), ("against-1", "check work")]
    first = config.points[0]
    assert first.samples_per_s == pytest.approx((100 * 102 * 98) ** (1 / 3)) and first.low < 100 < first.high
    assert first.commit == "1" * 12 and first.runs == first.ok == 3
    work = config.points[-1]
    assert work.commit == "b" * 12 + "-dirty" and "40% of the CPUs" in work.busy
    assert "torch 2.4.0" in work.environment and config.points[2].busy == ""


def test_verdicts_land_on_the_sessions_they_judged(store):
    config = history.collect(str(store)).configs[0]
    by = {m.kind: m for m in config.marks}
    assert by["baseline"].decision == "regressed" and by["baseline"].session == "s2"
    assert by["baseline"].against == "main" and by["baseline"].low == 0.75
    assert by["against"].decision == "busy" and by["against"].session == "against-1"
    assert by["against"].against == "HEAD~1"


def test_page_has_an_index_a_chart_per_config_and_the_verdicts(store):
    page = history_page.page(history.collect(str(store)))
    config = history.collect(str(store)).configs[0]
    assert f"href='#{config.anchor}'" in page and f"id='{config.anchor}'" in page
    assert page.count("<svg") == 1 and page.count("<circle") >= 4
    assert "class='regressed'>regressed" in page and "class='busy'>busy" in page
    assert "<script" not in page and "http" not in page.replace("http://www.w3.org", "")  # self-contained


def test_command_writes_one_page_and_refuses_bad_input(store, tmp_path, capsys):
    out = tmp_path / "site"
    assert history_cmd.main("history", ["--results", str(store), "--out", str(out)]) == 0
    assert (out / "index.html").is_file() and "1 config(s)" in capsys.readouterr().out
    assert history_cmd.main("history", ["--results", str(store), "--out", str(out), "--ladder", "phase9"]) == 2
    err = capsys.readouterr().err
    assert "'phase9'" in err and "valid choices: phase2" in err
    assert history_cmd.main("history", ["--results", str(tmp_path / "none"), "--out", str(out)]) == 2
    assert history_cmd.main("history", ["--results", str(store)]) == 2  # --out is required


def test_history_never_imports_torch_or_hydra(store, tmp_path):
    code = ("import sys; from harness.commands import history; "
            f"assert history.main('history', ['--results', {str(store)!r}, '--out', {str(tmp_path / 'o')!r}]) == 0; "
            "bad = [m for m in ('torch', 'hydra') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, cwd=Path(__file__).parent.parent)


def test_refs_runs_join_the_working_trees_config(store):
    checks = verdicts.checks_dir(store)
    record(checks, "r9", "against-2", 70.0, 4, config="ref-hash", against_side="ref", against_commit="c" * 40)
    record(checks, "w9", "against-2", 70.0, 4, against_side="work", against_commit="d" * 40)
    verdicts.save_verdict(store, "against-2", {"kind": "against", "check_id": "against-2", "ref": "HEAD~1", "rows": []})
    found = history.collect(str(store))
    assert len(found.configs) == 1
    assert ("against-2", "check REF") in [(p.session, p.source) for p in found.configs[0].points]


def test_a_one_run_session_is_a_point_without_a_band(tmp_path):
    record(tmp_path, "one", "s1", 100.0, 1)
    for i, sps in enumerate((100.0, 104.0)):
        record(tmp_path, f"two{i}", "s2", sps, 2)
    one, two = history.collect(str(tmp_path)).configs[0].points
    assert one.runs == 1 and one.low is None and one.high is None  # no variance known, none assumed
    assert two.low < two.samples_per_s < two.high
    svg = history_page.chart(history.collect(str(tmp_path)).configs[0])
    assert svg.count("stroke-width='2'/><circle") == 1  # one band line: the two-run session's


def drop_store(results, before=100.0, after=80.0, days=8, commit=None):
    """``days`` sweeps of three runs, the level dropping after day ``days // 2`` (commits are the day's digit, or
    ``commit`` for every sweep)."""
    rng = np.random.default_rng(3)
    for day in range(1, days + 1):
        level = before if day <= days // 2 else after
        for i in range(3):
            record(results, f"d{day}-{i}", f"s{day}", level * float(np.exp(rng.normal(0, 0.01))), day,
                   **({} if commit is None else {"git_commit": commit}))


def test_change_points_are_marked_on_the_page_and_listed_with_their_commit_range(tmp_path, capsys):
    drop_store(tmp_path)
    (config,) = history.collect(str(tmp_path)).configs
    (step,) = config.steps
    assert (step.good, step.bad, step.bad_session) == ("4" * 12, "5" * 12, "s5")
    assert step.ratio == pytest.approx(0.8, rel=0.02)
    assert history_cmd.main("history", ["--results", str(tmp_path), "--out", str(tmp_path / "site")]) == 0
    page = (tmp_path / "site" / "index.html").read_text()
    assert "step -19.9%" in page and "class='step'" in page
    bisect = f"python -m harness bisect {'4' * 12} {'5' * 12} --results {tmp_path} --sweep s5"
    assert bisect in page
    capsys.readouterr()
    assert history_cmd.main("history", ["--results", str(tmp_path), "--regressions"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("1 regression(s) among the change points of 1 config(s) (a drop of more than 5% between two "
                      "sweeps)")
    assert out[1].startswith("unet3d: phase2 rung 0 [cfg-a] on cpu Test CPU @ 3.0GHz (2 cores): -19.9% between")
    assert f"commits {'4' * 12}..{'5' * 12}" in out[1] and out[2] == f"  {bisect}"
    assert history_cmd.main("history", ["--results", str(tmp_path), "--regressions", "--threshold", "0.3"]) == 0
    assert capsys.readouterr().out.startswith("0 regression(s)")
    assert history_cmd.main("history", ["--results", str(tmp_path)]) == 2
    assert "give --out FOLDER" in capsys.readouterr().err


@pytest.mark.parametrize("commit, why", [("a" * 40, "both sessions ran commit aaaaaaaaaaaa"),
                                         ("", "a session's commit is not known")])
def test_a_step_with_no_commit_range_says_why_instead_of_a_bisect_command_that_cannot_run(tmp_path, capsys,
                                                                                          commit, why):
    """Sweeps of one commit (the machine or the environment moved) or of no known commit: `bisect GOOD BAD` has no
    commits to try (it refuses GOOD == BAD and an empty GOOD), so no such command is printed."""
    drop_store(tmp_path, commit=commit)
    (config,) = history.collect(str(tmp_path)).configs
    (step,) = config.steps
    assert (step.good, step.bad) == (commit[:12], commit[:12]) and step.ratio == pytest.approx(0.8, rel=0.02)
    assert history_cmd.main("history", ["--results", str(tmp_path), "--regressions"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("1 regression(s)") and "-19.9% between" in out[1]
    assert out[2].startswith(f"  {why}: no commit to bisect") and not any("harness bisect" in line for line in out)
    assert history_cmd.main("history", ["--results", str(tmp_path), "--out", str(tmp_path / "site")]) == 0
    page = (tmp_path / "site" / "index.html").read_text()
    assert page.count("class='step'") == 1 and "harness bisect" not in page and "no commit to bisect" in page


def test_a_drift_is_listed_as_one_slope_without_a_bisect_command(tmp_path, capsys):
    """Four levels, each three sweeps 10% below the last: one slope (a drift), not three steps to bisect."""
    rng = np.random.default_rng(4)
    for day, level in enumerate([100, 100, 100, 90, 90, 90, 81, 81, 81, 73, 73, 73], start=1):
        for i in range(3):
            record(tmp_path, f"d{day}-{i}", f"s{day}", level * float(np.exp(rng.normal(0, 0.005))), day)
    (config,) = history.collect(str(tmp_path)).configs
    (slope,) = config.steps
    assert slope.slope and slope.steps == 3 and (slope.good, slope.bad) == ("3" * 12, "10" * 6)
    assert history_cmd.main("history", ["--results", str(tmp_path), "--regressions"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("1 regression(s)") and ": a slope of 3 steps, -27." in out[1]
    assert out[2] == f"  {history_page.SLOPE_WHY}" and not any("bisect" in line for line in out)
    assert history_cmd.main("history", ["--results", str(tmp_path), "--out", str(tmp_path / "site")]) == 0
    page = (tmp_path / "site" / "index.html").read_text()
    assert page.count("class='step'") == 1 and "slope -27." in page and "harness bisect" not in page


def test_a_move_within_the_sessions_wander_is_listed_undecided_without_commits_to_bisect(tmp_path, capsys):
    """18 sweeps of one run whose level rose and fell back (a seeded AR(1), rho 0.7): the sd of successive
    differences read a -6.7% step with a bisect command; the sweeps' residuals correlate, so it is undecided."""
    series = [98.8, 99.8, 103.8, 104.6, 104.0, 106.1, 105.9, 108.8, 103.1, 102.4, 102.9, 100.6, 100.4, 98.1, 95.8,
              99.6, 94.7, 93.1]
    for day, level in enumerate(series, start=1):
        record(tmp_path, f"d{day}", f"s{day}", level, day)
    (config,) = history.collect(str(tmp_path)).configs
    (move,) = config.steps
    assert move.undecided and (move.good, move.bad) == ("13" * 6, "14" * 6) and move.ratio == pytest.approx(0.933,
                                                                                                            abs=0.002)
    assert history_cmd.main("history", ["--results", str(tmp_path), "--regressions"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("0 regression(s)") and out[1].startswith("1 undecided drop(s) of more than 5%")
    assert ": undecided, -6.7% between" in out[2] and out[3].startswith("  undecided: the level of this config's")
    assert not any("harness bisect" in line for line in out)
    assert history_cmd.main("history", ["--results", str(tmp_path), "--out", str(tmp_path / "site")]) == 0
    page = (tmp_path / "site" / "index.html").read_text()
    assert "undecided -6.7%" in page and "harness bisect" not in page and "sweeps cannot tell" in page


def test_the_example_store_draws_a_one_run_session_without_a_band_and_marks_its_change_point(tmp_path, capsys):
    """The committed example (examples/history: seeded, synthetic records, made by its make_store.py)."""
    store = Path(__file__).resolve().parents[1] / "examples" / "history" / "results"
    found = history.collect(str(store))
    slowed = next(c for c in found.configs if c.rung == 1)
    one_run = [p for p in slowed.points if p.runs == 1]
    assert len(one_run) == 1 and one_run[0].low is None and one_run[0].high is None
    (step,) = slowed.steps
    assert (step.good, step.bad) == ("5" * 12, "6" * 12) and 0.78 < step.ratio < 0.83
    assert not next(c for c in found.configs if c.rung == 0).steps
    assert history_cmd.main("history", ["--results", str(store), "--out", str(tmp_path)]) == 0
    page = (tmp_path / "index.html").read_text()
    assert page.count("class='step'") == 1 and f"bisect {'5' * 12} {'6' * 12}" in page


def test_a_check_that_never_decided_is_not_drawn_as_sessions(store):
    checks = verdicts.checks_dir(store)
    for i in range(2):  # an interrupted check: runs of both sides, no verdict
        record(checks, f"half-r{i}", "against-2", 10.0, 4, against_side="ref", against_commit="a" * 40)
        record(checks, f"half-w{i}", "against-2", 10.0, 4, against_side="work", against_commit="c" * 40)
    sessions = [p.session for c in history.collect(str(store)).configs for p in c.points]
    assert sessions == ["s1", "s2", "against-1", "against-1"]


def test_an_out_folder_that_cannot_be_written_names_the_flag_and_the_fix(store, capsys):
    assert history_cmd.main("history", ["--results", str(store), "--out", "/proc/harness-history"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("error: --out '/proc/harness-history': cannot write index.html there (No such file or directory, "
                   "FileNotFoundError); choose a folder you can write, such as results/history")


def test_a_verdict_goes_to_the_store_first_then_to_the_other_sinks_and_a_refused_one_to_none(tmp_path, capsys):
    handed = []

    class Tracker:
        def put(self, verdict):
            handed.append(verdict.check_id)

    verdict = verdicts.Verdict("against 7", {"kind": "against", "rows": []})
    assert verdicts.hand_out(verdict, verdicts.VerdictStore(tmp_path), Tracker()) == "against_7"
    assert handed == ["against_7"] and verdicts.load_verdicts(tmp_path)[0][0]["kind"] == "against"
    (tmp_path / "file").write_text("")  # a results folder that is a file: the store refuses the verdict
    assert verdicts.hand_out(verdict, verdicts.VerdictStore(tmp_path / "file"), Tracker()) == ""
    assert handed == ["against_7"] and "warning: the verdict was not kept" in capsys.readouterr().err


def test_regressions_say_which_configs_had_too_few_sweeps_to_look_for_a_change_point(tmp_path, capsys):
    drop_store(tmp_path)  # cfg-a: 8 sweeps, one step
    for day in (1, 2, 3):  # cfg-b: 3 sweeps, nothing looked for
        record(tmp_path, f"b{day}", f"s{day}", 50.0 if day < 3 else 30.0, day, config="cfg-b", rung=1)
    assert history_cmd.main("history", ["--results", str(tmp_path), "--regressions"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("1 regression(s) among the change points of 1 config(s) (a drop of more than 5% between two "
                      "sweeps)")
    assert out[1] == "1 config(s) not examined: fewer than 6 quiet sweeps of them, too few to place a change point"
    assert out[2].startswith("unet3d: phase2 rung 0 [cfg-a]")
