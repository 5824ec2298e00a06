"""``python -m harness sweep``: one sweep, or a campaign of sweeps.

    python -m harness sweep +ladder=NAME [key=value ...]
    python -m harness sweep -m +ladder=A,B [workload=x,y ...] [hydra/launcher=submitit_slurm ...]

A **sweep** climbs one ladder in this process: a plain loop over rounds x rungs (rounds outermost,
so repeats interleave: rung 0..K, then again). Rungs depend on earlier ones (a failed rung's change
is not built on), so they never run in parallel; each is still measured in a fresh child process.
Bad input stops before anything runs; the table is printed from the store at the end.

A **campaign** (``-m``) is a Hydra multirun of sweeps: one sweep per combination of the values given,
each a Hydra job, all under one campaign id. The default launcher runs them one after another (timings
on one machine must not overlap); ``hydra/launcher=submitit_slurm`` (``pip install -e '.[slurm]'``)
runs each as a SLURM job writing to one shared results folder. A requeued job resumes its sweep: the
sweep id is fixed by the campaign id and the job number, and rungs already measured are kept.
At the end of a sweep the store is compacted if many loose run files piled up.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from harness import config as config_mod
from harness.commands import hydra_edge
from harness.fileio import write_text_atomic
from harness.sweeps import ladder as ladder_mod
from harness.sweeps import rungs as sweep_mod
from harness.store import check_writable, new_id

INTERNAL_KEYS = {"sweep.id", "sweep.rung", "sweep.round"}
MULTIRUN_FLAGS = ("-m", "--multirun")
BASIC_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"
CLUSTER_LAUNCHERS = ("SlurmLauncher",)  # one job per node: timings of different jobs do not share a machine


def ladder_list() -> str:
    lines = ["ladders (use +ladder=NAME):"]
    for name in ladder_mod.available():
        try:
            lad = ladder_mod.load(name)
            lines.append(f"  {name:<20} [{lad.workload}, {len(lad.rungs)} rungs] {lad.description}")
        except ValueError as exc:
            lines.append(f"  {name:<20} INVALID: {exc}")
    return "\n".join(lines)


def split_ladder(argv: list[str]) -> tuple[str | None, list[str]]:
    name, rest = None, []
    for arg in argv:
        if arg.startswith(("+ladder=", "ladder=")):
            name = arg.split("=", 1)[1]
        else:
            rest.append(arg)
    return name, rest


def _is_value_sweep(value: str) -> bool:
    """A Hydra sweep (``a,b`` or ``range(...)``/``choice(...)``) rather than one value (lists are fine)."""
    depth = 0
    for ch in value:
        depth += ch in "[({"
        depth -= ch in "])}"
        if ch == "," and depth == 0:
            return True
    return value.startswith(("range(", "choice(", "interval(", "glob("))


def main(command: str, argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__.strip() + "\n\nsettings: any `run` setting as key=value; sweep.repeats=N, sweep.rerun=true\n\n"
              + ladder_list())
        return 0
    try:
        argv = hydra_edge.with_config_dirs(argv)
    except ValueError as exc:
        return _refuse(exc)
    if any(a in MULTIRUN_FLAGS for a in argv):
        return campaign([a for a in argv if a not in MULTIRUN_FLAGS])
    try:
        plan = plan_sweep(argv)
    except ValueError as exc:
        return _refuse(exc)
    return run_sweep(plan, sweep_id=new_id(f"{plan.ladder.name}-"))


# ------------------------------------------------------------------------------------------
# one sweep


@dataclass(frozen=True)
class SweepPlan:
    """A checked sweep request: the ladder, the user's overrides, and the settings they compose to."""

    ladder: ladder_mod.Ladder
    overrides: tuple[str, ...]
    user_keys: frozenset[str]
    settings: dict
    repeats: int
    rerun: bool


def plan_sweep(argv: list[str], campaign: bool = False, settings: dict | None = None) -> SweepPlan:
    """Check a sweep's arguments and compose its settings (ValueError naming what is wrong); inside a
    Hydra job, ``settings`` are the job's own (Hydra is already initialised there)."""
    name, overrides = split_ladder(argv)
    if name is None:
        raise ValueError("no ladder given: add +ladder=NAME\n" + ladder_list())
    lad = ladder_mod.load(name, settings["results_dir"] if settings else _results_dir(overrides))
    hydra_edge.check_overrides(overrides)
    user_keys = {k for k in map(hydra_edge.override_key, overrides) if k}
    given = set(map(hydra_edge.given_key, overrides))
    if "workload" in given:
        user_keys.add("workload")  # the user's workload wins over the ladder's default one
    elif any(k.startswith("workload.") for k in given):
        raise ValueError(f"{sorted(k for k in given if k.startswith('workload.'))[0]} changes a field of a workload "
                         f"without naming it: add workload=NAME (ladder {name!r} would use its own, {lad.workload!r})")
    if user_keys & INTERNAL_KEYS:
        raise ValueError(f"{sorted(user_keys & INTERNAL_KEYS)} are set by the sweep itself; remove them")
    several = [o for o in overrides if hydra_edge.override_key(o) and _is_value_sweep(o.split("=", 1)[1])]
    if several and not campaign:
        raise ValueError(f"{several[0]!r} gives several values; a sweep climbs one ladder with one value per setting. "
                         "Add -m to run one sweep per value as a campaign (python -m harness sweep -m ...)")
    clash = sweep_mod.conflicts(lad, user_keys)
    if clash:
        rungs = [r.index for r in lad.rungs if r.key in clash]
        raise ValueError(f"{', '.join(clash)} is what ladder {name!r} varies (rungs {rungs}); an override would "
                         "make those rungs change nothing. Remove it, or use another ladder")
    if settings is None:
        settings = hydra_edge.plain_settings(hydra_edge.compose_settings(overrides))
    parsed = config_mod.from_dict(settings)
    if parsed.sweep.repeats < 1:
        raise ValueError(f"sweep.repeats={parsed.sweep.repeats} must be at least 1 (each rung is measured that many times)")
    return SweepPlan(ladder=lad, overrides=tuple(overrides), user_keys=frozenset(user_keys), settings=settings,
                     repeats=parsed.sweep.repeats, rerun=parsed.sweep.rerun)


def _results_dir(overrides: list[str]) -> str:
    """The results folder the overrides name, before anything is composed: its ``ladders/`` holds the ladders
    this machine wrote itself (``climb``), which ``+ladder=NAME`` finds after ``conf/ladder/``."""
    given = [o.split("=", 1)[1] for o in overrides if hydra_edge.given_key(o) == "results_dir"]
    return given[-1] if given else config_mod.RunConfig().results_dir


def _refuse(exc: Exception) -> int:
    print(f"error: {exc}", file=sys.stderr)
    if "unknown ladder" in str(exc):
        print(ladder_list(), file=sys.stderr)
    return 2


def _context(plan: SweepPlan, sweep_id: str, campaign_id: str = "") -> sweep_mod.SweepContext:
    return sweep_mod.SweepContext(sweep_id=sweep_id, ladder=plan.ladder, settings=plan.settings,
                                  user_keys=plan.user_keys, repeats=plan.repeats, rerun=plan.rerun,
                                  campaign_id=campaign_id)


def run_sweep(plan: SweepPlan, sweep_id: str, campaign_id: str = "") -> int:
    """Preflight, then climb every rung of every round in this process; print the table."""
    from harness.run.runner import Machine

    ctx = _context(plan, sweep_id, campaign_id)
    try:
        machine = Machine.detect()
        check_writable(ctx.results_dir)
        sweep_mod.preflight(ctx, machine)
    except (ValueError, OSError) as exc:
        return _refuse(exc)
    code = climb(ctx, machine)
    _auto_compact(ctx.results_dir)
    _print_table(ctx)
    return code


def climb(ctx: sweep_mod.SweepContext, machine) -> int:
    """The sweep loop: rounds x rungs, each rung measured (or taken from the cache) in turn.

    Rungs this sweep already has a record for (a requeued campaign job) are kept, not measured again.
    Returns 1 if a rung could not even be started, else 0: failed runs are data, shown in the table."""
    from rich.markup import escape

    from harness.commands.console import console

    done = sweep_mod.measured_rungs(ctx)
    code = 0
    for round_ in range(ctx.repeats):
        for rung in ctx.ladder.rungs:
            # escaped: the console reads "[...]" as markup, and "[rung 1/4]" would vanish from the line
            label = escape(f"[rung {rung.index + 1}/{len(ctx.ladder.rungs)}" + (
                f", round {round_ + 1}/{ctx.repeats}]" if ctx.repeats > 1 else "]"))
            if (rung.index, round_) in done:
                console.print(f"{label} {rung.change('full') or 'baseline'}: already measured in this sweep")
                continue
            try:
                _climb_one(ctx, rung, round_, label, machine)
            except Exception as exc:  # a rung the parent could not even start: say so, go on with the next
                console.print(f"[red]rung {rung.index} could not run:[/] {exc}")
                code = 1
    return code


def _auto_compact(results_dir: str) -> None:
    """Past ``store.AUTO_COMPACT_LOOSE`` loose files, compact the store, after the last measurement: it never
    waits for the lock (another compaction running means skip) and a failure only warns."""
    from harness import store

    try:
        done = store.maybe_compact(results_dir)
    except (OSError, ValueError) as exc:
        print(f"warning: the store was not compacted ({exc}); the runs are safe as they are. "
              f"Try `python -m harness store compact --results {results_dir}`", file=sys.stderr)
        return
    if done is not None and not done.busy:
        print(f"store: {done.summary()}")


def _climb_one(ctx: sweep_mod.SweepContext, rung: ladder_mod.Rung, round_: int, label: str, machine) -> None:
    from harness.commands.console import console
    from harness.commands.progress import RunProgress

    progress = RunProgress(console, f"{label} {rung.change('full') or 'baseline'}")

    def on_start(resolved, dropped):
        note = f" (without the changes of failed rungs {sorted(dropped)})" if dropped else ""
        progress.label = f"{label} {rung.change(resolved.size) or 'baseline'}{note}"

    with progress:
        outcome = sweep_mod.run_rung(ctx, rung.index, round_, machine, on_start, progress.update)
    console.print(_outcome_line(progress.label, outcome))


def _outcome_line(label: str, outcome: sweep_mod.RungOutcome) -> str:
    rec = outcome.record
    if rec is None:
        return f"{label}: not run: {outcome.message}"
    if rec.status != "ok":
        why = (rec.error or "").strip().splitlines()
        return f"{label}: [red]{rec.status}[/] ({outcome.how}) {why[-1][:160] if why else ''}"
    return (f"{label}: [green]ok[/] ({outcome.how}) {rec.samples_per_s:.2f} samples/s, step p50 "
            f"{rec.step_ms_p50:.1f} ms, data wait {100 * (rec.data_wait_frac or 0):.0f}%")


def _print_table(ctx: sweep_mod.SweepContext) -> None:
    from harness.analysis import noise_model, table as table_mod
    from harness.store import load_runs

    try:
        frame = noise_model.with_calibrations(ctx.results_dir, load_runs(ctx.results_dir, sweep=ctx.sweep_id))
        table = table_mod.build_table(frame, ctx.sweep_id, ctx.results_dir)
    except ValueError as exc:
        print(f"no table: {exc}", file=sys.stderr)
        return
    print()
    print(table_mod.render(table, "md"))
    print(f"Again from the store: python -m harness table --results {ctx.results_dir} --sweep {ctx.sweep_id}")


# ------------------------------------------------------------------------------------------
# a campaign: a Hydra multirun of sweeps


def expand(argv: list[str]) -> list[list[str]]:
    """The jobs of a multirun, as Hydra's basic sweeper expands them (cartesian product of the values)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides(argv)
    except HydraException as exc:
        raise ValueError(hydra_edge.hydra_error_text(exc)) from None
    return [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


def launcher_target(argv: list[str]) -> str:
    hydra_args = [a for a in argv if a.lstrip("+").startswith("hydra")]
    cfg = hydra_edge.compose_settings(hydra_args, return_hydra_config=True)
    return str(cfg.hydra.launcher.get("_target_", ""))


def launcher_warning(target: str) -> str:
    """What to tell the user about where the launcher runs the sweeps ("" for the default)."""
    if target == BASIC_LAUNCHER:
        return ""
    if target.endswith(CLUSTER_LAUNCHERS):
        return ("each sweep runs as its own cluster job; ask for whole nodes (exclusive) so that no other job "
                "shares the machine a sweep measures on")
    return (f"WARNING: launcher {target.rsplit('.', 1)[-1]} runs sweeps AT THE SAME TIME on this machine: their "
            "timings overlap and one sweep's numbers are not comparable with another's (nor with a quiet "
            "machine's). Use the default launcher to measure; use this one only to test the plumbing.")


def campaign(argv: list[str]) -> int:
    """Check every sweep of the campaign, then launch them as one Hydra multirun; summary at the end."""
    campaign_id = new_id("campaign-")
    try:
        jobs = expand(argv)
        plans = [plan_sweep(job, campaign=True) for job in jobs]
        target = launcher_target(argv)
    except ValueError as exc:
        return _refuse(exc)
    print(f"campaign {campaign_id}: {len(plans)} sweeps "
          + ", ".join(f"{p.ladder.name}[{' '.join(p.overrides) or 'defaults'}]" for p in plans))
    note = launcher_warning(target)
    if note:
        print(note, file=sys.stderr)
    hydra_args = argv + [f"campaign={campaign_id}"]
    try:
        roots = _results_ladder_roots(plans)  # Hydra composes +ladder=NAME from its config search path
    except OSError as exc:
        return _refuse(ValueError(f"cannot copy the results folder's ladders where Hydra finds them: {exc}"))
    for root in roots:
        hydra_args = hydra_edge.add_search_dir(hydra_args, root)
    code = hydra_edge.hydra_app(hydra_args, campaign_job, multirun=True)
    return max(code, _print_campaign(campaign_id, plans[0].settings.get("results_dir", "results"), len(plans)))


CAMPAIGN_LADDERS = ".campaign-ladders"  # <results_dir>/.campaign-ladders/ladder/NAME.yaml: Hydra's view of ladders/


def _results_ladder_roots(plans: list[SweepPlan]) -> list[Path]:
    """For the campaign's ladders that live in a results folder (``climb`` wrote them), a config root Hydra can
    search: its config group is ``ladder/``, the results folder's is ``ladders/``, so the files are copied into
    ``<results_dir>/.campaign-ladders/ladder/`` (a copy, not a link: a launcher may run the jobs elsewhere)."""
    roots: list[Path] = []
    for plan in plans:
        path = Path(plan.ladder.path) if plan.ladder.path else None
        results_dir = Path(plan.settings.get("results_dir", "results"))
        if path is None or path.parent.resolve() != (results_dir / ladder_mod.USER_LADDERS).resolve():
            continue
        root = results_dir / CAMPAIGN_LADDERS
        (root / "ladder").mkdir(parents=True, exist_ok=True)
        write_text_atomic(root / "ladder" / path.name, path.read_text())
        if root not in roots:
            roots.append(root)
    return roots


def campaign_job(cfg) -> int:
    """One Hydra job of a campaign: one whole sweep (in whatever process the launcher gives it)."""
    from hydra.core.hydra_config import HydraConfig

    hc = HydraConfig.get()
    overrides = [o for o in hc.overrides.task if not o.split("=", 1)[0].lstrip("+") == "campaign"]
    try:
        plan = plan_sweep(overrides, campaign=True, settings=hydra_edge.plain_settings(cfg))
    except ValueError as exc:
        return _refuse(exc)
    sweep_id = f"{plan.ladder.name}-{cfg.campaign}-j{hc.job.num}"  # fixed: a requeued job resumes it
    return run_sweep(plan, sweep_id=sweep_id, campaign_id=str(cfg.campaign))


def _print_campaign(campaign_id: str, results_dir: str, expected: int) -> int:
    from harness.analysis import table as table_mod
    from harness.store import load_runs

    try:
        summary = table_mod.campaign_summary(load_runs(results_dir), campaign_id)
    except ValueError as exc:
        print(f"no campaign summary: {exc}", file=sys.stderr)
        return 1
    print()
    print(table_mod.render_campaign_summary(summary, "md"))
    print(f"Again from the store: python -m harness table --results {results_dir} --campaign {campaign_id}")
    return 0 if len(summary.rows) == expected else 1
