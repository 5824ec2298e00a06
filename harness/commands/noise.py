"""``python -m harness noise [key=value ...] noise.runs=N``: calibrate this machine's noise (A/A).

The same settings run N times, each in a process of its own (forked from one warm launcher, as a sweep's runs),
and are stored as a sweep with ladder ``noise``; the process-to-process CV of samples_per_s then replaces the default
CV in every later table, compare, report and check of this environment. The Hydra part stays here; the statistics
live in ``harness.analysis.stats.noise_model``.
"""

from __future__ import annotations

import sys

from harness.commands import hydra_edge
from harness import config as config_mod
from harness import shell
from harness.run.parent import runner
from harness.store import new_id
from harness.commands.console import console, refuse
from harness.commands.progress import RunProgress
from harness.session import runner as session_runner
from harness.analysis.stats import noise_model, speedup
from harness.analysis.stats.busy import busy_reason

DEFAULT_RUNS = 8  # a CV of 8 runs (7 df) is the one the shaky-calibration rule and the bimodal test are sized on
RUNS_KEY = "noise.runs"


def split_runs(argv: list[str]) -> tuple[int, list[str]]:
    """``noise.runs=N`` out of the overrides (ValueError naming the bad value), and the rest for Hydra."""
    runs, rest = DEFAULT_RUNS, []
    for arg in argv:
        if arg.lstrip("+").startswith(RUNS_KEY + "="):
            value = arg.split("=", 1)[1]
            if not value.strip().isdigit() or int(value) < 2:
                raise ValueError(f"{RUNS_KEY}={value!r} is not valid: give a whole number of runs >= 2 "
                                 f"(default {DEFAULT_RUNS}; a CV needs at least two)")
            runs = int(value)
        else:
            rest.append(arg)
    return runs, rest


def main(command: str, argv: list[str]) -> int:
    try:
        runs, overrides = split_runs(argv)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return hydra_edge.hydra_app(overrides, lambda cfg: task(cfg, runs))


def task(cfg, runs: int) -> int:
    try:
        settings = config_mod.from_dict(hydra_edge.plain_settings(cfg))
        config_mod.validate_one_node(settings.nodes, "noise")
    except ValueError as exc:
        return refuse(exc)
    with session_runner.launcher_for(settings) as session:  # one launcher, as a sweep's
        try:
            prepared = session_runner.prepare(settings, "`python -m harness noise`", console.print)
        except (ValueError, OSError) as exc:
            return refuse(exc)
        if session is not None:  # its runs start as a sweep's do: the noise calibrated is that of a sweep's runs
            session.begin(config_mod.to_dict(prepared.resolved))
        records = measure(prepared, runs)
    return report(records, records[0].sweep_id, prepared.resolved.results_dir)


def measure(prepared, runs: int) -> list:
    """The same settings measured ``runs`` times, each in a process of its own, stored as sweep ``noise-...``."""
    base, (env, key) = prepared.resolved, prepared.environment
    sweep_id = new_id("noise-")  # noise-<UTC time>-<random>
    records = []
    for i in range(runs):
        with RunProgress(console, f"[{i + 1}/{runs}] same settings, a process of its own") as progress:
            record = runner.run_and_store(base, env, key, progress.update, sweep_id=sweep_id, ladder="noise", rung=0,
                                          change="", round=i)
        console.print(f"[{i + 1}/{runs}] {record.status}"
                      + (f", {record.samples_per_s:.2f} samples/s" if record.status == "ok" else
                         f" {(record.error or '').strip().splitlines()[-1:]}"))
        records.append(record)
    return records


def report(records, sweep_id: str, results_dir: str) -> int:
    """Print the calibration; 0 when it could be made, 1 when too few runs were ok. A calibration taken on a busy
    machine (``busy_reason``: the CPUs, the GPU's clocks or its memory) prints NOT FIT, and later sweeps skip it."""

    ok = [r for r in records if r.status == "ok" and r.samples_per_s]
    try:
        within = [u for u in (speedup.within_run_uncertainty(r.step_ms) for r in ok) if u is not None]
        cal = noise_model.calibrate([r.samples_per_s for r in ok], within, busy=[busy_reason(r) for r in ok])
    except ValueError as exc:
        console.print(f"[red]no calibration:[/] {exc} (of {len(records)} runs)")
        return 1
    console.print("\n" + noise_model.format_calibration(cal, sweep_id, len(records)), markup=False)
    again = f"({shell.command('table', '--results', results_dir, '--sweep', sweep_id)})"
    if cal.warnings:
        console.print(f"stored as sweep {sweep_id}, but not fit: later sweeps of this environment, workload and size "
                      f"skip it and their tables say why {again}", soft_wrap=True, markup=False)
    else:
        console.print(f"stored as sweep {sweep_id}: later sweeps of this environment, workload and size use this CV "
                      f"{again}", soft_wrap=True, markup=False)
    return 0
