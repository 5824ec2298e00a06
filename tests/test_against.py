"""``check --against REF``: the order of the runs, the settings replayed, the git trees, the paired analysis and
the command end to end with a stand-in for ``harness run`` (each side's speed is a file of its tree). No torch."""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness import config as config_mod
from harness.analysis.gate import looks, paired, rule, verdicts
from harness.analysis.gate.thresholds import parse_thresholds
from harness.commands import against_rounds
from harness.commands import check as check_cmd
from harness.store import RunRecord, load_runs, write_record
from harness.sweeps import against, replay, worktree

# The stand-in child: one record in the results folder it is given, at the speed its side's tree says
# (speed.txt), busy when the tree says so (busy.txt), failing when it says so (fail.txt). Its noise (1%) is seeded
# by the run's config, side and round (its arguments after the folder): every run of a check draws the same.
FAKE_CHILD = '''
import sys, random
from pathlib import Path
from harness.store import RunRecord, new_id, utc_timestamp, write_record
here = Path.cwd()
speed = float((here / "speed.txt").read_text())
busy = float((here / "busy.txt").read_text()) if (here / "busy.txt").exists() else 1.0
status = (here / "fail.txt").read_text().strip() if (here / "fail.txt").exists() else "ok"
rng = random.Random("-".join(sys.argv[2:5]))  # config (rung), side, round
write_record(RunRecord(run_id=new_id(), status=status, timestamp=utc_timestamp(), workload="unet3d", device="cpu",
                       config_hash="cfg", samples_per_s=speed * (1 + rng.gauss(0, 0.01)), other_cpu_pct=busy,
                       cpu_model="Test CPU", cpu_count=2, error="" if status == "ok" else "injected"), sys.argv[1])
'''


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def make_repo(path: Path, speed: float = 100.0) -> Path:
    """A git repository with one commit whose tree runs at ``speed``."""
    path.mkdir()
    git(path, "init", "-q")
    git(path, "config", "user.email", "t@example.com")
    git(path, "config", "user.name", "t")
    (path / "speed.txt").write_text(str(speed))
    git(path, "add", "-A")
    git(path, "commit", "-qm", "first")
    return path


def commit(repo: Path, message: str, **files: str) -> None:
    for name, text in files.items():
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)


def write_sweep(results: Path, rungs: int = 2, sweep_id: str = "phase2-s1") -> None:
    """A stored sweep of ``rungs`` configs with their settings (config_json), as ``sweep`` stores them."""
    for rung in range(rungs):
        cfg = config_mod.from_dict({"workload": "unet3d", "size": "smoke", "batch_size": 2 + rung,
                                    "measure": {"steps": 5}})
        write_record(RunRecord(run_id=f"{sweep_id}-{rung}", status="ok", timestamp=f"2024-06-01T10:0{rung}:00+00:00",
                               workload="unet3d", device="cpu", config_hash=f"h{rung}", sweep_id=sweep_id,
                               ladder="phase2", rung=rung, change=f"batch_size={2 + rung}", samples_per_s=10.0,
                               config_json=json.dumps(config_mod.record_dict(cfg)), cpu_model="Test CPU",
                               cpu_count=2), results)


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A repository at speed 100 with a sweep in its results folder, the current folder, and the stand-in child."""
    root = make_repo(tmp_path / "repo")
    write_sweep(root / "results")
    script = tmp_path / "fake_child.py"
    script.write_text(FAKE_CHILD)
    monkeypatch.setattr(against, "command", lambda plan, turn: [
        sys.executable, str(script), str((plan.scratch / turn.side).resolve()), str(turn.replay.rung), turn.side,
        str(turn.round_)])
    monkeypatch.chdir(root)
    return root


def run_check(*args: str) -> int:
    return check_cmd.main("check", ["--against", *args])


# ------------------------------------------------------------------------------------------
# the command, end to end


def test_a_slower_working_tree_regresses_after_rounds_added_while_undecided(repo, capsys):
    commit(repo, "slower", **{"speed.txt": "80"})
    assert run_check("HEAD~1", "--rounds", "2") == 1
    captured = capsys.readouterr()
    out = captured.out
    assert "FAIL: regressed" in out and "phase2 rung 0" in out and "phase2 rung 1" in out
    # one degree of freedom after 2 rounds decides nothing; the look after round 4 does (20% slower, CV 1%)
    assert "look after round 2: 0 of 2 config(s) decided" in captured.err
    assert "look after round 4: 2 of 2 config(s) decided; stop" in captured.err
    assert "plan: 2 config(s) x 2 to 12 rounds x 2 sides = 8 to 48 runs" in captured.err
    stored = load_runs(repo / "results" / "checks")
    assert len(stored) == 2 * 2 * 4
    head, first = git(repo, "rev-parse", "HEAD"), git(repo, "rev-parse", "HEAD~1")
    assert set(zip(stored["against_side"], stored["against_commit"])) == {("work", head), ("ref", first)}
    assert sorted(stored["rung"].unique()) == [0, 1] and sorted(stored["round"].unique()) == [0, 1, 2, 3]
    assert (stored["ladder"] == "phase2").all() and stored["sweep_id"].nunique() == 1
    ref = stored[stored["against_side"] == "ref"]
    assert ref["samples_per_s"].between(90, 110).all()  # REF's tree ran REF's code (speed 100)
    kept, _ = verdicts.load_verdicts(repo / "results")
    assert kept[-1]["kind"] == "against" and kept[-1]["exit_code"] == 1
    assert (repo / "results" / ".against" / first / "speed.txt").read_text() == "100.0"


def test_the_same_code_passes_and_a_dirty_tree_is_measured_as_it_is(repo, capsys):
    commit(repo, "docs only", **{"README.md": "words"})
    (repo / "README.md").write_text("words, edited")  # uncommitted
    assert run_check("HEAD~1", "--rounds", "4", "--max-rounds", "4", "--format", "json") == 0
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    assert document["exit_code"] == 0 and document["work_commit"].endswith("-dirty")
    assert document["rounds"] == 4 and document["max_rounds"] == 4
    assert all(r["status"] == "unchanged" for r in document["rows"])
    assert "uncommitted changes" in captured.err


def test_a_busy_machine_exits_5_and_names_the_configs(repo, capsys):
    commit(repo, "slower and busy", **{"speed.txt": "50", "busy.txt": "35"})
    assert run_check("HEAD~1", "--rounds", "2") == 5  # busy decides nothing: no rounds added
    captured = capsys.readouterr()
    assert "machine busy" in captured.out and "phase2 rung 0" in captured.err
    assert "35% of the CPUs" in captured.err and "machine busy in 2 of 4 runs" in captured.out
    assert "stop: every run" not in captured.err  # REF's runs were quiet: the first round was not busy throughout


def test_a_first_round_busy_throughout_stops_there_with_exit_5(repo, capsys):
    commit(repo, "a neighbour's job", **{"busy.txt": "50"})
    commit(repo, "docs", **{"README.md": "words"})  # both sides' trees busy: every run of the first round is
    assert run_check("HEAD~1", "--rounds", "4") == 5
    captured = capsys.readouterr()
    assert "stop: every run of the first round was busy (other processes used 50% of the CPUs)" in captured.err
    assert len(load_runs(repo / "results" / "checks")) == 2 * 2  # 2 configs x 2 sides, one round of the 4 planned
    assert "BUSY" in captured.out


@pytest.mark.slow  # a whole scenario in fresh processes: the default tier keeps its cheaper siblings
def test_a_config_the_working_tree_now_fails_regresses(repo, capsys):
    commit(repo, "breaks", **{"fail.txt": "oom"})
    assert run_check("HEAD~1", "--rounds", "2", "--format", "junit") == 1
    out = capsys.readouterr().out
    assert out.count("<failure") == 2 and "now gets oom" in out


@pytest.mark.slow  # a whole scenario in fresh processes: the default tier keeps its cheaper siblings
def test_a_slowdown_within_the_threshold_ends_undecided_at_the_budget_never_regressed(repo, capsys, tmp_path):
    """4% slower at the 5% threshold: after 2 rounds the band holds 0.95; the time budget (a second) allows no
    third round, so the check ends undecided, exit 6, with the markdown summary written. The fake child's noise is
    seeded by config, side and round: which configs end undecided is the same every run."""
    commit(repo, "4% slower", **{"speed.txt": "96"})
    summary, step = tmp_path / "summary.md", tmp_path / "step.md"
    os.environ["GITHUB_STEP_SUMMARY"] = str(step)
    try:
        code = run_check("HEAD~1", "--rounds", "2", "--budget-min", "0.02", "--summary", str(summary))
    finally:
        del os.environ["GITHUB_STEP_SUMMARY"]
    captured = capsys.readouterr()
    assert code == 6, captured.out
    # the budget's stop: the rounds it allows done (the looks planned for them), or spent before another round
    assert "UNDECIDED" in captured.out and re.search(r"stop: (time budget spent|the 2 rounds the budget allows are "
                                                     r"done)", captured.err), captured.err
    assert len(load_runs(repo / "results" / "checks")) == 2 * 2 * 2
    text = summary.read_text()
    assert text.startswith("### UNDECIDED") and "(exit 6)" in text.splitlines()[0]
    assert step.read_text() == text
    rows = [line for line in text.splitlines() if line.startswith("| ") and "phase2 rung" in line]
    # both configs, each a band from 0.8 up that holds 0.95 with room to spare: two rounds of 1% noise decide neither
    assert text.splitlines()[0].startswith("### UNDECIDED: no decided slowdown: 0 unchanged, 2 undecided, 0 busy · ")
    assert sorted(r.split(" | ")[0] for r in rows) == ["| phase2 rung 0 batch_size=2 [unet3d cfg]",
                                                       "| phase2 rung 1 batch_size=3 [unet3d cfg]"], rows
    assert all("holds 0.95: neither beyond nor within the threshold yet" in r for r in rows), rows
    assert "History of every config: [results/history/index.html](results/history/index.html)" in text
    commands = text.split("```sh\n")[1].split("```")[0].strip().splitlines()
    head = git(repo, "rev-parse", "HEAD~1")
    assert commands[0] == (f"python -m harness check --against {head} --sweep phase2-s1 --results results --rounds 2 "
                           "--max-rounds 12 --budget-min 0.02")
    assert commands[1] == "python -m harness history --results results --out results/history"
    from harness import cli

    for line, expected in zip(commands, (6, 0)):  # each runs as printed (the same check again: undecided again)
        argv = shlex.split(line)
        assert argv[:3] == ["python", "-m", "harness"] and cli.main(argv[3:]) == expected, line
    assert (repo / "results" / "history" / "index.html").is_file()


def test_bad_input_is_one_line_and_exit_2(repo, capsys, tmp_path):
    assert run_check("no-such-ref") == 2
    err = capsys.readouterr().err
    assert "'no-such-ref' is not a commit" in err and "bad revision" in err
    assert run_check("HEAD", "--rounds", "1") == 2
    assert "2 or more rounds" in capsys.readouterr().err
    assert run_check("HEAD", "--rounds", "4", "--max-rounds", "3") == 2
    assert "--max-rounds 3: at least --rounds (4)" in capsys.readouterr().err
    assert run_check("HEAD", "--budget-min", "0") == 2
    assert "--budget-min 0: a positive number of minutes" in capsys.readouterr().err
    assert run_check("HEAD", "check.budget_min=soon") == 2
    assert "check.budget_min='soon': a number of minutes" in capsys.readouterr().err
    assert run_check("HEAD", "--sweep", "nope") == 2
    assert "'nope'" in capsys.readouterr().err
    assert run_check("HEAD", "batch_sise=3") == 2
    assert "batch_sise" in capsys.readouterr().err
    assert not (repo / "results" / "checks").exists()  # nothing measured


@pytest.mark.slow  # a whole scenario in fresh processes: the default tier keeps its cheaper siblings
def test_an_interrupted_check_resumes_from_its_stored_runs(repo, monkeypatch, capsys):
    real, calls = against.run_turn, []

    def interrupted_at_the_third(plan, turn):
        calls.append((turn.round_, turn.replay.rung, turn.side))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(plan, turn)

    monkeypatch.setattr(against, "run_turn", interrupted_at_the_third)
    with pytest.raises(KeyboardInterrupt):
        run_check("HEAD", "--rounds", "4", "--max-rounds", "4")
    first = load_runs(repo / "results" / "checks")
    assert len(first) == 2 and not verdicts.load_verdicts(repo / "results")[0]
    monkeypatch.setattr(against, "run_turn", real)
    assert run_check("HEAD", "--rounds", "4", "--max-rounds", "4") == 0
    assert "resuming check" in capsys.readouterr().err
    stored = load_runs(repo / "results" / "checks")
    assert stored["sweep_id"].nunique() == 1 and len(stored) == 2 * 2 * 4  # the two finished runs not measured again
    assert set(first["run_id"]) <= set(stored["run_id"])
    check_id = stored["sweep_id"].iloc[0]
    assert [d["check_id"] for d in verdicts.load_verdicts(repo / "results")[0]] == [check_id]
    assert against.unfinished_check(repo / "results", "any", lambda done: done == check_id) is None


def test_another_command_does_not_resume_an_interrupted_check(repo, monkeypatch):
    def interrupted(plan, turn):
        raise KeyboardInterrupt

    monkeypatch.setattr(against, "run_turn", interrupted)
    for rounds in ("2", "3", "3"):
        with pytest.raises(KeyboardInterrupt):
            run_check("HEAD", "--rounds", rounds)
    kept = [json.loads(p.read_text()) for p in (repo / "results" / ".against" / "runs").glob("*/check.json")]
    assert len(kept) == 2 and len({k["key"] for k in kept}) == 2  # --rounds 3 is another check, resumed once


def test_a_bad_value_is_refused_before_any_tree_is_made_or_run(repo, monkeypatch, capsys):
    monkeypatch.setattr(against, "run_turn", lambda plan, turn: pytest.fail("a run started"))
    assert run_check("HEAD", "batch_size=0") == 2
    assert "batch_size=0" in capsys.readouterr().err
    assert not (repo / "results" / ".against" / git(repo, "rev-parse", "HEAD")).exists()


def test_outside_a_repository(tmp_path, monkeypatch, capsys):
    write_sweep(tmp_path / "results")
    monkeypatch.chdir(tmp_path)
    assert run_check("HEAD") == 2
    assert "in none" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------
# the pieces


def test_turns_alternate_sides_and_snake_through_the_configs():
    replays = [replay.Replay(rung=i, ladder="l", change="", workload="w", config_hash="", overrides=())
               for i in range(3)]
    order = [(t.round_, t.replay.rung, t.side) for t in against.turns(replays, 2)]
    assert order == [(0, 0, "ref"), (0, 0, "work"), (0, 1, "work"), (0, 1, "ref"), (0, 2, "ref"), (0, 2, "work"),
                     (1, 2, "work"), (1, 2, "ref"), (1, 1, "ref"), (1, 1, "work"), (1, 0, "work"), (1, 0, "ref")]
    for rung in range(3):  # every config: REF first in one round, second in the other (ABBA)
        firsts = [o[2] for o in order if o[1] == rung][::2]
        assert sorted(firsts) == ["ref", "work"]


def test_replayed_settings_are_the_sweeps_and_the_users_win(tmp_path):
    write_sweep(tmp_path)
    records = load_runs(tmp_path)
    replays, warnings = replay.replay(records, ["measure.steps=9"])
    assert [r.rung for r in replays] == [0, 1] and not warnings
    assert replays[1].overrides[0] == "workload=unet3d"
    assert "batch_size=3" in replays[1].overrides and "size='smoke'" in replays[1].overrides
    assert "measure.steps=5" not in replays[1].overrides and replays[1].overrides[-1] == "measure.steps=9"
    assert not any(o.startswith(("results_dir", "sweep.")) for o in replays[1].overrides)
    assert replay.hydra_value(["a", 1, None, True]) == "['a',1,null,true]"
    assert replay.hydra_value("it's") == "'it\\'s'"


def test_a_workload_that_is_not_shipped_is_written_whole(tmp_path):
    spec = {"name": "tiny", "model": {"_target_": "pkg.Net", "width": 4}, "input_shape": [1, 8, 8, 8],
            "source_sha": "abc"}
    override, name, text = replay.workload_override(spec, 2)
    assert override == f"workload={name}" and name == "against-tiny-2"
    assert "pkg.Net" in text and "source_sha" not in text


def test_ref_worktree_is_made_once_and_reused(tmp_path):
    root = make_repo(tmp_path / "r")
    commit(root, "two", **{"speed.txt": "90"})
    first = worktree.resolve_commit(root, "HEAD~1")
    made = worktree.ref_tree(root, first, root / "results")
    assert (made.root / "speed.txt").read_text() == "100.0" and made.commit == first
    (made.root / "speed.txt").write_text("1")  # someone edits REF's tree: it is put back
    again = worktree.ref_tree(root, first, root / "results")
    assert again.root == made.root and (again.root / "speed.txt").read_text() == "100.0"
    assert git(root, "status", "--porcelain") == ""  # results/.against ignores itself
    assert not worktree.working_tree(root).dirty


def test_child_environment_leads_to_its_own_tree(tmp_path, monkeypatch):
    work, ref = tmp_path / "w", tmp_path / "w" / "results" / ".against" / "abc"
    ref.mkdir(parents=True)
    monkeypatch.setenv("PYTHONPATH", f"{work}:/elsewhere")
    plan = against.AgainstPlan("c", {"work": worktree.Tree(work, "1"), "ref": worktree.Tree(ref, "2")}, Path("."),
                               [], 2, tmp_path / "checks", tmp_path / "scratch")
    assert against.child_env(plan, "ref")["PYTHONPATH"].split(":") == [str(ref), "/elsewhere"]
    assert against.child_env(plan, "work")["PYTHONPATH"].split(":") == [str(work), "/elsewhere"]


def frame(ratios_by_rung: dict[int, list[float]], **extra) -> pd.DataFrame:
    rows = []
    for rung, ratios in ratios_by_rung.items():
        for rnd, ratio in enumerate(ratios):
            for side, sps in (("ref", 100.0), ("work", 100.0 * ratio)):
                rows.append({"against_side": side, "rung": rung, "round": rnd, "status": "ok", "samples_per_s": sps,
                             "workload": "w", "ladder": "l", "change": "", "config_hash": f"h{rung}", "error": "",
                             "other_cpu_pct": 1.0, **extra})
    return pd.DataFrame(rows)


def test_paired_rounds_decide_with_the_band_at_the_tested_level():
    rows = paired.analyse(frame({0: [0.80, 0.82, 0.79], 1: [1.0, 1.01, 0.99], 2: [0.93, 0.99, 0.90]}),
                          parse_thresholds(None, 0.05, "--threshold"))
    by = {r.rung: r for r in rows}
    assert by[0].status == "regressed" and by[0].upper < 0.95 and by[0].rounds == 3
    assert by[0].ratio == pytest.approx(math.exp(np.mean(np.log([0.80, 0.82, 0.79]))))
    assert by[1].status == "unchanged" and by[1].lower > 0.95  # decided: the whole band within the threshold
    assert by[2].status == "undecided" and by[2].lower < 0.95 <= by[2].upper
    assert by[0].level == pytest.approx(1 - 0.05 / 3)  # the smallest p-value, tested first at alpha / 3
    one = paired.analyse(frame({0: [0.80]}), parse_thresholds(None, 0.05, "--threshold"))
    assert one[0].status == "undecided"


def test_a_later_look_tests_at_the_spending_boundary_and_the_last_at_plain_holm():
    """Looks after rounds 2, 4, ..., 12 of a 12-round budget: the early looks' levels are far stricter than alpha,
    the last one's a little stricter; one look at the whole budget is plain Holm."""
    assert looks.look_rounds(4, 12) == [4, 6, 8, 10, 12] and looks.look_rounds(3, 8) == [3, 5, 7, 8]
    assert looks.fractions(6, 4, 12) == (4 / 12, 6 / 12) and looks.fractions(5, 4, 12) == (4 / 12, 5 / 12)
    assert looks.at_level(looks.fractions(4, 4, 4)) is None
    early = looks.at_level(looks.fractions(4, 4, 12))(0.05)
    last = looks.at_level(looks.fractions(12, 4, 12))(0.05)
    assert early < 0.003 and 0.034 < last < 0.05, (early, last)
    ratios = {0: [0.80, 0.82, 0.79, 0.81]}
    plain = paired.analyse(frame(ratios), parse_thresholds(None, 0.05, "--threshold"))[0]
    looked = paired.analyse(frame(ratios), parse_thresholds(None, 0.05, "--threshold"),
                            looks.at_level(looks.fractions(4, 4, 12)))[0]
    assert plain.level == pytest.approx(0.95) and looked.level == pytest.approx(1 - early)
    assert looked.upper > plain.upper


def test_holm_levels_never_show_an_untested_config_beyond_the_threshold():
    rejected, levels = rule.holm_arrays(np.array([[0.03, 0.04]]))  # 0.03 > 0.05/2: Holm stops at the first
    assert rejected[0].tolist() == [False, False] and levels[0].tolist() == [0.025, 0.025]
    decisions = rule.decide([rule.Effect(-0.2, 0.03, 4), rule.Effect(-0.01, 0.03, 4)], [0.05, 0.05])
    assert decisions[0].regressed and decisions[0].upper < 0.95 and not decisions[1].regressed
    for d in decisions:
        assert d.regressed == (d.upper < 0.95)


# ------------------------------------------------------------------------------------------
# end to end on CPU: real runs of both sides (minutes)


@pytest.mark.slow
def test_end_to_end_each_side_runs_its_own_harness(tmp_path):
    """A clone of this repository, a noise sweep of one config, then ``check --against HEAD`` with real runs: both
    sides measured, each run importing the harness of its own tree. The verdict itself is the machine's business
    (an A/A check on a busy machine exits 5, an undecided one 6), so only its agreement with the records is
    asserted."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(Path(__file__).resolve().parent.parent), str(clone)], check=True)
    env = {**os.environ, "PYTHONPATH": str(clone)}
    small = ["workload=unet3d", "size=smoke", "measure.steps=3", "measure.warmup_steps=1"]
    subprocess.run([sys.executable, "-m", "harness", "noise", "noise.runs=2", *small], cwd=clone, env=env, check=True,
                   capture_output=True, timeout=900)
    done = subprocess.run([sys.executable, "-m", "harness", "check", "--against", "HEAD", "--rounds", "2",
                           "--max-rounds", "2", "--format", "json"], cwd=clone, env=env, capture_output=True, text=True,
                          timeout=1800)
    document = json.loads(done.stdout)
    assert done.returncode == document["exit_code"] and done.returncode in (0, 1, 5, 6)
    head = git(clone, "rev-parse", "HEAD")
    stored = load_runs(clone / "results" / "checks")
    # two rounds of one run a side, unless every run of the first was busy: then the check stops after it (exit 5)
    busy_stop = document["stopped"].startswith("every run of the first round was busy")
    assert document["rounds"] == (1 if busy_stop else 2) and (not busy_stop or done.returncode == 5)
    assert len(stored) == 2 * document["rounds"] and set(stored["against_side"]) == {"ref", "work"}
    assert set(stored["against_commit"]) == {head} and set(stored["git_commit"]) == {head}
    assert (clone / "results" / ".against" / head / "harness" / "__init__.py").is_file()
    assert document["rows"][0]["rounds"] == 2 or document["rows"][0]["status"] in ("busy", "failed")


# ------------------------------------------------------------------------------------------
# the plan, the budget and the progress (harness.commands.against_rounds)


def test_the_budget_is_honoured_no_round_starts_that_would_end_past_it():
    """30 s a run, 4 configs (8 runs a round, 4 min), a 20 min budget: rounds 1-5 fit (the 5th ends at 20 min
    exactly); the 6th would end past the budget and does not start. The rounds before the first look always run."""
    for budget_min, first, expected in ((20, 2, 5), (21, 2, 5), (6, 2, 2), (6, 4, 4), (200, 2, 12)):
        clock = against_rounds.Clock(configs=4, first=first, max_rounds=12, budget_s=60 * budget_min,
                                     stored_run_s=30.0, started=0.0)
        done, now = 0, 0.0
        while True:
            if done and clock.refusal(done, now=now):
                break
            now += 8 * 30.0
            clock.run_s += [30.0] * 8
            done += 1
        assert done == expected, (budget_min, first, done)
        assert done <= first or now <= 60 * budget_min
    assert "--max-rounds 12" in clock.refusal(12, now=0.0)
    assert "time budget spent" in against_rounds.Clock(4, 2, 12, 600, 30.0, started=0.0).refusal(2, now=480)


def test_the_plan_estimates_a_run_from_the_gaps_between_stored_runs():
    import pandas as pd

    stored = pd.DataFrame({"sweep_id": ["s1"] * 4 + ["s2"] * 3,
                           "timestamp": ["2026-01-01T10:00:00+00:00", "2026-01-01T10:00:30+00:00",
                                         "2026-01-01T10:01:00+00:00", "2026-01-01T12:00:00+00:00",  # a pause
                                         "2026-01-02T09:00:00+00:00", "2026-01-02T09:00:40+00:00",
                                         "2026-01-02T09:01:20+00:00"]})
    seconds, gaps = against_rounds.estimate_run_s(stored)
    assert (seconds, gaps) == (35.0, 4)  # 30, 30, 40, 40: the two-hour pause is no run
    clock = against_rounds.Clock(configs=4, first=4, max_rounds=12, budget_s=1800, stored_run_s=seconds)
    assert clock.plan_line(gaps) == (
        "plan: 4 config(s) x 4 to 12 rounds x 2 sides = 32 to 96 runs, rounds added while a config is undecided; "
        "~18.7 to ~30.0 min (~35 s a run, from 4 gaps between stored runs of these configs); budget 30 min")
    assert "known after the first round" in against_rounds.Clock(4, 4, 12, 1800, None).plan_line(0)
    assert against_rounds.Clock(4, 4, 12, 600, 35.0).plan_line(4).endswith(
        "budget 10 min (the 4 rounds before the first look alone take longer: they always run)")


class Tty(__import__("io").StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_one_line_a_run_when_piped_and_a_bar_in_a_terminal():
    import io

    clock = against_rounds.Clock(configs=2, first=2, max_rounds=4, budget_s=600, stored_run_s=30.0)
    piped = io.StringIO()
    with against_rounds.Progress(clock, piped) as progress:
        progress.run(0, "round 1, rung 0, REF", None)
        progress.run(1, "round 1, rung 0, REF", "ok, 10.00 samples/s")
        progress.more_rounds(4)
        progress.run(5, "round 3, rung 1, working tree", "ok, 9.00 samples/s")
    assert piped.getvalue().splitlines() == ["[1/8, ~3.5 min left] round 1, rung 0, REF: ok, 10.00 samples/s",
                                             "[5/16, ~5.5 min left] round 3, rung 1, working tree: ok, 9.00 samples/s"]
    terminal = Tty()
    with against_rounds.Progress(clock, terminal) as progress:
        progress.run(3, "round 2, rung 1, REF", "ok")
        progress.say("look after round 2: 2 of 2 config(s) decided; stop")
    assert "look after round 2" in terminal.getvalue() and "[1/8" not in terminal.getvalue()
