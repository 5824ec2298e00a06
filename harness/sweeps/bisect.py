"""``bisect GOOD BAD``: the first commit between two that made a config slower, by paired checks.

As ``asv find`` and TorchBench's bisection: the commits of ``GOOD..BAD`` (the ancestry path, first parents, oldest
first) are halved by checks of a commit against GOOD (``check --against GOOD`` run in that commit's worktree).
BAD is checked first, over every config at the user's threshold: a range whose end does not regress against GOOD
is said before any other check is spent, and the configs it regressed on, with their ratios, are the question
every later step asks. A commit in the middle is asked only about those configs and only what bisection needs:
is it nearer BAD or GOOD? That is the gate's own rule against the half step: each config's threshold is half
BAD's slowdown on the log scale (``half_step``), so "regressed" says nearer BAD (the bad end moves there) and
"unchanged" nearer GOOD (the good end moves). A step that stays undecided after the rounds its budget allows,
or a busy or bad check, stops the bisection early and says the range it narrowed to, as does a budget spent.
The checks are ``check(commit, question) -> Answer``, so the logic here measures nothing itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from harness.sweeps.worktree import git

REGRESSED, UNCHANGED = 1, 0
WORDS = {0: "unchanged", 1: "regressed", 2: "bad input or nothing comparable", 5: "busy", 6: "undecided"}
STEP_WORDS = {0: "nearer GOOD", 1: "nearer BAD"}  # a step's answer against the half step


@dataclass(frozen=True)
class Answer:
    """What one check said: its exit code, the ratio work/GOOD of each config it called regressed (BAD's check:
    the question of every later step) and its bands in words (printed beside the step)."""

    code: int
    regressed: dict[int, float] = field(default_factory=dict)  # rung -> throughput ratio work / GOOD
    band: str = ""


Question = dict[int, float]  # rung -> threshold the step is asked at (the half step of BAD's slowdown)


def half_step(ratio: float) -> float:
    """The threshold of "nearer BAD than GOOD" for a config BAD runs at ``ratio`` x GOOD (< 1): the drop to the
    geometric middle, 1 - sqrt(ratio)."""
    return 1 - math.sqrt(ratio)


def question(bad: Answer) -> Question:
    """What every step after BAD asks: each config BAD regressed on, at its half step."""
    return {rung: half_step(ratio) for rung, ratio in sorted(bad.regressed.items())}


@dataclass
class Bisection:
    """What a bisection found: the first bad commit (None when it stopped early), the range it narrowed to, and
    every check it made (commit, exit code) with its bands."""

    good: str
    bad: str
    first_bad: str | None = None
    checks: list[tuple[str, int]] = field(default_factory=list)
    stopped: str = ""  # why it stopped before naming a commit ("" when it named one)
    bands: dict[str, str] = field(default_factory=dict)  # commit -> its check's band in words
    question: Question = field(default_factory=dict)


def commits_between(root: Path, good: str, bad: str) -> list[str]:
    """The commits after ``good`` up to ``bad`` on the first-parent ancestry path, oldest first (GitError when
    ``good`` is not an ancestor of ``bad``)."""
    listed = git(["rev-list", "--first-parent", "--ancestry-path", "--reverse", f"{good}..{bad}"], root).split()
    if not listed:
        raise ValueError(f"no commits between {good[:12]} and {bad[:12]}: GOOD must be an ancestor of BAD")
    return listed


def step_budget_s(left_s: float, configs: int, steps_after: int, configs_after: int = 1) -> float:
    """The seconds the next check (of ``configs`` configs) may spend: what is left, shared by it and the
    ``steps_after`` checks still planned after it (of ``configs_after`` configs each) in proportion to their runs
    a round. An undecided step stops the bisection, so each step gets rounds in proportion to what it measures:
    BAD's check over every config the most, the halving steps over the configs BAD regressed on the rest."""
    return left_s * configs / max(configs + max(steps_after, 0) * configs_after, 1)


def steps_after(low: int, high: int) -> int:
    """The halving checks still needed (at most) once ``commits[low]`` is good and ``commits[high]`` bad."""
    return max(high - low - 1, 0).bit_length()


def bisect(good: str, commits: list[str], check: Callable[[str, Question | None], Answer],
           budget_left: Callable[[], bool] = lambda: True) -> Bisection:
    """Halve ``commits`` (after ``good``, oldest first, the last one BAD) by ``check`` until one commit is left:
    ``check(BAD, None)`` over every config, then ``check(commit, question)`` (``question``)."""
    found = Bisection(good, commits[-1])

    def ask(commit: str, asked: Question | None) -> int | None:
        if not budget_left():
            found.stopped = "the budget is spent"
            return None
        answer = check(commit, asked)
        found.checks.append((commit, answer.code))
        found.bands[commit] = answer.band
        if answer.code not in (REGRESSED, UNCHANGED):
            found.stopped = f"{commit[:12]} against GOOD: {WORDS.get(answer.code, 'exit')} (exit {answer.code})"
            return None
        if asked is None and answer.code == REGRESSED:
            found.question = question(answer)
        return answer.code

    code = ask(commits[-1], None)
    if code is None:
        return found
    if code == UNCHANGED:
        found.stopped = f"BAD {commits[-1][:12]} is not slower than GOOD beyond the threshold: nothing to bisect"
        return found
    low, high = -1, len(commits) - 1  # commits[low] is good (-1: GOOD itself), commits[high] bad
    while high - low > 1:
        mid = (low + high) // 2
        code = ask(commits[mid], found.question or None)
        if code is None:
            found.good, found.bad = (commits[low] if low >= 0 else good), commits[high]
            return found
        low, high = (low, mid) if code == REGRESSED else (mid, high)
    found.first_bad = commits[high]
    found.good = commits[low] if low >= 0 else good
    return found
