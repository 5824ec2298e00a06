"""A sweep served whole from the store, as ``benchmarks/cached_sweep.py`` times it: what its process loads.

Asserted on ``sys.modules`` in a fresh interpreter, never on time: a cached sweep of several rounds with the default
``sweep.repeats=auto`` (its looks, its table) must not load the libraries only a measurement, a plot or another
statistic needs."""

from __future__ import annotations

import os
import subprocess
import sys

from harness import config as config_mod
from harness.commands import hydra_edge
from harness.config import ladder as ladder_mod
from harness.run.parent import runner
from harness.run.parent import env as env_mod
from harness.store import RunRecord, write_record
from harness.sweeps import rungs
from tests.conftest import REPO

# what a replayed sweep has no use for: the measuring side (torch and what the workloads import), plots, and the
# parts of scipy its statistics do not call (they use scipy.special alone, at the first band)
HEAVY = ("torch", "torchvision", "monai", "lightning", "transformers", "matplotlib", "PIL", "sklearn", "mlflow",
         "scipy.stats", "scipy.signal", "scipy.sparse", "scipy.interpolate", "scipy.spatial")
ARGS = ("+ladder=phase2", "measure.steps=2", "measure.warmup_steps=1", "sweep.max_repeats=2")


def _earlier_sweep(results) -> None:
    """Two rounds of an earlier phase2 sweep of these very settings, here and now (quiet, a little apart)."""
    settings = hydra_edge.plain_settings(hydra_edge.compose_settings([*ARGS[1:], f"results_dir={results}"]))
    ladder = ladder_mod.load("phase2")
    ctx = rungs.SweepContext(sweep_id="earlier", ladder=ladder, settings=settings,
                             user_keys=frozenset({"measure.steps", "measure.warmup_steps", "sweep.max_repeats",
                                                  "results_dir"}))
    for round_ in range(2):
        for rung in ladder.rungs:
            cfg = rungs.rung_config(ctx, rung.index, runner.Machine(cuda_available=False), round_=round_)
            _env, key = env_mod.environment(cfg.device)
            speed = (10.0 + 3 * rung.index) * (1 + 0.01 * round_)
            write_record(RunRecord(
                run_id=f"earlier-{rung.index}-{round_}", status="ok", timestamp="2026-01-01T00:00:00+0000",
                sweep_id="earlier", ladder="phase2", rung=rung.index, round=round_, workload="unet3d", device="cpu",
                config_hash=config_mod.config_hash(cfg), env_key=key, samples_per_s=speed,
                step_ms=[1000.0 / speed] * 5, step_ms_p50=1000.0 / speed, data_wait_frac=0.0, measured_s=0.5,
                cpu_count=2, cpu_model="x"), results)


def test_a_cached_sweep_of_several_rounds_loads_nothing_heavy(results):
    """Every run of both rounds comes from the store: nothing is measured, no launcher starts, and the process
    loads none of ``HEAVY`` (its looks and table do load scipy.special, pandas and pyarrow: they read and judge)."""
    _earlier_sweep(results)
    code = ("import sys; from harness import cli; from harness.run.parent import launcher; "
            "launcher.Zygote = None; "  # a launcher started here would fail: a sweep from the store starts none
            "rc = cli.main(sys.argv[1:]); "
            f"print('heavy:', sorted(m for m in {HEAVY!r} if m in sys.modules)); sys.exit(rc)")
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"}
    out = subprocess.run([sys.executable, "-c", code, "sweep", *ARGS, f"results_dir={results}"], cwd=REPO,
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count(": ok (cached)") == 8 and "(measured)" not in out.stdout, out.stdout
    assert out.stdout.splitlines()[-1] == "heavy: []", out.stdout[-2000:]
