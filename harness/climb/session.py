"""One climb from start to end: check the settings, measure step by step, compact the store, report."""

from __future__ import annotations

import time

from harness import config as config_mod
from harness.climb import output
from harness.climb.ascent import Budget, ascend
from harness.climb.space import ClimbConfig, Facts, check, space
from harness.climb.trials import Display, Trials, trial_ladder
from harness.run import runner
from harness.run.launch import usable_cpus
from harness.store import new_id
from harness.sweeps import rungs as sweep_mod
from harness.sweeps.loop import auto_compact


def run_climb(settings: dict, options: ClimbConfig, started: float, display: Display) -> int:
    """Climb from ``settings`` (the composed run settings) under ``options``; the budget counts from ``started``
    (``time.monotonic()``). Exit code: 0, or 2 for settings that cannot start (nothing measured then)."""
    try:
        check(options)
        start = runner.ready(config_mod.from_dict(settings), display.say)
        machine = runner.Machine.detect()
    except (ValueError, OSError) as exc:
        display.say(f"[red]error:[/] {exc}")
        return 2
    env, env_key = runner.environment(start.device)
    climb_id = new_id("climb-")
    from harness.analysis import sweepstats  # scipy: only once a climb starts

    noise = _noise(start, env_key)
    budget = Budget(seconds=60 * options.budget_min, start=started)
    # the workload is the start's own (the composed node): the in-memory ladders of the trials only name it
    ctx = sweep_mod.SweepContext(sweep_id=climb_id, ladder=trial_ladder(start.workload.name, []), settings=settings,
                                 user_keys=frozenset({"workload"}), repeats=options.repeats,
                                 record_fields=tuple(sweepstats.noise_fields(noise).items()),
                                 remeasure_busy=start.sweep.remeasure_busy)
    trials = Trials(ctx, machine, env, env_key, budget, options.repeats, display)
    # loader workers share the CPUs with the ranks: with devices=N each rank's loader gets its part
    facts = Facts(device=start.device, usable_cpus=max(1, usable_cpus() // start.devices))
    display.say(f"climb {climb_id}: {start.workload.name} ({start.size}) on {start.device}, budget "
                f"{options.budget_min:g} min, {options.repeats} run(s) per side, accept at >= "
                f"{1 + options.min_effect:.2f}x beyond noise; "
                + (noise.describe() if noise.calibrated else "no calibration: the runs' own spread"))
    result = ascend(_flat(start), space(facts.device, options.knobs), facts, trials.compare, noise,
                    options.min_effect, on_step=lambda s: display.say(output.step_line(s)), confirm=trials.again)
    auto_compact(start.results_dir)
    output.report(result, settings, start, env, climb_id, time.monotonic() - started, budget.seconds)
    if trials.busy:
        print(f"- {len(trials.busy)} run(s) ran on a busy machine ({trials.busy[0]}): not trustworthy, each measured "
              "again, and a step still busy decided nothing; climb on an idle machine")
    return 0


def _flat(cfg: config_mod.RunConfig) -> dict:
    return config_mod.flatten(config_mod.record_dict(cfg))


def _noise(start: config_mod.RunConfig, env_key: str):
    """The fit calibration (``python -m harness noise``) of this environment, workload and size made before now,
    else none (``calibration.choose_calibration``)."""
    from harness.analysis import calibration, noise_model
    from harness.store import load_runs, utc_timestamp

    frame = load_runs(start.results_dir, where={"ladder": noise_model.NOISE_LADDER, "env_key": [env_key]})
    candidates = calibration.candidates_from_frame(frame)
    return calibration.choose_calibration(candidates, env_key, start.workload.name, start.size, utc_timestamp()).noise
