"""``check --against REF --bisect``: a decided regression bisects REF..HEAD within the check's budget and the
comment names the first slow commit. A scratch repository's history of 8 commits with one slowed, measured by the
stand-in child of ``test_against`` (its noise seeded by config, side and round)."""

from __future__ import annotations

import sys

import pytest

from harness.commands import check as check_cmd
from harness.sweeps import against
from tests.test_against import FAKE_CHILD, commit, git, make_repo, write_sweep


@pytest.mark.slow  # 30 stand-in runs in fresh processes: a minute or two on a busy 2-core machine
def test_a_regression_bisected_from_the_check_names_the_slowed_commit(tmp_path, monkeypatch, capsys):
    root = make_repo(tmp_path / "repo")
    write_sweep(root / "results", rungs=1)
    for i in range(1, 9):  # c5 makes the config 30% slower, the others touch nothing it runs
        commit(root, f"c{i}", **({"speed.txt": "70"} if i == 5 else {"notes.txt": f"change {i}"}))
    script = tmp_path / "fake_child.py"
    script.write_text(FAKE_CHILD)
    monkeypatch.setattr(against, "command", lambda plan, turn: [
        sys.executable, str(script), str((plan.scratch / turn.side).resolve()), str(turn.replay.rung), turn.side,
        str(turn.round_)])
    monkeypatch.chdir(root)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    slowed = git(root, "rev-parse", "HEAD~3")
    summary = tmp_path / "summary.md"
    code = check_cmd.main("check", ["--against", "HEAD~8", "--rounds", "3", "--max-rounds", "3", "--format", "md",
                                    "--summary", str(summary), "--bisect"])
    captured = capsys.readouterr()
    assert code == 1, captured.out[-3000:] + captured.err[-3000:]
    text = summary.read_text()
    assert text.startswith("### FAIL: decided slowdown: 1 regressed, 0 unchanged, 0 undecided, 0 busy · ")
    assert f"Bisect (REF..HEAD, within the check's budget): first bad commit: {slowed} c5 (last good " in text
    assert f"first bad commit: {slowed} c5" in captured.out  # printed after the comment, as written to the summary
    assert "bisect: 8 commit(s) after" in captured.err


def test_bisect_is_refused_where_nothing_can_bisect(tmp_path, monkeypatch, capsys):
    from harness.commands import against as against_cmd

    assert against_cmd.main("check", ["--against", "HEAD", "--bisect"]) == 2
    assert "--bisect: only `python -m harness check --against REF --bisect`" in capsys.readouterr().err
