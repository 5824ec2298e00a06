"""``bisect GOOD BAD``: the first commit between two that made a config slower, by paired checks.

As ``asv find`` and TorchBench's bisection: the commits of ``GOOD..BAD`` (the ancestry path, first parents, oldest
first) are halved by checks of a commit against GOOD (``check --against GOOD`` run in that commit's worktree):
regressed (exit 1) moves the bad end there, decided unchanged (exit 0) the good end. BAD is checked first, so a
range whose end does not regress against GOOD is said before any other check is spent. An answer that decides
nothing (undecided 6, busy 5, bad input 2) stops the bisection early and says the range it narrowed to, as
does a budget spent. The checks are ``check(commit) -> exit code``, so the logic here measures nothing itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from harness.sweeps.worktree import git

REGRESSED, UNCHANGED = 1, 0
WORDS = {0: "unchanged", 1: "regressed", 2: "bad input or nothing comparable", 5: "busy", 6: "undecided"}


@dataclass
class Bisection:
    """What a bisection found: the first bad commit (None when it stopped early), the range it narrowed to, and
    every check it made (commit, exit code)."""

    good: str
    bad: str
    first_bad: str | None = None
    checks: list[tuple[str, int]] = field(default_factory=list)
    stopped: str = ""  # why it stopped before naming a commit ("" when it named one)


def commits_between(root: Path, good: str, bad: str) -> list[str]:
    """The commits after ``good`` up to ``bad`` on the first-parent ancestry path, oldest first (GitError when
    ``good`` is not an ancestor of ``bad``)."""
    listed = git(["rev-list", "--first-parent", "--ancestry-path", "--reverse", f"{good}..{bad}"], root).split()
    if not listed:
        raise ValueError(f"no commits between {good[:12]} and {bad[:12]}: GOOD must be an ancestor of BAD")
    return listed


def bisect(good: str, commits: list[str], check: Callable[[str], int],
           budget_left: Callable[[], bool] = lambda: True) -> Bisection:
    """Halve ``commits`` (after ``good``, oldest first, the last one BAD) by ``check`` until one commit is left."""
    found = Bisection(good, commits[-1])

    def ask(commit: str) -> int | None:
        if not budget_left():
            found.stopped = "the budget is spent"
            return None
        code = check(commit)
        found.checks.append((commit, code))
        if code not in (REGRESSED, UNCHANGED):
            found.stopped = f"{commit[:12]} against GOOD: {WORDS.get(code, f'exit {code}')} (exit {code})"
            return None
        return code

    code = ask(commits[-1])
    if code is None:
        return found
    if code == UNCHANGED:
        found.stopped = f"BAD {commits[-1][:12]} is not slower than GOOD beyond the threshold: nothing to bisect"
        return found
    low, high = -1, len(commits) - 1  # commits[low] is good (-1: GOOD itself), commits[high] bad
    while high - low > 1:
        mid = (low + high) // 2
        code = ask(commits[mid])
        if code is None:
            found.good, found.bad = (commits[low] if low >= 0 else good), commits[high]
            return found
        low, high = (low, mid) if code == REGRESSED else (mid, high)
    found.first_bad = commits[high]
    found.good = commits[low] if low >= 0 else good
    return found
