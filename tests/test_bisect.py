"""``bisect GOOD BAD``: the halving with a faked check (instant), then the command end to end in a scratch
repository of five commits, one slowed in the middle, with the stand-in child of ``test_against`` (seconds)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.commands import bisect as bisect_cmd
from harness.sweeps import against
from harness.sweeps import bisect as bisect_mod
from tests.test_against import FAKE_CHILD, commit, git, make_repo, write_sweep

COMMITS = [f"c{i}" for i in range(1, 9)]  # after GOOD "c0"


def faked(first_bad: int, answers: dict[str, int] | None = None):
    """A check that says regressed (1) from commit ``first_bad`` on and unchanged (0) before, or ``answers``."""
    asked = []

    def check(commit: str, question) -> bisect_mod.Answer:
        asked.append(commit)
        assert (question is None) == (len(asked) == 1)  # BAD over every config, then the half step of config 3
        assert question is None or question == {3: pytest.approx(1 - 0.9 ** 0.5)}
        if answers and commit in answers:
            return bisect_mod.Answer(answers[commit])
        return bisect_mod.Answer(1 if COMMITS.index(commit) >= first_bad else 0, {3: 0.9})

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
    assert f"first bad commit: {slowed} slower" in captured.out and "against GOOD: rung 0 " in captured.out
    assert "bisect: 4 commit(s) after" in captured.err and "nearer BAD or GOOD? rung 0 at the half step" in captured.err


def test_bisect_refuses_bad_input_in_one_line(tmp_path, monkeypatch, capsys):
    root = make_repo(tmp_path / "repo")
    monkeypatch.chdir(root)
    assert bisect_cmd.main("bisect", ["HEAD", "nope"]) == 2
    assert "BAD 'nope': fatal: bad revision" in capsys.readouterr().err
    assert bisect_cmd.main("bisect", ["HEAD", "HEAD"]) == 2
    assert "GOOD must be an ancestor of BAD" in capsys.readouterr().err
    assert bisect_cmd.main("bisect", ["HEAD", "HEAD", "--budget-min", "0"]) == 2
    assert "--budget-min 0" in capsys.readouterr().err


def test_bisect_refuses_a_sweep_that_is_not_there_before_checking_out_a_commit(tmp_path, monkeypatch, capsys):
    root = make_repo(tmp_path / "repo")
    write_sweep(root / "results", rungs=1)
    commit(root, "docs", **{"README.md": "words"})
    monkeypatch.chdir(root)
    assert bisect_cmd.main("bisect", ["HEAD~1", "HEAD", "--sweep", "nope"]) == 2
    out = capsys.readouterr()
    assert out.err.strip() == "error: unknown sweep 'nope'. Valid choices: phase2-s1"
    assert "bisect stopped" not in out.out and not (root / "results" / ".against").exists()


def test_per_config_thresholds_parse_and_the_rung_filter_names_the_valid_rungs():
    from harness.analysis.gate.thresholds import BadInput, parse_thresholds
    from harness.commands import against as against_cmd
    from harness.sweeps.replay import Replay

    got = parse_thresholds(["0.05", "rung:2=0.0513"], 0.05, "--threshold")
    assert got.get("w", "l", 2) == 0.0513 and got.get("w", "l", 1) == 0.05 and "rung:2 -5.1%" in got.describe("-")
    with pytest.raises(BadInput, match="rung:N needs a config's rung number"):
        parse_thresholds(["rung:x=0.05"], 0.05, "--threshold")
    with pytest.raises(BadInput, match="per-config thresholds are for check --against"):
        got.check_names("--threshold", {"w"}, {"l"})
    replays = [Replay(k, "l", "", "w", f"h{k}", ()) for k in range(3)]
    assert [r.rung for r in against_cmd.only_rungs(replays, [2])] == [2]
    with pytest.raises(ValueError, match="--rung 5: not a config of the sweep; valid choices: 0, 1, 2"):
        against_cmd.only_rungs(replays, [5])
    assert bisect_mod.half_step(0.81) == pytest.approx(0.1)


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


def test_a_step_whose_runs_fail_is_skipped_and_the_answer_keeps_speed_apart_from_failure():
    from harness.analysis.gate.paired import PairedRow

    rows = [PairedRow("regressed", 3, ratio=1.0), PairedRow("unchanged", 4, ratio=1.0, level=0.975)]
    answer = bisect_cmd.to_answer(1, [type("Result", (), {"rows": rows})()], {3: 0.05, 4: 0.05})
    assert answer.regressed == {} and answer.failed == (3,) and answer.untestable
    check, asked = faked(5, answers={"c4": 1})
    wrapped = lambda c, q: bisect_mod.Answer(1, failed=(3,)) if c == "c4" else check(c, q)  # noqa: E731
    found = bisect_mod.bisect("c0", COMMITS, wrapped)
    assert found.first_bad == "c6" and ("c4", bisect_mod.SKIPPED) in found.checks
    check, asked = faked(5)
    every = lambda c, q: check(c, q) if c == "c8" else bisect_mod.Answer(1, failed=(3,))  # noqa: E731
    found = bisect_mod.bisect("c0", COMMITS, every)
    assert found.first_bad is None and "the first bad commit is one of c1, c2, c3, c4, c5, c6, c7, c8" in found.stopped
    check, asked = faked(5)
    bad_fails = lambda c, q: bisect_mod.Answer(1, failed=(3,)) if c == "c8" else check(c, q)  # noqa: E731
    found = bisect_mod.bisect("c0", COMMITS, bad_fails)
    assert found.first_bad is None and found.checks == [("c8", 1)] and asked == []
    assert "BAD c8 regressed only by failing to run (rung 3 there" in found.stopped
    assert bisect_cmd.report(Path("."), found) == 2 and "nothing to bisect" in found.stopped
