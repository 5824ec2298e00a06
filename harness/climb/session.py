"""One climb from start to end: check the settings, run the climb's policy over the session engine step by step,
compact the store, report."""

from __future__ import annotations

import sys

from harness import config as config_mod
from harness.climb import output, resume
from harness.climb.ascent import Budget
from harness.climb.policy import ClimbLines, ascend, batch_bound
from harness.climb.space import ClimbConfig, Facts, check
from harness.climb.trials import Trials, trial_ladder
from harness.session.events import Display, Events
from harness.run.parent import runner
from harness.store import new_id
from harness.sweeps import rungs as sweep_mod
from harness.sweeps.loop import auto_compact
from harness.session import runner as session_runner
from harness.names import display_name
from harness.analysis.stats import calibration, sweepstats


def run_climb(settings: dict, options: ClimbConfig, started: float, display: Display,
              given: list[str] | None = None) -> int:
    """Climb from ``settings`` (the composed run settings) under ``options``; the budget counts from ``started``
    (``time.monotonic()``), less what earlier runs of the same climb spent (``harness.climb.resume``). ``given``:
    the words the climb was given, less its ``climb.*`` settings (the commands it prints are made of them).
    Exit code: 0, or 2 for settings that cannot start (nothing measured then)."""
    try:
        check(options)
        prepared = session_runner.prepare(config_mod.from_dict(settings), "`python -m harness climb`", display.say)
        machine = runner.Machine.detect()
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    start, (env, env_key) = prepared.resolved, prepared.environment
    climb_id = new_id("climb-")
    noise = calibration.calibration_now(start.results_dir, env_key, start.workload.name, start.size)
    spread = _spread(noise, start, given or [])
    key = resume.climb_key(config_mod.config_hash(start), env_key, options.repeats, options.min_effect, options.knobs)
    earlier = resume.load(start.results_dir, key)
    resumed = resume.describe(earlier, start.results_dir, 60 * options.budget_min) if earlier is not None else ""
    budget = Budget(seconds=60 * options.budget_min, start=started - (earlier.spent_s if earlier else 0.0))
    tracker = resume.Tracker(start.results_dir, key, earlier, climb_id, started)
    # the workload is the start's own (the composed node): the in-memory ladders of the trials only name it
    ctx = sweep_mod.SweepContext(sweep_id=climb_id, ladder=trial_ladder(start.workload.name, []), settings=settings,
                                 user_keys=frozenset({"workload"}), repeats=options.repeats,
                                 record_fields=tuple(sweepstats.noise_fields(noise).items()),
                                 remeasure_busy=start.sweep.remeasure_busy)
    lines = ClimbLines(display)  # what a person sees: a listener of the climb's events
    trials = Trials(ctx, machine, env, env_key, budget, options.repeats, Events(lines))
    # loader workers share the CPUs with the ranks: with devices=N each rank's loader gets its part
    facts = Facts(device=start.device, usable_cpus=max(1, config_mod.usable_cpus() // start.devices),
                  largest_batch=batch_bound(_flat(start), trials, display, options))
    display.say(f"climb {climb_id}: {display_name(start.workload.name, start.workload.model_node)} ({start.size}) on "
                f"{start.device}, budget {options.budget_min:g} min, {options.repeats} run(s) per side, accept at >= "
                f"{1 + options.min_effect:.2f}x beyond noise; "
                + spread)
    if resumed:
        display.say(resumed)
    try:
        result = ascend(_flat(start), options, facts, trials, noise, tracker)
    finally:
        lines.close()
    auto_compact(start.results_dir)
    output.report(result, settings, start, env, climb_id, tracker.spent(), budget.seconds, list(given or []),
                  tracker.earlier_s)
    if trials.busy:
        print(f"- {len(trials.busy)} run(s) ran on a busy machine ({trials.busy[0]}): not trustworthy, each measured "
              "again, and a step still busy decided nothing; climb on an idle machine")
    return 0


def _spread(noise, start: config_mod.RunConfig, given: list[str]) -> str:
    """What the climb's bands rest on: the calibration, or the runs' own spread and how to calibrate (the noise
    command of the words the climb was given)."""
    if noise.calibrated:
        return noise.describe()
    return ("no calibration: the runs' own spread (" + calibration.calibrate_hint(
        start.workload.name, start.size, start.device, start.results_dir, given) + ")")


def _flat(cfg: config_mod.RunConfig) -> dict:
    return config_mod.flatten(config_mod.record_dict(cfg))

