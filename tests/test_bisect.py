"""``bisect GOOD BAD``: the halving with a faked check (instant), then the command end to end in a scratch
repository of five commits, one slowed in the middle, with the stand-in child of ``test_against`` (seconds)."""

from __future__ import annotations

import sys

import pytest

from harness.commands import bisect as bisect_cmd
from harness.sweeps import against
from harness.sweeps import bisect as bisect_mod
from tests.test_against import FAKE_CHILD, commit, git, make_repo, write_sweep

COMMITS = [f"c{i}" for i in range(1, 9)]  # after GOOD "c0"


def faked(first_bad: int, answers: dict[str, int] | None = None):
    """A check that says regressed (1) from commit ``first_bad`` on and unchanged (0) before, or ``answers``."""
    asked = []

    def check(commit: str) -> int:
        asked.append(commit)
        if answers and commit in answers:
            return answers[commit]
        return 1 if COMMITS.index(commit) >= first_bad else 0

    return check, asked


@pytest.mark.parametrize("first_bad", range(len(COMMITS)))
def test_halving_names_the_first_bad_commit_in_log2_checks(first_bad):
    check, asked = faked(first_bad)
    found = bisect_mod.bisect("c0", COMMITS, check)
    assert found.first_bad == COMMITS[first_bad] and not found.stopped
    assert asked[0] == "c8" and len(asked) <= 1 + 3  # BAD first, then log2(8) halvings


def test_an_undecided_or_busy_check_stops_early_with_the_range_it_narrowed_to():
    check, asked = faked(5, answers={"c4": 6})  # BAD c8 regressed; c4 undecided
    found = bisect_mod.bisect("c0", COMMITS, check)
    assert found.first_bad is None and asked == ["c8", "c4"]
    assert (found.good, found.bad) == ("c0", "c8") and "c4 against GOOD: undecided (exit 6)" in found.stopped
    check, asked = faked(5, answers={"c6": 5})
    found = bisect_mod.bisect("c0", COMMITS, check)
    assert asked == ["c8", "c4", "c6"] and (found.good, found.bad) == ("c4", "c8") and "busy" in found.stopped


def test_a_bad_end_that_does_not_regress_is_said_first_and_a_spent_budget_stops():
    check, asked = faked(99)
    found = bisect_mod.bisect("c0", COMMITS, check)
    assert asked == ["c8"] and "nothing to bisect" in found.stopped and found.first_bad is None
    budget = iter([True, True, False])
    check, asked = faked(2)
    found = bisect_mod.bisect("c0", COMMITS, check, lambda: next(budget))
    assert asked == ["c8", "c4"] and found.stopped == "the budget is spent" and (found.good, found.bad) == ("c0", "c4")


@pytest.mark.slow  # minutes of the default tier's 8; the same path runs in faster tests
def test_bisect_over_five_commits_names_the_slowed_one(tmp_path, monkeypatch, capsys):
    """GOOD, two fast commits, the slowed one, a docs commit after it: four checks of one config, 3 rounds each."""
    root = make_repo(tmp_path / "repo")
    write_sweep(root / "results", rungs=1)
    commit(root, "docs", **{"README.md": "words"})
    commit(root, "refactor", **{"other.txt": "x"})
    commit(root, "slower", **{"speed.txt": "70"})
    commit(root, "more docs", **{"README.md": "more words"})
    script = tmp_path / "fake_child.py"
    script.write_text(FAKE_CHILD)
    monkeypatch.setattr(against, "command", lambda plan, turn: [sys.executable, str(script),
                                                                 str((plan.scratch / turn.side).resolve())])
    monkeypatch.chdir(root)
    slowed = git(root, "rev-parse", "HEAD~1")
    code = bisect_cmd.main("bisect", ["HEAD~4", "HEAD", "--rounds", "3", "--max-rounds", "3"])
    captured = capsys.readouterr()
    assert code == 0, captured.out[-2000:] + captured.err[-2000:]
    assert f"first bad commit: {slowed} slower" in captured.out
    assert "bisect: 4 commit(s) after" in captured.err


def test_bisect_refuses_bad_input_in_one_line(tmp_path, monkeypatch, capsys):
    root = make_repo(tmp_path / "repo")
    monkeypatch.chdir(root)
    assert bisect_cmd.main("bisect", ["HEAD", "nope"]) == 2
    assert "BAD 'nope': fatal: bad revision" in capsys.readouterr().err
    assert bisect_cmd.main("bisect", ["HEAD", "HEAD"]) == 2
    assert "GOOD must be an ancestor of BAD" in capsys.readouterr().err
    assert bisect_cmd.main("bisect", ["HEAD", "HEAD", "--budget-min", "0"]) == 2
    assert "--budget-min 0" in capsys.readouterr().err


def test_bisect_takes_settings_anywhere_among_its_options_as_its_usage_shows(monkeypatch, capsys):
    seen = []
    monkeypatch.setattr(bisect_cmd, "run_bisect", lambda args: seen.append(args) or 0)
    argv = ["GOOD", "BAD", "--rounds", "2", "measure.steps=5", "--threshold", "ladder:phase2=0.1", "seed=1"]
    assert bisect_cmd.main("bisect", argv) == 0
    args = seen[0]
    assert (args.good, args.bad, args.rounds, args.threshold) == ("GOOD", "BAD", 2, ["ladder:phase2=0.1"])
    assert args.overrides == ["measure.steps=5", "seed=1"]
    assert bisect_cmd.main("bisect", ["GOOD", "--rounds", "2"]) == 2  # BAD missing: one line, exit 2
    assert capsys.readouterr().err.count("\n") == 1
