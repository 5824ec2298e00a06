"""``check --against REF``: the order of the runs, the settings replayed, the git trees, the paired analysis and
the command end to end with a stand-in for ``harness run`` (each side's speed is a file of its tree). No torch."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness import config as config_mod
from harness.analysis.gate import paired, rule, verdicts
from harness.analysis.gate.thresholds import parse_thresholds
from harness.commands import check as check_cmd
from harness.store import RunRecord, load_runs, write_record
from harness.sweeps import against, replay, worktree

# The stand-in child: one record in the results folder it is given, at the speed its side's tree says
# (speed.txt), busy when the tree says so (busy.txt), failing when it says so (fail.txt).
FAKE_CHILD = '''
import os, sys, random
from pathlib import Path
from harness.store import RunRecord, new_id, utc_timestamp, write_record
here = Path.cwd()
speed = float((here / "speed.txt").read_text())
busy = float((here / "busy.txt").read_text()) if (here / "busy.txt").exists() else 1.0
status = (here / "fail.txt").read_text().strip() if (here / "fail.txt").exists() else "ok"
rng = random.Random(os.getpid())
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
    monkeypatch.setattr(against, "command", lambda plan, turn: [sys.executable, str(script),
                                                                 str((plan.scratch / turn.side).resolve())])
    monkeypatch.chdir(root)
    return root


def run_check(*args: str) -> int:
    return check_cmd.main("check", ["--against", *args])


# ------------------------------------------------------------------------------------------
# the command, end to end


def test_a_slower_working_tree_regresses_and_the_records_say_which_side(repo, capsys):
    commit(repo, "slower", **{"speed.txt": "80"})
    assert run_check("HEAD~1", "--rounds", "3") == 1
    out = capsys.readouterr().out
    assert "FAIL: regressed" in out and "phase2 rung 0" in out and "phase2 rung 1" in out
    stored = load_runs(repo / "results" / "checks")
    assert len(stored) == 2 * 2 * 3
    head, first = git(repo, "rev-parse", "HEAD"), git(repo, "rev-parse", "HEAD~1")
    assert set(zip(stored["against_side"], stored["against_commit"])) == {("work", head), ("ref", first)}
    assert sorted(stored["rung"].unique()) == [0, 1] and sorted(stored["round"].unique()) == [0, 1, 2]
    assert (stored["ladder"] == "phase2").all() and stored["sweep_id"].nunique() == 1
    ref = stored[stored["against_side"] == "ref"]
    assert ref["samples_per_s"].between(90, 110).all()  # REF's tree ran REF's code (speed 100)
    kept, _ = verdicts.load_verdicts(repo / "results")
    assert kept[-1]["kind"] == "against" and kept[-1]["exit_code"] == 1
    assert (repo / "results" / ".against" / first / "speed.txt").read_text() == "100.0"


def test_the_same_code_passes_and_a_dirty_tree_is_measured_as_it_is(repo, capsys):
    commit(repo, "docs only", **{"README.md": "words"})
    (repo / "README.md").write_text("words, edited")  # uncommitted
    assert run_check("HEAD~1", "--rounds", "3", "--format", "json") == 0
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    assert document["exit_code"] == 0 and document["work_commit"].endswith("-dirty")
    assert all(r["status"] == "unchanged" for r in document["rows"])
    assert "uncommitted changes" in captured.err


def test_a_busy_machine_exits_2_and_names_the_configs(repo, capsys):
    commit(repo, "slower and busy", **{"speed.txt": "50", "busy.txt": "35"})
    assert run_check("HEAD~1", "--rounds", "2") == 2
    captured = capsys.readouterr()
    assert "machine busy" in captured.out and "phase2 rung 0" in captured.err
    assert "35% of the CPUs" in captured.err and "machine busy in 2 of 4 runs" in captured.out


def test_a_config_the_working_tree_now_fails_regresses(repo, capsys):
    commit(repo, "breaks", **{"fail.txt": "oom"})
    assert run_check("HEAD~1", "--rounds", "2", "--format", "junit") == 1
    out = capsys.readouterr().out
    assert out.count("<failure") == 2 and "now gets oom" in out


def test_bad_input_is_one_line_and_exit_2(repo, capsys, tmp_path):
    assert run_check("no-such-ref") == 2
    err = capsys.readouterr().err
    assert "'no-such-ref' is not a commit" in err and "bad revision" in err
    assert run_check("HEAD", "--rounds", "1") == 2
    assert "2 or more rounds" in capsys.readouterr().err
    assert run_check("HEAD", "--sweep", "nope") == 2
    assert "'nope'" in capsys.readouterr().err
    assert run_check("HEAD", "batch_sise=3") == 2
    assert "batch_sise" in capsys.readouterr().err
    assert not (repo / "results" / "checks").exists()  # nothing measured


def test_an_interrupted_check_resumes_from_its_stored_runs(repo, monkeypatch, capsys):
    real, calls = against.run_turn, []

    def interrupted_at_the_third(plan, turn):
        calls.append((turn.round_, turn.replay.rung, turn.side))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(plan, turn)

    monkeypatch.setattr(against, "run_turn", interrupted_at_the_third)
    with pytest.raises(KeyboardInterrupt):
        run_check("HEAD", "--rounds", "2")
    first = load_runs(repo / "results" / "checks")
    assert len(first) == 2 and not verdicts.load_verdicts(repo / "results")[0]
    monkeypatch.setattr(against, "run_turn", real)
    assert run_check("HEAD", "--rounds", "2") == 0
    assert "resuming check" in capsys.readouterr().err
    stored = load_runs(repo / "results" / "checks")
    assert stored["sweep_id"].nunique() == 1 and len(stored) == 2 * 2 * 2  # the two finished runs not measured again
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
    assert against.with_search_path(["a=1", "hydra.searchpath=[file:///x]"], ["file:///y"]) == \
        ["a=1", "hydra.searchpath=[file:///x,file:///y]"]


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
    assert by[1].status == "unchanged" and by[2].status == "warned" and by[2].upper >= 0.95
    assert by[0].level == pytest.approx(1 - 0.05 / 3)  # the smallest p-value, tested first at alpha / 3
    one = paired.analyse(frame({0: [0.80]}), parse_thresholds(None, 0.05, "--threshold"))
    assert one[0].status == "inconclusive"


def test_holm_levels_never_show_an_untested_config_beyond_the_threshold():
    rejected, levels = rule.holm_levels([0.03, 0.04])  # 0.03 > 0.05/2: Holm stops at the first
    assert rejected == [False, False] and levels == [0.025, 0.025]
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
    (an A/A check on a busy machine exits 2), so only its agreement with the records is asserted."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(Path(__file__).resolve().parent.parent), str(clone)], check=True)
    env = {**os.environ, "PYTHONPATH": str(clone)}
    small = ["workload=unet3d", "size=smoke", "measure.steps=3", "measure.warmup_steps=1"]
    subprocess.run([sys.executable, "-m", "harness", "noise", "noise.runs=2", *small], cwd=clone, env=env, check=True,
                   capture_output=True, timeout=900)
    done = subprocess.run([sys.executable, "-m", "harness", "check", "--against", "HEAD", "--rounds", "2",
                           "--format", "json"], cwd=clone, env=env, capture_output=True, text=True, timeout=1800)
    document = json.loads(done.stdout)
    assert done.returncode == document["exit_code"] and done.returncode in (0, 1, 2)
    head = git(clone, "rev-parse", "HEAD")
    stored = load_runs(clone / "results" / "checks")
    assert len(stored) == 4 and set(stored["against_side"]) == {"ref", "work"}
    assert set(stored["against_commit"]) == {head} and set(stored["git_commit"]) == {head}
    assert (clone / "results" / ".against" / head / "harness" / "__init__.py").is_file()
    assert document["rows"][0]["rounds"] == 2 or document["rows"][0]["status"] in ("busy", "failed")
