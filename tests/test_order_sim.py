"""Seeded simulation of the side-order term of ``check --against`` (seconds, no runs): the second run of each pair
3% faster (a warm page cache), 4 configs, CV 3%, looks from round 4 to 12 (the horizon at <= 15 s a run and the
default budget). The sides' order is balanced per config (``against.order``), so the effect never biases the
ratio, but left in the variance it widens every band; as a term of the model (``paired.order_fit``, rounds - 2
df) it is taken out. The check is ``test_gate_sim``'s, decided by ``rule.decide_arrays`` at each look's level."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.analysis.gate import looks, paired, rule
from harness.sweeps import against
from tests.test_gate_sim import simulate

TRIALS = 2000
CONFIGS, FIRST, MOST = 4, 4, 12
ORDER = math.log(1.03)


def work_second(configs: int, rounds: int) -> np.ndarray:
    """(configs, rounds): +1 where the working tree runs second in the command's order, -1 where REF does."""
    out = np.zeros((configs, rounds))
    runs = against.order(configs, rounds)
    for first, second in zip(runs[::2], runs[1::2]):
        out[first[0], first[1]] = 1 if second[2] == against.WORK else -1
    return out


def run(diffs: np.ndarray, with_order: bool, most: int = MOST) -> tuple[np.ndarray, np.ndarray]:
    """Each trial as the command runs it (``paired.round_fit``; ``with_order`` False: the plain mean, as before),
    looks from round 4 to ``most``: (configs called regressed, checks undecided at the last round)."""
    second = work_second(CONFIGS, most)
    regressed = np.zeros(diffs.shape[:2], dtype=bool)
    open_ = np.ones(diffs.shape[0], dtype=bool)
    for r in looks.look_rounds(FIRST, most):
        d = diffs[:, :, :r]
        if with_order:
            fit = paired.round_fit(d, second[:, :r])
            diff, se, df = fit["diff"], fit["se"], fit["df"]
        else:
            diff, se, df = d.mean(axis=2), d.std(axis=2, ddof=1) / math.sqrt(r), np.full(d.shape[:2], r - 1.0)
        looked = looks.fractions(r, FIRST, most)
        got = rule.decide_arrays(diff, se, df, np.full(CONFIGS, 0.05), at_level=looks.at_level(looked),
                                 same_at=looks.same_level(looked))
        decided = (got["regressed"] | got["unchanged"] | got["improved"]).all(axis=1)
        stop = open_ & (decided | (r == most))
        regressed[stop] = got["regressed"][stop]
        open_ &= ~decided
    return regressed, open_


def test_the_order_term_decides_no_change_checks_with_a_warm_cache():
    """Seen (2,000 checks, seed 54): no change, second run 3% faster: undecided at the budget ~16% with the order
    term, ~39% without; false alarms under 1% both; a 10% slowdown flagged ~93% with it."""
    rng = np.random.default_rng(54)
    diffs = simulate(rng, TRIALS, CONFIGS, MOST, cv=0.03, slow=[0.0] * CONFIGS, second=ORDER)
    regressed, open_ = run(diffs, with_order=True)
    _, open_before = run(diffs, with_order=False)
    print(f"order effect 3%: undecided {open_.mean():.1%} (without the term {open_before.mean():.1%}), "
          f"false alarms {regressed.any(axis=1).mean():.1%}")
    assert open_.mean() <= 0.25 and open_before.mean() >= 0.30 and regressed.any(axis=1).mean() <= 0.05
    diffs = simulate(rng, TRIALS, CONFIGS, MOST, cv=0.03, slow=[math.log(0.9), 0, 0, 0], second=ORDER)
    regressed, _ = run(diffs, with_order=True)
    assert regressed[:, 0].mean() >= 0.85 and regressed[:, 1:].any(axis=1).mean() <= 0.05


def test_the_order_term_holds_false_alarms_at_the_edge():
    """Every config exactly at the threshold, CV 3%, with and without an order effect, 7 and 12 rounds: the term
    (always fitted) keeps the 5%. Seen (2,000 each): 4.1%, 3.7% (none), 3.6%, 3.2% (3%); with a pretest choosing the
    model (before): 5.3%, 4.3%, 3.8%, 3.3%."""
    rng = np.random.default_rng(55)
    for order in (0.0, ORDER):
        for most in (7, MOST):
            diffs = simulate(rng, TRIALS, CONFIGS, most, cv=0.03, slow=[math.log(0.95)] * CONFIGS, second=order)
            regressed, _ = run(diffs, with_order=True, most=most)
            assert regressed.any(axis=1).mean() <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / TRIALS), (order, most)


def test_a_fixed_check_at_the_edge_holds_false_alarms_without_an_order_effect():
    """One config exactly at the threshold, no order effect, a fixed check of 4 rounds (``--max-rounds 4``, or the
    horizon when only the rounds before the first look fit): the command's model is exact, so held to 5% + 3 standard
    errors. Choosing the model by a pretest of the order called 6.8% of 20,000 checks regressed (seed 56)."""
    trials = 20000
    rng = np.random.default_rng(56)
    diffs = simulate(rng, trials, 1, FIRST, cv=0.03, slow=[math.log(0.95)])
    fit = paired.round_fit(diffs, work_second(1, FIRST))
    got = rule.decide_arrays(fit["diff"], fit["se"], fit["df"], np.array([0.05]))
    rate = got["regressed"].mean()
    print(f"edge, 4 rounds, 1 config: false alarms {rate:.2%}")
    assert rate <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / trials), rate


def test_the_fit_finds_the_order_and_names_it():
    ratios = [0.03 + 0.02 * s for s in (1, -1, -1, 1, 1, -1)]  # work 3% faster in truth, the second run 2% faster
    fit = paired.order_fit(np.array(ratios), np.array([1, -1, -1, 1, 1, -1]))
    assert float(fit["diff"]) == pytest.approx(0.03) and float(fit["order"]) == pytest.approx(0.02)
    noisy = [r + e for r, e in zip(ratios, (0.001, -0.002, 0.001, 0.0, -0.001, 0.001))]
    assert paired.order_note(noisy, [1, -1, -1, 1, 1, -1]).startswith("the second run of each pair is 2% faster")
    assert paired.order_note([0.03, 0.031, 0.029, 0.03], [1, -1, -1, 1]) == ""
    effect = paired.round_effect(noisy, [1, -1, -1, 1, 1, -1])
    assert effect.df == 4 and effect.diff == pytest.approx(0.03, abs=0.001)
    assert paired.round_effect(noisy).df == 5
