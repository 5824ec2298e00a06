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
A step where a config asked fails to run (REF ran ok) and none is nearer BAD by its speed cannot answer a speed
question: it is skipped, as ``git bisect skip``, and the commit nearest the middle not yet skipped is asked;
counting the failure as "nearer BAD" named a broken commit before the slow one as the first bad commit. A BAD
that regressed only by failing to run has no slowdown to find: the bisection stops there (exit 2), checking nothing
more.
The checks are ``check(commit, question) -> Answer``, so the logic here measures nothing itself: it is a policy
over the session engine (``harness.session.engine``), which runs the check of the commit it decides on next.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from harness.session import engine
from harness.session.events import Events, Listener
from harness.sweeps.worktree import git

REGRESSED, UNCHANGED = 1, 0
SKIPPED = 125  # a step whose asked configs fail to run there: no speed to compare (git bisect run's "skip" code)
WORDS = {0: "unchanged", 1: "regressed", 2: "bad input or nothing comparable", 5: "busy", 6: "undecided"}
STEP_WORDS = {0: "nearer GOOD", 1: "nearer BAD", SKIPPED: "skipped: a config asked fails to run there"}


@dataclass(frozen=True)
class Answer:
    """What one check said: its exit code, the ratio work/GOOD of each config it called regressed (BAD's check:
    the question of every later step) and its bands in words (printed beside the step)."""

    code: int
    regressed: dict[int, float] = field(default_factory=dict)  # rung -> throughput ratio work / GOOD
    band: str = ""
    failed: tuple[int, ...] = ()  # rungs whose runs fail at this commit where GOOD's ran ok (no speed verdict)

    @property
    def untestable(self) -> bool:
        """Regressed only by failing to run: a step cannot say from it whether the speed is nearer BAD."""
        return self.code == REGRESSED and not self.regressed and bool(self.failed)


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


@dataclass(frozen=True)
class Step:
    """One check of the bisection: a turn of its session (``question`` None: BAD, over every config)."""

    commit: str
    question: Question | None

    @property
    def label(self) -> str:
        return self.commit[:12]


@dataclass(frozen=True)
class Checked:
    """A check's outcome for the engine (no record of its own: its runs are in the check's store)."""

    answer: Answer
    record: None = None
    how: str = "measured"


class Halving:
    """The bisection as a policy over the session engine: one check a round, the next commit decided by the answers
    so far (BAD first over every config, then the middle of the range left, asked BAD's question); a check that
    says neither regressed nor unchanged, or a spent budget, ends it with the range it narrowed to."""

    remeasure_busy = False  # a check judges a busy machine itself (exit 5)
    keep_going = False  # a check that cannot start ends the bisection with its error

    def __init__(self, good: str, commits: list[str], check: Callable[[str, Question | None], Answer],
                 budget_left: Callable[[], bool]):
        self.commits, self.check, self.budget_left = commits, check, budget_left
        self.found = Bisection(good, commits[-1])
        self.low, self.high = -1, len(commits) - 1  # commits[low] is good (-1: GOOD itself), commits[high] bad
        self.asked = False  # BAD was checked
        self.skipped: set[int] = set()  # indices of commits whose runs fail: no speed answer (git bisect skip)
        self.answer: Answer | None = None

    def next_turns(self, round_: int, events: Events) -> list[Step] | None:
        if self.asked and self.high - self.low <= 1:
            self.found.first_bad = self.commits[self.high]
            self.found.good = self._good()
            return None
        if not self.budget_left():
            self.found.stopped = "the budget is spent"
            return self._narrowed()
        if not self.asked:
            return [Step(self.commits[-1], None)]
        middle = self._middle()
        if middle is None:
            left = ", ".join(self.commits[i][:12] for i in range(self.low + 1, self.high + 1))
            self.found.stopped = f"only commits whose runs fail are left: the first bad commit is one of {left}"
            return self._narrowed()
        return [Step(self.commits[middle], self.found.question or None)]

    def _middle(self) -> int | None:
        """The commit to ask next: the middle of the range left, or the one nearest it not skipped (None: none)."""
        mid = (self.low + self.high) // 2
        left = [i for i in range(self.low + 1, self.high) if i not in self.skipped]
        return min(left, key=lambda i: (abs(i - mid), i)) if left else None

    def held(self, turn: Step) -> bool:
        return False

    def measure(self, turn: Step, again: bool, hooks: engine.Hooks) -> Checked:
        hooks.started(None)
        self.answer = self.check(turn.commit, turn.question)
        skip = turn.question is not None and self.answer.untestable
        self.found.checks.append((turn.commit, SKIPPED if skip else self.answer.code))
        self.found.bands[turn.commit] = self.answer.band
        return Checked(self.answer)

    def look(self, rounds: int, events: Events) -> bool:
        commit, code = self.found.checks[-1]
        if code == SKIPPED:
            self.skipped.add(self.commits.index(commit))
            return True
        if code not in (REGRESSED, UNCHANGED):
            self.found.stopped = f"{commit[:12]} against GOOD: {WORDS.get(code, 'exit')} (exit {code})"
            self._narrowed()
            return False
        if not self.asked:
            self.asked = True
            if code == UNCHANGED:
                self.found.stopped = (f"BAD {commit[:12]} is not slower than GOOD beyond the threshold: nothing "
                                      "to bisect")
                return False
            if self.answer.untestable:  # no speed to halve: every step would ask only where the failure began
                rungs = ", ".join(str(r) for r in self.answer.failed)
                self.found.stopped = (f"BAD {commit[:12]} regressed only by failing to run (rung {rungs} there; "
                                      "GOOD's runs were ok): no slowdown to find, nothing to bisect")
                return False
            self.found.question = question(self.answer)
            return True
        mid = self.commits.index(commit)
        self.low, self.high = (self.low, mid) if code == REGRESSED else (mid, self.high)
        return True

    def _good(self) -> str:
        return self.commits[self.low] if self.low >= 0 else self.found.good

    def _narrowed(self) -> None:
        """Stopped early: the range it narrowed to (after BAD's check; before it, GOOD..BAD)."""
        if self.asked:
            self.found.good, self.found.bad = self._good(), self.commits[self.high]


def bisect(good: str, commits: list[str], check: Callable[[str, Question | None], Answer],
           budget_left: Callable[[], bool] = lambda: True, *listeners: Listener) -> Bisection:
    """Halve ``commits`` (after ``good``, oldest first, the last one BAD) by ``check`` until one commit is left:
    ``check(BAD, None)`` over every config, then ``check(commit, question)`` (``question``); the engine runs the
    checks :class:`Halving` decides on, ``listeners`` hear of each."""
    policy = Halving(good, commits, check, budget_left)
    engine.run(policy, Events(*listeners))
    return policy.found
