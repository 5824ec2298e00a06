"""Seeded simulations of the looks' horizon of ``check --against`` (seconds, no runs): the looks spend the error
over the rounds the budget allows at the run time (``looks.planned_rounds``), not over ``--max-rounds`` the clock
never reaches, and the plan's power line (``looks.power``) says what those rounds decide. The check is
``test_gate_sim``'s (a session effect both sides share, the machine 4% slower from a random run on, the sides in
the command's ABBA order, ``rule.decide_arrays`` at each look's level)."""

from __future__ import annotations

import math

import numpy as np

from harness.analysis.gate import looks
from harness.commands import against as against_cmd
from harness.commands import against_rounds
from tests.test_gate_sim import simulate
from tests.test_order_sim import run

TRIALS = 2000
RUN_S = 30.0  # the plan line's ~30 s a run
CONFIGS = 4


def test_at_30s_a_run_the_default_budget_flags_a_10pct_slowdown_in_most_checks():
    """4 configs, 30 s a run, the default 30-minute budget allows 7 rounds. Spending the error over them, the
    command's model (``paired.round_fit``, the side order's term always fitted): a 10% slowdown of one config
    flagged in 52.5% (seen 2,000 checks, seed 53; 62.5% when a pretest chose the model, at a false-alarm rate above
    5%), no-change false alarms 0.0%; the error spent over 12 rounds that never come, stopped at 7 by the clock, the
    plain mean (before): 21.4%."""
    rng = np.random.default_rng(53)
    budget_s = 60 * against_cmd.DEFAULT_BUDGET_MIN
    horizon = looks.planned_rounds(against_cmd.DEFAULT_ROUNDS, against_cmd.DEFAULT_MAX_ROUNDS, budget_s, RUN_S,
                                   CONFIGS)
    assert horizon == 7
    slow = [math.log(0.90), 0.0, 0.0, 0.0]
    diffs = simulate(rng, TRIALS, CONFIGS, horizon, cv=0.03, slow=slow)
    regressed, _ = run(diffs, True, horizon)
    power, others = regressed[:, 0].mean(), regressed[:, 1:].any(axis=1).mean()
    old = _stopped_by_the_clock(diffs, horizon)[:, 0].mean()
    print(f"30 s a run, {horizon} rounds: flagged {power:.1%} (the looks over 12: {old:.1%})")
    assert power >= 0.47 and old <= 0.35 and others <= 0.05, (power, old, others)
    diffs = simulate(rng, TRIALS, CONFIGS, horizon, cv=0.03, slow=[0.0] * CONFIGS)
    regressed, _ = run(diffs, True, horizon)
    assert regressed.any(axis=1).mean() <= 0.05, regressed.any(axis=1).mean()
    assert abs(looks.power(horizon, 4, 0.03, 0.10, 0.05, CONFIGS) - power) <= 0.10  # the plan line's figure


def _stopped_by_the_clock(diffs: np.ndarray, stop: int) -> np.ndarray:
    """The looks planned over --max-rounds 12, the check stopped after round ``stop`` by its budget."""
    from tests.test_gate_sim import look_at

    first, regressed = against_cmd.DEFAULT_ROUNDS, np.zeros(diffs.shape[:2], dtype=bool)
    open_ = np.ones(diffs.shape[0], dtype=bool)
    for r in [r for r in looks.look_rounds(first, 12) if r < stop] + [stop]:
        got = look_at(diffs, r, first, 12)
        done = (got["regressed"] | got["unchanged"] | got["improved"]).all(axis=1) | (r == stop)
        regressed[open_ & done] = got["regressed"][open_ & done]
        open_ &= ~done
    return regressed


def test_the_plan_says_when_the_budget_cannot_decide_and_what_would():
    clock = against_rounds.Clock(configs=4, first=4, max_rounds=12, budget_s=1800, stored_run_s=30.0)
    line = clock.power_line(0.03, 0.05, "from sweep s's runs")
    assert line == ("at ~30 s a run, 7 rounds decide a 10% slowdown in about 55% (CV 3.0% from sweep s's runs): "
                    "give --budget-min 50 for 90%"), line
    assert clock.power_line(0.01, 0.05, "x") == ""  # 7 rounds decide it at CV 1%
    assert against_rounds.Clock(4, 4, 12, 1800, 10.0).power_line(0.04, 0.05, "x").endswith(
        "give --budget-min 25 --max-rounds 18 for 90%")
    assert against_rounds.Clock(13, 4, 12, 1800, 30.0).horizon() == 4  # only the mandatory rounds fit


def test_the_horizon_is_the_budgets_rounds_within_max_rounds():
    assert looks.planned_rounds(4, 12, 1800, None, 4) == 12  # no run time yet
    assert looks.planned_rounds(4, 12, 1800, 10.0, 4) == 12
    assert looks.planned_rounds(4, 12, 1800, 65.0, 4) == 4
