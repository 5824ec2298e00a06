"""Error rates, coverage and power of the statistics on seeded simulated sweeps (no torch, seconds).

Every sweep goes through the harness's own functions (``harness.analysis.stats.statsim`` drives ``blocks``,
``sequential``, ``checkstats`` and ``speedup.verdict_codes``); only the throughputs are made up (log-normal
process noise at the CV named, a 2% round effect).

How the bounds are chosen. A branch that is exact by construction (the pooled t on a complete table,
a calibration that holds) has a false-verdict rate of exactly 5%: its estimate from any number of trials
lands above 5% in half of all seeds, so "<= 5%" cannot be asserted reliably. Those branches are held to
``exact_bound(n)`` = 5% + 3 standard errors of a 5% rate over n trials (20,000 trials: 5.46%): a correct
rule passes with probability 99.9% whatever the seed, and a rule at 6% (one too liberal by a fifth) fails
with probability 99.7%. Branches that are conservative by design (a rung judged on its pair, a
calibration dropped, the corrected looks of a sequential sweep, Holm) are held to plain <= 5%.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from harness.analysis.stats import blocks, checkstats, noise_model, scaling, sequential, speedup
from harness.analysis.stats import statsim as sim

FALSE = (speedup.CONFIRMS, speedup.SHORT, speedup.EXCEEDS, speedup.REVERSES)  # a change asserted where there is none
CLAIM = (1.1, 1.3)
CVS = (0.02, 0.05, 0.10)


def exact_bound(trials: int, rate: float = 0.05) -> float:
    return rate + 3 * math.sqrt(rate * (1 - rate) / trials)


def false_rates(codes: np.ndarray) -> np.ndarray:
    return np.isin(codes, FALSE).mean(axis=0)


# ------------------------------------------------------------------------------------------
# the rung x round model, fixed rounds


@pytest.mark.parametrize("cv", CVS)
@pytest.mark.parametrize("rounds", [2, 3, 6])
def test_aa_sweeps_assert_a_change_on_at_most_5_percent_of_rungs_and_the_bands_cover(cv, rounds):
    trials = 20000
    logs = sim.sweep_logs(np.random.default_rng([rounds, int(cv * 100)]), trials, np.zeros(4), rounds,
                          sim.Machine(cv=cv))
    rates = false_rates(sim.fixed_codes(logs, CLAIM))
    assert rates.max() <= exact_bound(trials), rates
    if rounds >= blocks.MIN_RUNS_CHECKED:  # the noisier-rung check only ever widens: conservative
        assert rates.max() <= 0.05, rates
    assert sim.total_covers(logs, 0.0).mean() >= 0.93
    # the band of each rung over the previous one holds the truth (no verdict can assert a change if it does)
    assert (1 - rates).min() >= 0.93


def test_a_sweep_of_fixed_rounds_judges_at_plain_95_percent_and_asserts_a_change_on_5_percent_of_aa_rungs():
    """A sweep of fixed rounds looks once: its bands are plain 95% ones, as the table says, not a look's of a
    sequential sweep (which it was: 95.6% after 3 rounds, 96.25% after 6, so an A/A rung asserted a change in 4.4%
    of 20,000 sweeps of 3 rounds, below what an exact rule gives, and fewer real changes were shown)."""
    trials, rounds = 20000, 3
    logs = sim.sweep_logs(np.random.default_rng(17), trials, np.zeros(4), rounds, sim.Machine(cv=0.05))
    questions = [sequential.Question(f"rung {k}", k, k - 1, CLAIM) for k in range(1, 4)]
    level = sequential.fixed(logs[0], questions).level
    assert level == 0.05
    assert sequential.fixed(logs[0, :, :1], questions).level == 0.0  # one round, no calibration: no band
    assert sequential.fixed(logs[0, :, :6], questions, 0.05, 7).level == 0.05
    rates = false_rates(sequential.judge(blocks.fit(logs), questions, level)[0])
    se = math.sqrt(0.05 * 0.95 / trials)
    assert (rates >= 0.05 - 3 * se).all() and (rates <= 0.05 + 3 * se).all(), rates


def test_missing_cells_keep_the_error_rate():
    trials = 20000
    logs = sim.sweep_logs(np.random.default_rng(11), trials, np.zeros(4), 4, sim.Machine(cv=0.05))
    logs[:, 1, 0] = logs[:, 3, 2] = logs[:, 2, 3] = np.nan  # runs that failed
    rates = false_rates(sim.fixed_codes(logs, CLAIM))
    assert rates.max() <= exact_bound(trials), rates
    model = blocks.fit(logs)
    assert model.residual_df == 13 - 7  # 13 cells, 4 rung + 3 round parameters


@pytest.mark.parametrize("cv", CVS)
def test_a_rung_taken_for_noisier_is_judged_on_its_pair_without_more_error(cv):
    # every rung equally noisy: the check fires by chance (~19% of pairs); both branches stay <= 5%
    trials = 20000
    logs = sim.sweep_logs(np.random.default_rng(12), trials, np.zeros(6), 6, sim.Machine(cv=cv))
    c = blocks.contrast(blocks.fit(logs), 2, 1)
    low, high = c.bounds(0.05)
    wrong = (low > 1) | (high < 1)
    assert 0.10 <= c.own.mean() <= 0.30
    assert wrong[c.own].mean() <= 0.05 and wrong[~c.own].mean() <= exact_bound(int((~c.own).sum()))
    assert wrong.mean() <= 0.05


def test_the_noisier_rung_check_cuts_the_errors_of_a_rung_three_times_as_noisy():
    trials = 20000
    logs = sim.sweep_logs(np.random.default_rng(13), trials, np.zeros(6), 6,
                          sim.Machine(cv=0.05, noisy_rung=2, noisy_factor=3.0))
    model = blocks.fit(logs)
    rates = {}
    for level in (1e-300, blocks.CHECK_LEVEL):  # 1e-300: the check never fires, the pooled variance alone
        low, high = blocks.contrast(model, 2, 1, check_level=level).bounds(0.05)
        rates[level] = ((low > 1) | (high < 1)).mean()
    assert rates[1e-300] > 0.15 and rates[blocks.CHECK_LEVEL] < 0.065


@pytest.mark.parametrize("cv", CVS)
def test_a_calibration_that_holds_is_pooled_and_one_that_no_longer_holds_is_dropped(cv):
    trials = 20000
    rng = np.random.default_rng([14, int(cv * 100)])
    calibrated = np.std(rng.normal(0, cv, (trials, 5)), axis=1, ddof=1)  # 5 runs, same noise as the sweep
    for rounds in (1, 2):
        logs = sim.sweep_logs(rng, trials, np.zeros(4), rounds, sim.Machine(cv=cv))
        rates = false_rates(sim.fixed_codes(logs, CLAIM, calibrated, 4))
        assert rates.max() <= exact_bound(trials), (rounds, rates)
    # the machine got twice as noisy since: the F test drops the calibration in most sweeps, and where it does
    # the runs alone decide (<= 5%); blind pooling would assert changes far more often (docs: the table)
    logs = sim.sweep_logs(rng, trials, np.zeros(4), 3, sim.Machine(cv=2 * cv))
    rates = {}
    for level in (0.0, blocks.CALIBRATION_CHECK_LEVEL):
        model = blocks.fit(logs, calibrated, 4, check_level=level)
        low, high = blocks.contrast(model, 1, 0).bounds(0.05)
        wrong = (low > 1) | (high < 1)
        rates[level] = wrong.mean()
    dropped = ~model.calibration_used
    assert dropped.mean() > 0.7 and wrong[dropped].mean() <= 0.05
    assert rates[blocks.CALIBRATION_CHECK_LEVEL] < 0.065 < 0.09 < rates[0.0]


def test_one_run_a_rung_and_no_calibration_asserts_nothing():
    logs = sim.sweep_logs(np.random.default_rng(15), 1000, [0.0, math.log(1.5), 0.0], 1, sim.Machine(cv=0.05))
    codes = sim.fixed_codes(logs, CLAIM)
    assert (codes == speedup.NO_BAND).all()
    look = sequential.fixed(logs[0], sequential.questions_for(3, {1: CLAIM}))
    assert look.answers[0].verdict == speedup.NO_BAND_TEXT and "another round" in look.answers[0].verdict


def test_serpentine_order_keeps_the_total_honest_under_drift():
    trials = 8000
    rng = np.random.default_rng(16)
    machine = sim.Machine(cv=0.02, drift=-0.002)  # 0.2% slower every run
    for rounds in (2, 4, 6):
        logs = sim.sweep_logs(rng, trials, np.zeros(6), rounds, machine, order="serpentine")
        assert sim.total_covers(logs, 0.0).mean() >= 0.93
    same = sim.sweep_logs(rng, trials, np.zeros(6), 6, machine, order="same")
    assert sim.total_covers(same, 0.0).mean() < 0.91  # the same order every round: drift piles up


def test_a_claim_that_holds_1x_is_confirmed_only_by_a_band_inside_it():
    logs = sim.sweep_logs(np.random.default_rng(17), 20000, [0.0, math.log(0.90)], 3, sim.Machine(cv=0.05))
    low, high = blocks.contrast(blocks.fit(logs), 1, 0).bounds(0.05)
    assert (speedup.verdict_codes(low, high, 1.0, 1.05) == speedup.CONFIRMS).mean() < 0.01
    assert ((high >= 1.0) & (low <= 1.05)).mean() > 0.2  # the old rule (any overlap) confirmed these


# ------------------------------------------------------------------------------------------
# sweep.repeats=auto


@pytest.mark.parametrize("cv", CVS)
def test_looking_after_every_round_does_not_inflate_the_error(cv):
    trials = 10000
    logs = sim.sweep_logs(np.random.default_rng([18, int(cv * 100)]), trials, np.zeros(4), 6, sim.Machine(cv=cv))
    questions = sequential.questions_for(4, {k: CLAIM for k in (1, 2, 3)})
    result = sim.run_sequential(logs, questions, 6)
    # ANY look's band excluding 1x, whatever the stopping rule: the repeated confidence intervals' guarantee
    assert result.ever_excluded_one[:, :3].mean(axis=0).max() <= 0.05
    assert false_rates(result.codes[:, :3]).max() <= 0.05
    naive = sim.run_sequential(logs, questions, 6, spending="naive")
    assert naive.ever_excluded_one[:, :3].mean() > 0.08  # what the corrected levels prevent


def test_a_true_1_2x_at_5_percent_noise_is_confirmed_within_6_rounds():
    trials = 4000
    logs = sim.sweep_logs(np.random.default_rng(19), trials, [0.0, math.log(1.2), 0.0, 0.0], 6, sim.Machine(cv=0.05))
    result = sim.run_sequential(logs, sequential.questions_for(4, {k: CLAIM for k in (1, 2, 3)}), 6)
    assert (result.codes[:, 0] == speedup.CONFIRMS).mean() >= 0.80
    # a clear effect on a quiet machine stops before the budget
    quiet = sim.sweep_logs(np.random.default_rng(20), trials, [0.0, math.log(1.2)], 6, sim.Machine(cv=0.02))
    early = sim.run_sequential(quiet, sequential.questions_for(2, {1: CLAIM}), 6)
    assert early.rounds.mean() < 4 and (early.codes[:, 0] == speedup.CONFIRMS).mean() >= 0.99


def test_the_look_levels_hold_a_brownian_motion_to_alpha():
    fractions = (2 / 6, 3 / 6, 4 / 6, 5 / 6, 1.0)
    from scipy import stats as sps

    rng = np.random.default_rng(21)
    for spending in sequential.SPENDING:
        c = sps.norm.isf(np.array(sequential.nominal_levels(fractions, 0.05, spending)) / 2)
        steps = rng.normal(size=(200000, len(fractions))) * np.sqrt(np.diff((0.0,) + fractions))
        z = np.abs(np.cumsum(steps, axis=1) / np.sqrt(fractions))
        assert (z >= c).any(axis=1).mean() == pytest.approx(0.05, abs=0.003)


# ------------------------------------------------------------------------------------------
# check: Holm over configs, paired rounds, sequential looks


@pytest.mark.parametrize("paired", [True, False])
@pytest.mark.parametrize("configs", [4, 13])
def test_check_family_wise_error_stays_at_5_percent_with_looks_after_every_round(paired, configs):
    trials = 3000
    rng = np.random.default_rng([22, configs, int(paired)])
    for looks in (False, True):
        flagged = sim.check_family_error(rng, trials, configs, 6, sim.Machine(cv=0.05), paired, looks)
        assert flagged.mean() <= exact_bound(trials), (looks, flagged.mean())


def test_check_against_a_saved_baseline_with_one_run_a_side_needs_a_calibration():
    trials = 20000
    rng = np.random.default_rng(27)
    base = sim.sweep_logs(rng, trials, np.zeros(4), 1, sim.Machine(cv=0.05))
    cur = sim.sweep_logs(rng, trials, np.zeros(4), 1, sim.Machine(cv=0.05))
    assert np.isnan(checkstats.compare(base, cur, paired=False).p_slower()).all()  # no variance: nothing flagged
    # a calibration measures the run-to-run spread of fresh processes: process noise and round effects together
    calibrated = np.std(rng.normal(0, math.hypot(0.05, 0.02), (trials, 5)), axis=1, ddof=1)
    comparison = checkstats.compare(base, cur, paired=False, calibration_cv=calibrated, calibration_df=4)
    assert speedup.holm(comparison.p_slower(), 0.05)[0].any(axis=1).mean() <= 0.05
    assert (comparison.p_slower() < 0.05).mean(axis=0).max() <= exact_bound(trials)


def test_check_finds_a_10_percent_slowdown_in_paired_rounds():
    flagged = sim.check_family_error(np.random.default_rng(23), 1000, 4, 6, sim.Machine(cv=0.03), True, True,
                                     slowdown=math.log(1 / 0.9))
    assert flagged.mean() >= 0.80


def test_sequential_holm_with_one_look_is_plain_holm():
    p = np.array([0.01, 0.04, 0.03, 0.005])
    plain = speedup.holm(p, 0.05)[0]
    assert plain.tolist() == [True, False, False, True]
    assert speedup.holm(p, 0.05, checkstats.look_level(None))[0].tolist() == plain.tolist()
    looks = speedup.holm(p, 0.05, checkstats.look_level(checkstats.check_fractions(3, 6)))[0]
    assert looks.sum() <= plain.sum()  # an early look spends less


# ------------------------------------------------------------------------------------------
# the power arithmetic: what it promises happens


@pytest.mark.parametrize("repeats", [1, 2, 3])
def test_detectable_speedup_is_detected_in_80_percent_of_sweeps(repeats):
    trials = 6000
    x = noise_model.detectable_speedup(0.05, 4, repeats)
    rng = np.random.default_rng([24, repeats])
    logs = sim.sweep_logs(rng, trials, [0.0, math.log(x)], repeats, sim.Machine(cv=0.05))
    calibrated = np.std(rng.normal(0, 0.05, (trials, 5)), axis=1, ddof=1)
    low, _ = blocks.contrast(blocks.fit(logs, calibrated, 4), 1, 0).bounds(0.05)
    assert 0.76 <= (low > 1).mean() <= 0.84


def test_repeats_to_decide_decides_at_least_80_percent_of_the_time():
    # a band from 2 rounds of 2 rungs (the block model: 1 df): 1.04x, se 0.03 on the log scale; the runs it asks
    # for, measured at the same ratio and noise (CV 0.03: se = CV sqrt(2 / runs)), decide in >= 80% of sweeps
    se = 0.03
    band = speedup.Ratio(1.04, 1.04 * math.exp(-12.706 * se), 1.04 * math.exp(12.706 * se), runs=2, se=se, df=1)
    n = speedup.repeats_to_decide(band, *CLAIM)

    def decided(runs: int) -> float:
        logs = sim.sweep_logs(np.random.default_rng([25, runs]), 4000, [0.0, math.log(1.04)], runs,
                              sim.Machine(cv=se))
        low, high = blocks.contrast(blocks.fit(logs), 1, 0).bounds(0.05)
        return float(np.isin(speedup.verdict_codes(low, high, *CLAIM), speedup.DECIDED_CODES).mean())

    assert decided(n) >= 0.78 and decided(n - 1) < 0.80  # enough, and the fewest


# ------------------------------------------------------------------------------------------
# the calibration a sweep uses (``calibration.choose_calibration``) near the 10% cut


def _calibration_path(cv: float, trials: int, seed: int, calibrations: int = 3, runs: int = 5):
    """A/A sweeps of 4 rungs and one round on a machine of process CV ``cv``, each after ``calibrations`` clean
    calibrations of ``runs`` runs, judged with the calibration the rule chooses (none: no band): (the share of
    sweeps asserting a change on rung 1 over rung 0, the share that got a calibration)."""
    from harness.analysis.stats import calibration

    rng = np.random.default_rng(seed)
    made = 100.0 * np.exp(cv * rng.standard_normal((trials, calibrations, runs)))
    chosen = np.full(trials, np.nan)
    for t in range(trials):
        candidates = [calibration.Candidate(f"noise-{m}", "env", "unet3d", "smoke", f"2026-01-0{m + 1}T10:00:00",
                                            f"2026-01-0{m + 1}T10:05:00", tuple(made[t, m]), ("",) * runs)
                      for m in range(calibrations)]
        noise = calibration.choose_calibration(candidates, "env", "unet3d", "smoke", "2026-02-01T00:00:00").noise
        chosen[t] = noise.cv if noise.calibrated else np.nan
    logs = cv * rng.standard_normal((trials, 4, 1))
    low, high = blocks.contrast(blocks.fit(logs, chosen, runs - 1), 1, 0).bounds(0.05)
    return float(np.mean((low > 1) | (high < 1))), float(np.mean(~np.isnan(chosen)))


@pytest.mark.parametrize("cv", [0.09, 0.10])
def test_near_the_10_percent_cut_the_calibration_path_asserts_a_change_on_at_most_6_percent_of_aa_rungs(cv):
    # the newest calibration speaks for the machine (an unfit one blocks the older ones) and the outlier rule
    # refuses 1% of clean ones: 5.6% (CV 9%) and 4.6% (CV 10%) of A/A rungs, 3,000 sweeps. Before (the newest
    # *fit* one, the MAD rule): 7.1% and 7.0%. Among the sweeps that got a calibration it is 8.0% and 7.9% (before:
    # 7.8%, 8.1%): the 10% cut keeps the calibrations that drew a low CV; docs/statistics.md says so
    asserted, used = _calibration_path(cv, 3000, seed=int(cv * 1000))
    assert asserted <= 0.06
    assert used == pytest.approx({0.09: 0.72, 0.10: 0.61}[cv], abs=0.04)


def test_the_outlier_rule_refuses_about_1_percent_of_clean_5_run_calibrations_at_any_cv():
    # the rule before refused 10% (CV 2%) to 20% (CV 5%) of them
    rng = np.random.default_rng(5)
    for cv in (0.02, 0.05, 0.09):
        samples = 100.0 * np.exp(cv * rng.standard_normal((2000, 5)))
        refused = np.mean([bool(noise_model.outliers(list(s))) for s in samples])
        assert refused <= 0.02
    assert noise_model.outliers([100.0, 100.5, 99.5, 100.2, 70.0]) == [4]  # a disturbed run is still found


@pytest.mark.parametrize("rounds", [2, 3, 6])
def test_a_rungs_band_holds_its_level_when_whole_rounds_move(rounds):
    # 4 rungs, CV 2%, every round moved by a 5% effect: a rung's mean carries its rounds' effects, which its "±"
    # (``Judgement.uncertainty``: ``blocks.level_variance``) must hold. Seen, 2,000 sweeps: 91.4%, 93.2%, 94.9% of
    # rung levels covered (2, 3, 6 rounds; Satterthwaite's df on a round part of 1-5 df is a little liberal); the
    # residual alone (before) covered 67.8%, 60.1%, 55.9%
    rng = np.random.default_rng(rounds)
    trials, rungs = 2000, 4
    level = rng.normal(0.0, 0.1, (trials, rungs, 1))
    logs = level + 0.02 * rng.standard_normal((trials, rungs, rounds)) + 0.05 * rng.standard_normal((trials, 1, rounds))
    model = blocks.fit(logs)
    var, df = blocks.level_variance(model)
    err = np.abs(logs.mean(axis=2) - level[:, :, 0])
    covered = np.mean(err <= (sps.t.isf(0.025, df) * np.sqrt(var / rounds))[:, None])
    residual_only = np.mean(err <= (sps.t.isf(0.025, model.df) * np.sqrt(model.var / rounds))[:, None])
    assert covered >= 0.90 and residual_only <= 0.70


@pytest.mark.parametrize("rungs", [4, 8])
def test_the_5_percent_is_per_verdict_and_a_whole_aa_table_carries_more(rungs):
    # A/A tables, CV 5%, 2 and 6 rounds: each rung's verdict is false in <= 5% + 3 se, while a table of 4 rungs
    # (3 verdicts) holds one or more false verdicts in 10-12% and one of 8 rungs (7) in 22-23%: the rate a
    # per-verdict 5% implies, and what docs/statistics.md says (seen, 2 and 6 rounds: 4 rungs 11.5%, 10.4%; 8 rungs
    # 23.0%, 21.9%)
    trials = 4000
    for rounds in (2, 6):
        logs = sim.sweep_logs(np.random.default_rng([rungs, rounds]), trials, np.zeros(rungs), rounds,
                              sim.Machine(cv=0.05))
        false = np.isin(sim.fixed_codes(logs, CLAIM), FALSE)
        assert false.mean(axis=0).max() <= exact_bound(trials)
        low, high = {4: (0.09, 0.14), 8: (0.18, 0.27)}[rungs]
        assert low <= false.any(axis=1).mean() <= high


@pytest.mark.parametrize("cv", [0.02, 0.10])
@pytest.mark.parametrize("rounds, n", [(2, 2), (6, 8)])
def test_scaling_efficiencys_band_holds_the_true_efficiency_95_percent_of_the_time(cv, rounds, n):
    # a scaling ladder: rung 0 on one unit, rungs on 2, 4, n units at a true E(N) of 90%, 85%, 80%; every E(N) band
    # (``stats.scaling.efficiency``: the model's contrast over the reference rung, divided by N) must miss the truth
    # on at most the exact bound's share of sweeps, and its estimate be unbiased on the log scale
    trials = 20000
    units, truth = [1, 2, 4, n], [1.0, 0.90, 0.85, 0.80]
    steps = np.diff(np.log([u * e for u, e in zip(units, truth)]), prepend=0.0)
    logs = sim.sweep_logs(np.random.default_rng([rounds, n, int(cv * 100)]), trials, steps, rounds,
                          sim.Machine(cv=cv))
    model = blocks.fit(logs)
    for rung in (1, 2, 3):
        value, low, high = scaling.efficiency(model, rung, 0, units[rung])
        missed = np.mean((truth[rung] < low) | (truth[rung] > high))
        assert missed <= exact_bound(trials), (rung, missed)
        assert abs(np.mean(np.log(value)) - math.log(truth[rung])) < 0.1 * cv
