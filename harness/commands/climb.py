"""``python -m harness climb``: find the fastest settings for this machine, keeping only what helps beyond noise.

    python -m harness climb [key=value ...] [climb.budget_min=30] [climb.repeats=2] [climb.min_effect=0.03]
                            [climb.knobs=[precision,batch,...]]

Greedy coordinate ascent from the given settings (``harness.analysis.climb`` decides; this module measures).
Each candidate changes one setting of the incumbent and is measured against it in fresh processes,
``climb.repeats`` runs per side, interleaved (candidate, incumbent, incumbent, candidate, ...). Every run
is a record of one sweep with ladder ``climb``: the incumbent of step s is rung 2s-2, its candidate rung
2s-1, so ``table --sweep <climb id>`` shows each comparison as "x previous". Runs already in the store
for the same settings and environment are copied instead of measured (the oldest first, so a re-run
replays the climb and continues where it stopped). No run starts that the budget could not pay for.

At the end: the trajectory, the best settings as a ladder file under ``<results_dir>/ladders/`` (found
by ``sweep +ladder=NAME``), the best command line, and what an accepted change does to the training.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from pathlib import Path

from harness import config as config_mod
from harness.analysis import climb as climb_mod
from harness.commands import hydra_edge
from harness.fileio import write_text_atomic
from harness.run import runner
from harness.run.launch import usable_cpus
from harness.store import RunRecord, new_id, store_record
from harness.sweeps import ladder as ladder_mod
from harness.sweeps import rungs as sweep_mod
from harness.workload import applicability, workloads as workloads_mod

LADDER_NAME = "climb"  # the `ladder` of every record a climb stores
KILL_MARGIN_S = 5.0  # a run's timeout ends this long before the budget does (killing it takes a moment)
NOT_IN_LADDER = ("results_dir", "timeout_s", "workload")  # start settings the written ladder leaves out
NOT_IN_LADDER_PREFIXES = ("sweep.", "debug.", "workload.")  # (the ladder names its workload in its own field)


def main(command: str, argv: list[str]) -> int:
    started = time.monotonic()  # the budget counts from here: start-up is part of the climb
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__.strip() + "\n\naxes (climb.knobs), in the order tried on a CPU:\n"
              + "\n".join(f"  {a.name:<19} {a.key}" for a in climb_mod.space("cpu")))
        return 0
    return hydra_edge.hydra_app(argv, lambda cfg: task(cfg, started))


def task(cfg, started: float) -> int:
    from harness.commands.console import console

    try:
        options = hydra_edge.climb_settings(cfg)
        climb_mod.check(options)
        settings = hydra_edge.plain_settings(cfg)
        start = runner.ready(config_mod.from_dict(settings), console.print)
        machine = runner.Machine.detect()
    except (ValueError, OSError) as exc:
        console.print(f"[red]error:[/] {exc}")
        return 2
    env, env_key = runner.environment(start.device)
    climb_id = new_id("climb-")
    noise = _noise(start.results_dir, env, env_key, start.device)
    budget = climb_mod.Budget(seconds=60 * options.budget_min, start=started)
    # the workload is the start's own (the composed node): the in-memory ladders of the trials only name it
    ctx = sweep_mod.SweepContext(sweep_id=climb_id, ladder=_ladder(start.workload.name, []), settings=settings,
                                 user_keys=frozenset({"workload"}), repeats=options.repeats)
    trials = Trials(ctx, machine, env, env_key, budget, options.repeats)
    # loader workers share the CPUs with the ranks: with devices=N each rank's loader gets its part
    facts = climb_mod.Facts(device=start.device, usable_cpus=max(1, usable_cpus() // start.devices))
    console.print(f"climb {climb_id}: {start.workload.name} ({start.size}) on {start.device}, budget "
                  f"{options.budget_min:g} min, {options.repeats} run(s) per side, accept at >= "
                  f"{1 + options.min_effect:.2f}x beyond noise; {noise.describe()}")
    result = climb_mod.ascend(_flat(start), climb_mod.space(facts.device, options.knobs), facts, trials.compare,
                              noise, options.min_effect, on_step=lambda s: console.print(_step_line(s)))
    from harness.commands.sweep import _auto_compact

    _auto_compact(start.results_dir)
    _report(result, settings, start, env, climb_id, time.monotonic() - started, budget.seconds)
    if trials.busy:
        print(f"- {len(trials.busy)} run(s) ran while other processes used up to {max(trials.busy):.0f}% of the CPUs: "
              "their numbers are not trustworthy, and bands that wide decide nothing; climb on an idle machine")
    return 0


def _flat(cfg: config_mod.RunConfig) -> dict:
    return config_mod.flatten(config_mod.record_dict(cfg))


def _noise(results_dir: str, env: dict, env_key: str, device: str):
    """This machine's noise calibration in the store (``python -m harness noise``), else the default."""
    from harness.analysis import noise_model
    from harness.store import load_runs

    calibrations = load_runs(results_dir, where={"ladder": noise_model.NOISE_LADDER})
    return noise_model.find_calibration(calibrations, env_key, noise_model.hardware_key({**env, "device": device}))


def _ladder(workload: str, changes: list[tuple[str, object]]) -> ladder_mod.Ladder:
    """An in-memory ladder: the start, then ``changes`` one rung each (what a trial's settings are built from)."""
    rungs = (ladder_mod.Rung(0, ""),) + tuple(ladder_mod.Rung(i, k, v) for i, (k, v) in enumerate(changes, start=1))
    return ladder_mod.Ladder(name=LADDER_NAME, description="", guide="", workload=workload, base={}, rungs=rungs)


# ------------------------------------------------------------------------------------------
# measuring


class Trials:
    """Measures a candidate against the incumbent: fresh processes (or cached copies), stored records."""

    def __init__(self, ctx: sweep_mod.SweepContext, machine, env: dict, env_key: str, budget: climb_mod.Budget,
                 repeats: int):
        self.ctx, self.machine, self.env, self.env_key = ctx, machine, env, env_key
        self.budget, self.repeats = budget, repeats
        self.used: set[str] = set()  # runs this climb has used: no run counts twice
        self.busy: list[float] = []  # other processes' share of the CPUs during runs that saw others at work

    def compare(self, accepted, candidate, step: int) -> climb_mod.Measured:
        """``climb.repeats`` rounds; the candidate first in round 0 (a candidate that cannot run costs one run),
        then the order alternates (ABBA), so that a slow drift of the machine favours neither side. A candidate
        of two changes (checkpointing to fit a larger batch) also measures the first change alone: the
        ladder the climb writes has a rung for it, and re-running that ladder must find it in the store."""
        roles = ["candidate"] + (["enabled"] if len(candidate) > 1 else []) + ["incumbent"]
        changes = {"candidate": accepted + list(candidate), "enabled": accepted + list(candidate[:-1]),
                   "incumbent": accepted}
        records: dict[str, list[RunRecord]] = {role: [] for role in roles}
        cached = 0
        for round_ in range(self.repeats):
            for role in (roles if round_ % 2 == 0 else roles[::-1]):
                try:
                    record, how = self.trial(changes[role], step, role, round_, _label_of(role, candidate))
                except ValueError as exc:  # settings that do not fit together: nothing ran
                    return _measured(records, cached, "skipped", str(exc))
                except climb_mod.BudgetSpent as exc:
                    done = sum(map(len, records.values()))
                    if not done:
                        raise
                    raise climb_mod.BudgetSpent(f"{exc}; {done} of {len(roles) * self.repeats} runs of this step "
                                                "are stored, and a re-run takes them from the store") from None
                records[role].append(record)
                cached += how == "cached"
                if record.status != "ok":
                    failed = {"incumbent" if role == "incumbent" else "candidate": record.status}
                    return _measured(records, cached, failed.get("candidate", "ok"), _last_line(record.error),
                                     failed.get("incumbent", "ok"))
        return _measured(records, cached, "ok", "")

    def trial(self, changes, step: int, role: str, round_: int, change: str) -> tuple[RunRecord, str]:
        """One run of ``changes`` over the start: a cached copy if the store has an unused one, else measured.
        Its record is rung 2s-2 of the climb's sweep for the incumbent of step s, 2s-1 for the candidate, and
        no rung for an enabling change measured alone (it is not a comparison of the table)."""
        ctx = dataclasses.replace(self.ctx, ladder=_ladder(self.ctx.ladder.workload, changes))
        cfg = sweep_mod.rung_config(ctx, len(changes), self.machine, round_=round_)
        rung = {"incumbent": 2 * (step - 1), "candidate": 2 * step - 1}.get(role)
        fields = dict(sweep_id=ctx.sweep_id, ladder=LADDER_NAME, rung=rung, round=round_, change=change)
        key = config_mod.config_hash(cfg)
        reason = applicability.skip_reason(cfg)  # once per run: a run that cannot act here is never taken cached
        if not sweep_mod.debug_active(cfg) and not reason:
            original = sweep_mod.lookup_cached(ctx.results_dir, key, self.env_key, self.used, oldest=True)
            if original is not None:
                record = sweep_mod.copy_cached(original, **fields)
                store_record(record, ctx.results_dir)
                self.used |= {original.run_id, record.run_id}
                self._print(record, "cached", step, role, round_, change)
                return record, "cached"
        return self._measure(cfg, key, reason, fields, step, role, round_, change), "measured"

    def _measure(self, cfg: config_mod.RunConfig, key: str, reason: str, fields: dict, step: int, role: str,
                 round_: int, change: str) -> RunRecord:
        from harness.commands.console import console
        from harness.commands.progress import RunProgress

        compiles = cfg.compile != "off"
        if not reason:  # a knob that cannot act here is recorded at once, for free
            refusal = self.budget.refusal(key, compiles, time.monotonic())
            if refusal:
                raise climb_mod.BudgetSpent(refusal)
            cfg.timeout_s = min(cfg.timeout_s, max(self.budget.left(time.monotonic()) - KILL_MARGIN_S, 1.0))
        began = time.monotonic()
        with RunProgress(console, _label(step, role, round_, self.repeats, change)) as progress:
            record = runner.run_and_store(cfg, self.env, self.env_key, progress.update, skip_reason=reason, **fields)
        self.used.add(record.run_id)
        if record.status != "skipped":
            self.budget.record(key, time.monotonic() - began, compiles)
        self._print(record, "not run" if record.status == "skipped" else "measured", step, role, round_, change)
        if record.status == "timeout" and self.budget.left(time.monotonic()) <= KILL_MARGIN_S + 1:
            raise climb_mod.BudgetSpent("a run was stopped at the end of the budget")
        return record

    def _print(self, record: RunRecord, how: str, step: int, role: str, round_: int, change: str) -> None:
        from rich.markup import escape

        from harness.analysis.stats import BUSY_PCT
        from harness.commands.console import console

        if (record.other_cpu_pct or 0) > BUSY_PCT:
            self.busy.append(float(record.other_cpu_pct))

        label = _label(step, role, round_, self.repeats, change)
        if record.status == "ok":
            console.print(f"{label}: ok ({how}) {record.samples_per_s:.2f} samples/s")
        else:
            console.print(f"{label}: {record.status} ({how}) {escape(_last_line(record.error)[:160])}")


def _label_of(role: str, candidate) -> str:
    """The ``change`` a record of this role carries."""
    text = [f"{k}={ladder_mod.format_value(v)}" for k, v in candidate]
    if role == "incumbent":
        return "incumbent"
    if role == "enabled":
        return f"{', '.join(text[:-1])} (to fit {text[-1]})"
    return ", ".join(text)


def _measured(records: dict, cached: int, status: str, reason: str, incumbent_status: str = "ok") -> climb_mod.Measured:
    from harness.analysis import noise_model, stats

    def runs(recs: list[RunRecord]) -> noise_model.Runs:  # as noise_model.runs_of reads them from the store
        ok = [r for r in recs if r.status == "ok" and r.samples_per_s and r.samples_per_s > 0]
        within = [u for u in (stats.within_run_uncertainty(r.step_ms) for r in ok if r.step_ms) if u is not None]
        return noise_model.Runs([float(r.samples_per_s) for r in ok], within)

    enabled = runs(records["enabled"]) if "enabled" in records else None
    return climb_mod.Measured(status, runs(records["candidate"]), runs(records["incumbent"]), reason, cached, enabled,
                              incumbent_status)


def _last_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[-1] if lines else ""


def _label(step: int, role: str, round_: int, repeats: int, change: str) -> str:
    from rich.markup import escape

    return escape(f"[step {step}, {role} {round_ + 1}/{repeats}] {change}")


def _step_line(s: climb_mod.Step) -> str:
    from rich.markup import escape

    colour = {"accepted": "green", "oom": "red", "failed": "red", "not run": "yellow"}.get(s.outcome, "")
    outcome = f"[{colour}]{s.outcome}[/]" if colour else s.outcome
    change = ", ".join(f"{k}={climb_mod.format_value(v)}" for k, v in s.changes)
    return (f"step {s.step}: {escape(change)} vs incumbent "
            f"{climb_mod.ratio_text(s.ratio)}: {outcome} ({escape(s.why)})")


# ------------------------------------------------------------------------------------------
# what the climb leaves behind


def ladder_base(settings: dict) -> dict:
    """The start settings that differ from the defaults (user overrides and config groups), as a ladder's base."""
    given = config_mod.flatten(config_mod.record_dict(config_mod.from_dict(settings)))
    defaults = config_mod.flatten(config_mod.record_dict(config_mod.RunConfig()))
    return {k: v for k, v in given.items() if v != defaults.get(k) and k not in NOT_IN_LADDER
            and not k.startswith(NOT_IN_LADDER_PREFIXES)}


def ladder_name(workload: str, device: str, base: dict) -> str:
    """``climb-WORKLOAD-DEVICE``, plus a short hash of the start settings when they are not the defaults."""
    name = f"climb-{workload}-{device}"
    if base:
        name += "-" + hashlib.sha256(json.dumps(base, sort_keys=True, default=str).encode()).hexdigest()[:6]
    return name


def write_ladder(mapping: dict, name: str, results_dir: str) -> Path:
    """Write ``<results_dir>/ladders/NAME.yaml`` atomically and check that it loads as a ladder."""
    import yaml

    folder = Path(results_dir) / ladder_mod.USER_LADDERS
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    header = "# Written by `python -m harness climb`; a re-run of the climb rewrites it.\n"
    write_text_atomic(path, header + yaml.safe_dump(mapping, sort_keys=False, width=120), durable=True)
    ladder_mod.load(name, results_dir)  # a ladder the climb writes must load: a bug here, not user input
    return path


def _report(result: climb_mod.ClimbResult, settings: dict, start, env: dict, climb_id: str, used_s: float,
            budget_s: float) -> None:
    from harness.commands.console import console

    base = ladder_base(settings)
    workload = start.workload.name
    name = ladder_name(workload, start.device, base)
    hardware = f"{start.device} {env.get('gpu_name') or env.get('cpu_model')} ({env.get('cpu_count')} CPUs)"
    mapping = climb_mod.ladder_file(result, workload, base, climb_id, hardware)
    path = write_ladder(mapping, name, start.results_dir)
    print()
    print(f"#### climb {climb_id}: {workload} ({start.size}) on {hardware}")
    print()
    print(climb_mod.trajectory_table(result))
    print()
    print(f"Stopped: {result.stopped}. Took {used_s / 60:.1f} of {budget_s / 60:g} min.")
    total = climb_mod.total(result)
    changes = {k: v for s in result.accepted for k, v in s.changes}
    if total is None:
        print("Nothing was faster beyond noise: the start settings stay the best found.")
    else:
        print(f"Best: {total[0]:.2f}x over the start (product of the accepted steps; their bands multiply to "
              f"{total[1]:.2f}-{total[2]:.2f}x): " + ", ".join(f"{k}={climb_mod.format_value(v)}"
                                                              for k, v in changes.items()))
    for note in mapping.get("notes", []):
        print(f"- changes the training: {note}")
    print(f"Best command: {climb_mod.command_line(workload, {**base, **changes})}")
    rerun = f"python -m harness sweep +ladder={name}"
    if start.results_dir != "results":
        rerun += f" results_dir={start.results_dir}"
    if not workloads_mod.is_builtin(start.workload):  # the ladder names it; its fields are the user's
        rerun += f" workload={workload} <the workload options and --config-dir the climb was given>"
    print(f"Ladder written to {path}; re-run it (from the store, in seconds): {rerun}")
    print(f"Gate CI on it: {rerun} then python -m harness baseline save {name} --sweep latest"
          + (f" --results {start.results_dir}" if start.results_dir != "results" else ""))
    print(f"Every run: python -m harness table --results {start.results_dir} --sweep {climb_id}")
    console.print("")
