"""Seeded simulations of ``fit``'s pick (``views.fit_curve``: ``fastest`` and ``tie_text``, the line "Fastest: ...;
within its band: ..." its report prints). Each size's point is its rung's throughput and band as the sweep's table
reads them (the median of its runs; ``Judgement.uncertainty``, rebuilt here from ``blocks`` for many sweeps at once
and checked against ``table.build_table``). 4 sizes, whole rounds moving by sd 3%, runs by CV 2% about them; 2,000
fits a case (seeds 1-6). A fastest named alone is a claim that it beats every other size beyond noise:

| sizes | rounds | named alone, before | now | a wrong size named alone (the true best outside its tie) |
|---|---|---|---|---|
| all equal | 1, no calibration | 100% (no band: no tie) | 0% ("no band ...: not told apart") | - |
| all equal | 1, a calibration (CV 2%, 8 runs) | 0% | 0% | - |
| all equal | 2 / 3 | 0.15% / 0.05% | 0.15% / 0.05% | - |
| the largest 10% faster | 2 / 3 | 20.2% / 33.3% (the same rule) | 20.2% / 33.3% | 0% / 0% |
| the largest 20% faster | 3 | 78.6% | 78.6% | 0% |

The bands are each size's own level with the rounds' effects in them, so they rarely part (a contrast would cancel
the rounds): the pick errs on the side of "not told apart"."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sim_rates import TRIALS, at_least, at_most

from test_noise_model import records

from harness.analysis.stats import blocks
from harness.analysis.stats import distributions as sps
from harness.analysis.views import fit_curve
from harness.analysis.views import table as table_mod

SIZES = [2, 4, 8, 16]


def sweeps(seed: int, rounds: int, faster: float = 1.0, trials: int = TRIALS) -> np.ndarray:
    """Log throughputs (trials, sizes, rounds): the largest size ``faster`` x the others."""
    rng = np.random.default_rng(seed)
    level = np.log(100.0) + np.log([1.0] * (len(SIZES) - 1) + [faster])
    rounds_moved = rng.normal(0.0, 0.03, (trials, 1, rounds))
    return level[None, :, None] + rounds_moved + rng.normal(0.0, 0.02, (trials, len(SIZES), rounds))


def points(logs: np.ndarray, cv: float | None = None, df: float = 0.0) -> list[list[fit_curve.Point]]:
    """Each sweep's points as the table reads them (``Judgement.uncertainty``'s band)."""
    var, vdf = blocks.level_variance(blocks.fit(logs, cv, df))
    rounds = logs.shape[-1]
    with np.errstate(invalid="ignore"):
        band = np.expm1(sps.t.isf(0.025, np.where(vdf > 0, vdf, np.nan)) * np.sqrt(var / rounds))
    means = np.median(np.exp(logs), axis=-1)  # the table's samples/s: the median of the runs
    return [[fit_curve.Point(s, "ok", float(m), None if not math.isfinite(b) else float(b), None, None, rounds)
             for s, m in zip(SIZES, row)] for row, b in zip(means, band)]


def picks(curves: list[list[fit_curve.Point]]) -> tuple[list, list[bool], list[bool]]:
    """Per fit: the fastest, named alone now, named alone by the rule before (no band: no tie)."""
    best = [fit_curve.fastest(c) for c in curves]
    alone = [fit_curve.tie_text(c, b, "batch_size") == "" for c, b in zip(curves, best)]
    before = [not fit_curve.within_band(c, b) for c, b in zip(curves, best)]
    return best, alone, before


def test_the_points_are_the_tables():
    logs = sweeps(9, 2, trials=3)
    for logs_one, simulated in zip(logs, points(logs)):
        table = table_mod.build_table(records("fit-sim", [list(np.exp(r)) for r in logs_one]), "fit-sim")
        for read, sim in zip(fit_curve.curve(table, SIZES), simulated):
            assert read.samples_per_s == pytest.approx(sim.samples_per_s) and read.band == pytest.approx(sim.band)


def test_one_round_without_a_calibration_names_no_size_alone():
    _, alone, before = picks(points(sweeps(1, 1)))
    assert not any(alone) and all(before)


@pytest.mark.parametrize("seed, rounds, cal", [(2, 1, True), (3, 2, False), (4, 3, False)])
def test_equal_sizes_name_a_fastest_alone_in_at_most_5_percent_of_fits(seed, rounds, cal):
    _, alone, _ = picks(points(sweeps(seed, rounds), *((0.02, 7) if cal else ())))
    assert np.mean(alone) <= at_most(0.05)


@pytest.mark.parametrize("seed, rounds, faster, named", [(5, 2, 1.10, 0.2015), (5, 3, 1.10, 0.3325),
                                                         (6, 3, 1.20, 0.786)])
def test_a_faster_size_is_named_alone_and_a_wrong_one_never(seed, rounds, faster, named):
    best, alone, _ = picks(points(sweeps(seed, rounds, faster)))
    right = np.mean([a and b.size == SIZES[-1] for a, b in zip(alone, best)])
    wrong = np.mean([a and b.size != SIZES[-1] for a, b in zip(alone, best)])
    assert right >= at_least(named) and wrong <= at_most(0.0)
