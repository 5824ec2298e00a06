"""A seeded simulation of ``bisect`` on the gate's own decision functions (seconds, no runs): five to eight
commits, one of which slows one config of four by 10%, CV 3%, 30 s a run, the default budget. Each step is a
``check --against GOOD`` as the command runs it (looks from round 4, the horizon the step's share of the budget
allows, ``looks.planned_rounds``): a round's log ratio work/GOOD is the commit's change plus the difference of
two runs' noise (a session effect both sides share cancels in it), decided by ``rule.decide_arrays`` at each look's
level."""

from __future__ import annotations

import math

import numpy as np

from harness.analysis.gate import looks, rule
from harness.commands import bisect as bisect_cmd
from harness.sweeps import bisect as bisect_mod

RUN_S = 30.0
CONFIGS = 4
THRESHOLD = 0.05


def check(rng, slows: dict[int, float], asked: dict[int, float], budget_s: float, max_rounds: int,
          cv: float = 0.03) -> tuple[bisect_mod.Answer, float]:
    """One simulated check of the configs ``asked`` (rung -> threshold) whose true log changes are ``slows``: its
    answer and the seconds it took."""
    rungs = sorted(asked)
    horizon = looks.planned_rounds(4, max_rounds, budget_s, RUN_S, len(rungs))
    change = np.array([slows.get(r, 0.0) for r in rungs])
    diffs = (change[:, None] + rng.normal(0, cv * math.sqrt(2), (len(rungs), horizon)))[None]
    thresholds = np.array([asked[r] for r in rungs])
    for rounds in looks.look_rounds(4, horizon):
        d = diffs[:, :, :rounds]
        looked = looks.fractions(rounds, 4, horizon)
        got = rule.decide_arrays(d.mean(axis=2), d.std(axis=2, ddof=1) / math.sqrt(rounds),
                                 np.full((1, len(rungs)), rounds - 1.0), thresholds,
                                 at_level=looks.at_level(looked), same_at=looks.same_level(looked))
        decided = (got["regressed"] | got["unchanged"] | got["improved"])[0]
        if decided.all() or rounds == horizon:
            break
    spent = rounds * 2 * len(rungs) * RUN_S
    regressed = {r: float(got["ratio"][0, i]) for i, r in enumerate(rungs) if got["regressed"][0, i]}
    code = 1 if regressed else 0 if decided.all() else 6
    return bisect_mod.Answer(code, regressed), spent


def one_bisection(rng, slow: float, budget_min: float = bisect_cmd.DEFAULT_BUDGET_MIN,
                  max_rounds: int = bisect_cmd.DEFAULT_MAX_ROUNDS) -> tuple[str | None, str, float]:
    """(the commit named or None, the slowed commit, minutes spent)."""
    commits = [f"c{i}" for i in range(1, int(rng.integers(5, 9)) + 1)]
    first_bad = int(rng.integers(0, len(commits)))
    spent, asks = [0.0], []

    def left_s() -> float:
        return 60 * budget_min - spent[0]

    def ask(commit: str, question):
        asked = question or {c: THRESHOLD for c in range(CONFIGS)}
        slows = {0: slow} if commits.index(commit) >= first_bad else {}
        later = bisect_mod.steps_after(-1, len(commits) - 1) - len(asks)  # asks: the halving steps made
        budget_s = bisect_mod.step_budget_s(left_s(), len(asked), later - (question is not None),
                                              len(question or {0: 0}))
        if question is not None:
            asks.append(commit)
        answer, took = check(rng, slows, asked, budget_s, max_rounds)
        spent[0] += took
        return answer

    found = bisect_mod.bisect("c0", commits, ask, lambda: left_s() >= 60 * bisect_cmd.MIN_CHECK_MIN)
    return found.first_bad, commits[first_bad], spent[0] / 60


def test_bisect_names_the_commit_that_slowed_one_config_of_four_by_10pct():
    """Seen (200 bisections, seed 52): the right commit in 98%, never a wrong one, a median of ~66 minutes; today's
    bisection (every config at 5% each step, an undecided step ends it) named it in about 15%."""
    rng = np.random.default_rng(52)
    got = [one_bisection(rng, math.log(0.90)) for _ in range(200)]
    right = np.mean([named == truth for named, truth, _ in got])
    wrong = np.mean([named is not None and named != truth for named, truth, _ in got])
    minutes = np.median([m for *_, m in got])
    print(f"10% slower, CV 3%: right {right:.1%}, wrong {wrong:.1%}, median {minutes:.0f} min")
    assert right >= 0.80 and wrong == 0.0, (right, wrong)


def bisection_over_a_broken_commit(rng) -> tuple[bisect_mod.Bisection, str, str]:
    """Eight commits, one slows config 0 by 10%, one before it fails to run (its check: regressed by failure, no
    speed verdict): (what the bisection found, the slowed commit, the broken one)."""
    commits = [f"c{i}" for i in range(1, 9)]
    slowed = int(rng.integers(1, len(commits)))
    broken = int(rng.integers(0, slowed))
    spent, asks = [0.0], []

    def ask(commit: str, question):
        if commits.index(commit) == broken:
            return bisect_mod.Answer(1, failed=tuple(question or {0: 0}))
        asked = question or {c: THRESHOLD for c in range(CONFIGS)}
        later = bisect_mod.steps_after(-1, len(commits) - 1) - len(asks) - (question is not None)
        budget_s = bisect_mod.step_budget_s(60 * bisect_cmd.DEFAULT_BUDGET_MIN - spent[0], len(asked), later,
                                              len(question or {0: 0}))
        if question is not None:
            asks.append(commit)
        answer, took = check(rng, {0: math.log(0.9)} if commits.index(commit) >= slowed else {}, asked, budget_s,
                             bisect_cmd.DEFAULT_MAX_ROUNDS)
        spent[0] += took
        return answer

    found = bisect_mod.bisect("c0", commits, ask)
    return found, commits[slowed], commits[broken]


def test_a_commit_that_fails_to_run_is_skipped_not_named_as_the_slow_one():
    """A commit before the slow one whose runs fail: counted as "nearer BAD" it was named the first bad commit in
    about half the bisections (seen: 49% of 200); skipped as ``git bisect skip``, never (150, seed 53). The slow
    commit is named, or (the broken one right before it) both are said as the range left, in >= 90% (seen 97%)."""
    rng = np.random.default_rng(53)
    got = [bisection_over_a_broken_commit(rng) for _ in range(150)]
    wrong = np.mean([found.first_bad not in (None, truth) for found, truth, _ in got])
    right = np.mean([found.first_bad == truth for found, truth, _ in got])
    said = np.mean([found.first_bad == truth or f"one of {bad[:12]}, {truth[:12]}" in found.stopped
                    for found, truth, bad in got])
    print(f"a wrong commit named {wrong:.1%}, the slow one {right:.1%}, it or the range of both {said:.1%}")
    assert wrong == 0.0 and said >= 0.90, (wrong, right, said)
