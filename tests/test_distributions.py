"""The statistics' distribution functions on scipy.special give scipy.stats's values, edges included, and importing
the statistics (or the store) loads neither scipy nor pandas: a command pays for them only where it computes."""

from __future__ import annotations

import itertools
import subprocess
import sys

import numpy as np
from scipy import stats

from harness.analysis.stats import distributions as dist
from harness.analysis.stats import noise_model
from harness.analysis.stats.speedup import within_run_uncertainty
from tests.conftest import REPO

QS = [0.0, 1e-9, 0.001, 0.025, 0.5, 0.975, 1.0, np.nan, 1.5, -0.1]
XS = [-np.inf, -40.0, -3.0, 0.0, 0.5, 4.0, 40.0, np.inf, np.nan]
DFS = [0.5, 1, 2, 3.5, 9, 30, 1e6, np.inf, np.nan, 0, -1]


def _same(ours, theirs) -> bool:
    a, b = np.asarray(ours, dtype=float), np.asarray(theirs, dtype=float)
    return type(ours) is type(theirs) and a.shape == b.shape and np.allclose(a, b, rtol=1e-12, atol=0, equal_nan=True)


def test_quantiles_and_cdfs_equal_scipy_stats_edges_and_invalid_parameters_included():
    for q, df in itertools.product(QS, DFS):
        assert _same(dist.t.ppf(q, df), stats.t.ppf(q, df)), (q, df)
        assert _same(dist.t.isf(q, df), stats.t.isf(q, df)), (q, df)
        assert _same(dist.chi2.ppf(q, df), stats.chi2.ppf(q, df)), (q, df)
        for dfd in (1, 10, np.inf, 0):
            assert _same(dist.f.ppf(q, df, dfd), stats.f.ppf(q, df, dfd)), (q, df, dfd)
    for x, df in itertools.product(XS, DFS):
        assert _same(dist.t.cdf(x, df), stats.t.cdf(x, df)) and _same(dist.t.sf(x, df), stats.t.sf(x, df)), (x, df)
    for q, x in zip(QS, XS):
        assert _same(dist.norm.ppf(q), stats.norm.ppf(q)) and _same(dist.norm.isf(q), stats.norm.isf(q))
        assert _same(dist.norm.cdf(x), stats.norm.cdf(x)) and _same(dist.norm.sf(x), stats.norm.sf(x))
        assert _same(dist.norm.pdf(x, scale=2.5), stats.norm.pdf(x, scale=2.5))
    df = np.array([np.nan, 0.0, 2.0, 7.5])  # arrays as the block model passes them: nan where no df is known
    assert _same(dist.t.ppf(0.975, df), stats.t.ppf(0.975, df))
    assert _same(dist.t.ppf(0.975, df * np.nan), stats.t.ppf(0.975, df * np.nan))  # no df at all: nan, no scipy
    assert _same(dist.nct.sf(2.0, 5, 1.0), stats.nct.sf(2.0, 5, 1.0))
    assert noise_model._Z == stats.norm.ppf(0.5 + noise_model.CONFIDENCE / 2)


def test_the_within_run_band_is_scipy_stats_bootstrap_percentile_interval():
    rng = np.random.default_rng(5)
    for seed, n in enumerate((5, 12, 80, 333)):
        steps = rng.lognormal(3.0, 0.3, n)
        res = stats.bootstrap((steps,), np.mean, confidence_level=0.95, n_resamples=2000, method="percentile",
                              rng=np.random.default_rng(seed))
        low, high = res.confidence_interval
        assert np.isclose(within_run_uncertainty(steps, seed), (high - low) / 2 / steps.mean(), rtol=1e-12, atol=0)
    assert within_run_uncertainty([1.0, 2.0, 3.0, 4.0]) is None  # fewer than 5 steps: no band


def test_importing_the_statistics_and_the_store_loads_neither_scipy_nor_pandas():
    code = ("import sys; import harness.store; from harness.analysis.stats import blocks, calibration, checkstats, "
            "noise_model, sequential, sweepstats; from harness.sweeps import loop; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'scipy', 'pandas', 'torch'}), "
            "'pyarrow.dataset' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(REPO), "PATH": ""})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[]", "False"]
