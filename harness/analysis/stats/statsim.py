"""Seeded Monte Carlo of the statistics on simulated sweeps (numpy only): what the tests assert and
``benchmarks/statistics_sim.py`` tabulates for docs/statistics.md.

Every simulated sweep goes through the very functions the harness uses (``blocks``, ``sequential``,
``checkstats``, ``speedup.verdict_codes``); only the throughputs are made up: log-normal process noise
(sd = CV on the log scale), optionally a round effect shared by the rungs of a round, a drift of the
machine along the run order, and one rung noisier than the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.analysis.stats import blocks, checkstats, sequential, speedup


@dataclass(frozen=True)
class Machine:
    """How the simulated machine misbehaves. ``drift``: change of log throughput per run in run order
    (-0.002: 0.2% slower each run); ``noisy_rung``/``noisy_factor``: one rung with a larger CV."""

    cv: float = 0.05
    round_sd: float = 0.02
    drift: float = 0.0
    noisy_rung: int | None = None
    noisy_factor: float = 1.0


def sweep_logs(rng: np.random.Generator, trials: int, steps, rounds: int, machine: Machine = Machine(),
               order: str = "serpentine", round_effects: np.ndarray | None = None) -> np.ndarray:
    """(trials, K, R) log throughputs of sweeps whose rung k is ``exp(steps[k])`` times rung k-1 (steps[0] = 0
    is the baseline), measured round by round in ``order`` ("serpentine" or "same"). ``round_effects``
    (trials, R): given when another sweep shared these rounds, else drawn with sd ``machine.round_sd``."""
    steps = np.asarray(steps, dtype=float)
    rungs = len(steps)
    sd = np.full(rungs, machine.cv)
    if machine.noisy_rung is not None:
        sd[machine.noisy_rung] *= machine.noisy_factor
    logs = np.cumsum(steps)[None, :, None] + rng.normal(size=(trials, rungs, rounds)) * sd[None, :, None]
    if round_effects is None:
        round_effects = rng.normal(0.0, machine.round_sd, (trials, rounds))
    logs = logs + round_effects[:, None, :]
    if machine.drift:
        position = np.zeros((rungs, rounds))
        for r in range(rounds):
            seq = sequential.serpentine_order(rungs, r) if order == "serpentine" else list(range(rungs))
            position[seq, r] = r * rungs + np.arange(rungs)
        logs = logs + machine.drift * position[None]
    return logs


def fixed_codes(logs: np.ndarray, claim, calibration_cv: float | None = None, calibration_df: float = 0.0,
                alpha: float = 0.05) -> np.ndarray:
    """Verdict codes (trials, K-1) of every rung over the previous one with a fixed number of rounds."""
    model = blocks.fit(logs, calibration_cv, calibration_df)
    questions = [sequential.Question(f"rung {k}", k, k - 1, claim) for k in range(1, logs.shape[1])]
    codes, _ = sequential.judge(model, questions, alpha)
    return codes


def total_covers(logs: np.ndarray, truth: float, alpha: float = 0.05) -> np.ndarray:
    """Per trial: does the total's band (last rung over rung 0) hold the true total ``truth`` (log)?"""
    c = blocks.contrast(blocks.fit(logs), logs.shape[1] - 1, 0)
    half = c.half_width(alpha)
    return np.abs(c.diff - truth) <= half


@dataclass(frozen=True)
class SequentialResult:
    rounds: np.ndarray  # (trials,) rounds run when the sweep stopped
    codes: np.ndarray  # (trials, questions) verdict codes at the stop
    ever_excluded_one: np.ndarray  # (trials, questions): some look's band excluded 1x


def run_sequential(logs: np.ndarray, questions, max_rounds: int, calibration_cv: float | None = None,
                   calibration_df: float = 0.0, spending: str = sequential.DEFAULT_SPENDING,
                   min_effect: float = sequential.MIN_EFFECT) -> SequentialResult:
    """``sweep.repeats=auto`` on simulated sweeps: after each round, refit and judge at the look's level; stop
    when every question is decided or after ``max_rounds``. Also records whether ANY look's band excluded
    1x (the error a sweep that looks after every round could make, whatever its stopping rule).
    ``spending="naive"`` looks at a plain 95% band every round: what the corrected levels prevent."""
    trials = logs.shape[0]
    calibrated = calibration_cv is not None and calibration_df > 0
    stopped = np.zeros(trials, dtype=bool)
    rounds = np.full(trials, max_rounds)
    final = np.full((trials, len(questions)), speedup.NO_BAND)
    ever = np.zeros((trials, len(questions)), dtype=bool)
    for r in range(1 if calibrated else 2, max_rounds + 1):
        model = blocks.fit(logs[:, :, :r], calibration_cv, calibration_df)
        level = 0.05 if spending == "naive" else sequential.look_level(r, max_rounds, calibrated, spending=spending)
        codes, contrasts = sequential.judge(model, questions, level, min_effect)
        for i, c in enumerate(contrasts):
            if c is not None:
                low, high = c.bounds(level)
                ever[:, i] |= ~stopped & ((low > 1) | (high < 1))
        done = np.isin(codes, list(sequential.DECIDED)).all(axis=1) | (r == max_rounds)
        now = done & ~stopped
        rounds[now], final[now] = r, codes[now]
        stopped |= now
    return SequentialResult(rounds, final, ever)


def check_family_error(rng: np.random.Generator, trials: int, configs: int, max_rounds: int, machine: Machine,
                       paired: bool, sequential_looks: bool, baseline_rounds: int = 3,
                       slowdown: float = 0.0) -> np.ndarray:
    """Per trial: did ``check`` flag any config as significantly slower, at any look (after every round from
    the second when ``sequential_looks``, else once after ``max_rounds``)? Config 0 is ``slowdown`` (log)
    slower in the current sweep, the others unchanged."""
    cur_rounds = max_rounds
    base_rounds = max_rounds if paired else baseline_rounds
    shift = np.zeros(configs)
    shift[0] = -slowdown
    shared = rng.normal(0.0, machine.round_sd, (trials, cur_rounds)) if paired else None
    base = sweep_logs(rng, trials, np.zeros(configs), base_rounds, machine, round_effects=shared)
    cur = sweep_logs(rng, trials, np.zeros(configs), cur_rounds, machine, round_effects=shared) + shift[None, :, None]
    flagged = np.zeros(trials, dtype=bool)
    looks = range(2, cur_rounds + 1) if sequential_looks else [cur_rounds]
    for r in looks:
        fractions = (checkstats.check_fractions(r, cur_rounds, None if paired else base_rounds)
                     if sequential_looks else None)
        comp = checkstats.compare(base[:, :, :r] if paired else base, cur[:, :, :r], paired)
        flagged |= speedup.holm(comp.p_slower(), checkstats.ALPHA, checkstats.look_level(fractions))[0].any(axis=1)
    return flagged
