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


def test_values_scipy_gave_are_kept_exactly_and_a_later_process_asking_only_for_them_loads_no_scipy_special(tmp_path):
    import json

    from scipy import special

    asked = ("import json, sys, numpy as np; from harness.analysis.stats import distributions as dist; "
             "v = [dist.t.ppf(0.975, np.array([np.nan, 0.0, 2.0, 7.5])), dist.t.cdf(-3.0, 9.0), "
             "dist.f.ppf(0.99, 3, np.array([1.0, 10.0, np.inf])), dist.norm.isf(0.025)]; "
             "print(json.dumps({'values': [np.asarray(x).tolist() for x in v], 'types': [type(x).__name__ for x in v], "
             "'scipy.special': 'scipy.special' in sys.modules}))")
    env = {"PYTHONPATH": str(REPO), "PATH": "", "HARNESS_CACHE_DIR": str(tmp_path)}

    def ask(code: str) -> dict:
        out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                             env=env)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    first, second = ask(asked), ask(asked)
    assert first.pop("scipy.special") and not second.pop("scipy.special")  # the second read every value kept
    assert json.dumps(first) == json.dumps(second)  # the same floats, bit for bit (their reprs), and the same types
    assert first["values"][0][2:] == [special.stdtrit(2.0, 0.975), special.stdtrit(7.5, 0.975)]
    assert ask(asked.replace("0.975", "0.95"))["scipy.special"]  # a value not kept: scipy's own, computed then
    kept = tmp_path / "distribution-values.json"  # a file kept under another scipy is not read
    kept.write_text(kept.read_text().replace(dist.versions(), "scipy 0.0 numpy 0.0"))
    assert ask(asked)["scipy.special"]
    ask(asked)
    damaged = json.loads(kept.read_text())  # a hand-edited or damaged value: not read as a number, asked of scipy
    damaged["entries"] = {key: "oops" for key in damaged["entries"]}
    kept.write_text(json.dumps(damaged))
    assert ask(asked) == first | {"scipy.special": True}
    kept.write_text("{not json")
    assert ask(asked) == first | {"scipy.special": True}


def test_a_kept_value_is_returned_as_scipy_returns_it_and_another_precision_is_left_to_scipy(tmp_path, monkeypatch):
    import json

    from scipy import special

    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(dist, "_KEPT", dist._Kept())
    grid = (np.array([1.0, 2.5, 30.0, np.inf, np.nan, 0.0]), np.array([[0.001], [0.975]]))
    for _ in range(2):  # computed and kept, then read back from the file by a fresh reader
        got = dist._special().stdtrit(*grid)
        assert got.shape == (2, 6) and np.array_equal(got, special.stdtrit(*grid), equal_nan=True)
        scalar = dist._special().stdtr(4, -1.5)
        assert type(scalar) is np.float64 and scalar == special.stdtr(4, -1.5)
        monkeypatch.setattr(dist, "_KEPT", dist._Kept())
    assert len(json.loads((tmp_path / dist.VALUES_FILE).read_text())["entries"]) == 12 + 1
    single = dist._special().ndtri(np.float32(0.9))  # scipy's float32 loop, not a kept float64
    assert single.dtype == np.float32 and single == special.ndtri(np.float32(0.9))
    # a search over a grid, or over many points one at a time, is scipy's alone past a few dozen values a process
    assert np.array_equal(dist._special().ndtr(np.linspace(-3, 3, 256)), special.ndtr(np.linspace(-3, 3, 256)))
    for x in np.linspace(-3, 3, 200):
        assert dist._special().ndtr(x) == special.ndtr(x)
    kept = json.loads((tmp_path / dist.VALUES_FILE).read_text())["entries"]
    assert len(kept) == 12 + 1 + dist.KEPT_PER_PROCESS
    assert sum(k.startswith("ndtr(") for k in kept) == dist.KEPT_PER_PROCESS


def test_an_inconclusive_verdicts_repeats_are_kept_and_a_later_process_asking_them_again_loads_no_scipy_special(
        tmp_path):
    import json

    from harness.analysis.stats import speedup

    asked = ("import json, sys; from harness.analysis.stats import speedup; "
             "r = speedup.Ratio(1.04, 0.97, 1.11, runs=3, se=0.03, df=6.0); "
             "print(json.dumps({'text': speedup.verdict(r, 1.1, 1.15), 'none': speedup.repeats_to_decide("
             "speedup.Ratio(1.005, 0.8, 1.26), 1.001, 1.2), 'scipy.special': 'scipy.special' in sys.modules}))")
    env = {"PYTHONPATH": str(REPO), "PATH": "", "HARNESS_CACHE_DIR": str(tmp_path)}

    def ask() -> dict:
        out = subprocess.run([sys.executable, "-c", asked], cwd=REPO, capture_output=True, text=True, timeout=120,
                             env=env)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    first, second = ask(), ask()
    assert first.pop("scipy.special") and not second.pop("scipy.special")  # the second computed nothing
    expected = speedup.search_repeats(speedup.Ratio(1.04, 0.97, 1.11, runs=3, se=0.03, df=6.0), 1.1, 1.15)
    assert first == second == {"text": f"inconclusive (~{expected} repeats would decide)", "none": None}
    kept = tmp_path / speedup.ANSWERS_FILE
    assert sorted(json.loads(kept.read_text())["entries"].values(), key=str) == [expected, None]
    damaged = json.loads(kept.read_text())  # a damaged answer is not read: computed again
    damaged["entries"] = {key: "oops" for key in damaged["entries"]}
    kept.write_text(json.dumps(damaged))
    assert ask() == first | {"scipy.special": True}
    other = json.loads(kept.read_text())  # answers kept by other code (an edit of the module) are not read
    other["code"] = other["code"].replace("speedup ", "speedup 0")
    other["entries"] = {key: 1 for key in other["entries"]}
    kept.write_text(json.dumps(other))
    assert ask() == first | {"scipy.special": True}
