"""``python -m harness sweep``: one sweep, or a campaign of sweeps.

    python -m harness sweep +ladder=NAME [key=value ...]
    python -m harness sweep -m +ladder=A,B [workload=x,y ...] [hydra/launcher=submitit_slurm ...]

A **sweep** climbs one ladder in this process: the loop of ``harness.sweeps.loop`` over rounds x rungs
(rounds outermost, so repeats interleave, in serpentine order: rung 0..K, then K..0; sweep.repeats=auto looks after
every round and stops when every verdict is decided). Rungs depend on earlier ones (a failed
rung's change is not built on), so they never run in parallel; each is still measured in a fresh child
process. Bad input stops before anything runs; the table is printed from the store at the end (rich in a
terminal, markdown in a file or pipe).

A **campaign** (``-m``) is a Hydra multirun of sweeps: one sweep per combination of the values given
(``harness.sweeps.campaign``), each a Hydra job, all under one campaign id. The default launcher runs
them one after another (timings on one machine must not overlap); ``hydra/launcher=submitit_slurm``
(``pip install -e '.[slurm]'``) runs each as a SLURM job writing to one shared results folder. A
requeued job resumes its sweep: the sweep id is fixed by the campaign id and the job number, and rungs
already measured are kept. At the end of a sweep the store is compacted if many loose run files piled up.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.markup import escape

from harness import config as config_mod
from harness import shell
from harness.commands import hydra_edge, sweep_nodes
from harness.commands.machine import warn_if_unfit
from harness.store import check_writable, new_id
from harness.sweeps import campaign as campaign_mod
from harness.config import ladder as ladder_mod
from harness.config import workload as workloads_mod
from harness.sweeps import lock, loop
from harness.sweeps import rungs as sweep_mod
from harness.commands.console import console
from harness.run.parent import launcher
from harness.run.parent.runner import Machine
from harness.workload import preflight
from harness.analysis.views import cpu_bf16, table as table_mod
from harness.run.monitor import fitness
from harness.analysis.views import units as units_view
from harness.commands import terminal
from harness.commands.progress import RunProgress
from harness.session.events import OUTCOMES, Event

INTERNAL_KEYS = {"sweep.id", "sweep.rung", "sweep.round"}
MULTIRUN_FLAGS = ("-m", "--multirun")


def ladder_list(config_dirs: list[str] = ()) -> str:
    """The ladders ``+ladder=NAME`` finds: shipped, in the config folders given and ``harness-conf/`` here, and
    the results folder's."""
    lines = ["ladders (use +ladder=NAME):"]
    for name in ladder_mod.available(config_dirs=config_dirs):
        try:
            lad = ladder_mod.load(name, config_dirs=config_dirs)
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


def main(command: str, argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__.strip() + "\n\nsettings: any `run` setting as key=value; sweep.repeats=N or auto (the "
              "default: rounds until decided, at most sweep.max_repeats=6), sweep.budget_min=10 (minutes: no round "
              "or run is started past it, a run in flight finishes; with repeats=N only when given), "
              "sweep.rerun=true, sweep.remeasure_busy=false (a run of a busy machine is not measured again)\n\n"
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
    if int(plan.settings.get("nodes", 1)) > 1:
        return sweep_nodes.main(plan, run_sweep)
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
    repeats: int | str  # rounds, or "auto"
    rerun: bool
    max_repeats: int = 6
    budget_min: float = 10.0
    remeasure_busy: bool = True
    export: str = ""  # sweep.export: TARGET:DEST, exported at the sweep's end


def plan_sweep(argv: list[str], campaign: bool = False, settings: dict | None = None,
               config_dirs: list[str] | None = None) -> SweepPlan:
    """Check a sweep's arguments and compose its settings (ValueError naming what is wrong); inside a
    Hydra job, ``settings`` are the job's own (Hydra is already initialised there). ``config_dirs``: the
    user's config folders (default: those of ``hydra.searchpath`` in ``argv``), whose ``ladder/`` holds ladders."""
    name, overrides = split_ladder(argv)
    dirs = hydra_edge.config_dirs(overrides) if config_dirs is None else config_dirs
    if name is None:
        raise ValueError("no ladder given: add +ladder=NAME\n" + ladder_list(dirs))
    if not campaign and campaign_mod.gives_several_values(name):
        raise ValueError(f"'+ladder={name}' gives several ladders; a sweep climbs one ladder. Add -m to run one "
                         f"sweep per ladder as a campaign ({shell.command('sweep', '-m', *argv)})")
    lad = ladder_mod.load(name, settings["results_dir"] if settings else _results_dir(overrides), dirs)
    hydra_edge.check_overrides(overrides)
    user_keys = {k for k in map(hydra_edge.override_key, overrides) if k}
    given = set(map(shell.given_key, overrides))
    if "workload" in given:
        user_keys.add("workload")  # the user's workload wins over the ladder's default one
    elif any(k.startswith("workload.") for k in given):
        raise ValueError(f"{sorted(k for k in given if k.startswith('workload.'))[0]} changes a field of a workload "
                         f"without naming it: add workload=NAME (ladder {name!r} would use its own, {lad.workload!r})")
    elif settings is None and _workload_file(lad.workload, dirs):
        overrides = [f"workload={lad.workload}", *overrides]  # a ladder's own workload is a file of the user's
        user_keys.add("workload")
    if user_keys & INTERNAL_KEYS:
        raise ValueError(f"{sorted(user_keys & INTERNAL_KEYS)} are set by the sweep itself; remove them")
    several = [o for o in overrides
               if hydra_edge.override_key(o) and campaign_mod.gives_several_values(o.split("=", 1)[1])]
    if several and not campaign:
        raise ValueError(f"{several[0]!r} gives several values; a sweep climbs one ladder with one value per setting. "
                         "Add -m to run one sweep per value as a campaign (python -m harness sweep -m ...)")
    if "nodes" in lad.varied_keys():
        user_keys.discard("nodes")  # a ladder that climbs nodes: the user's nodes=M is what the sweep spans
    clash = sweep_mod.conflicts(lad, user_keys)
    if clash:
        rungs = [r.index for r in lad.rungs if r.key in clash]
        raise ValueError(f"{', '.join(clash)} is what ladder {name!r} varies (rungs {rungs}); an override would "
                         "make those rungs change nothing. Remove it, or use another ladder")
    if settings is None:
        settings = hydra_edge.plain_settings(hydra_edge.compose_settings(overrides))
    parsed = config_mod.from_dict(settings)
    config_mod.validate_sweep(parsed.sweep)
    if campaign:
        config_mod.validate_one_node(parsed.nodes, "sweep -m")
    return SweepPlan(ladder=lad, overrides=tuple(overrides), user_keys=frozenset(user_keys), settings=settings,
                     repeats=parsed.sweep.repeats, rerun=parsed.sweep.rerun, max_repeats=parsed.sweep.max_repeats,
                     budget_min=parsed.sweep.budget_min, remeasure_busy=parsed.sweep.remeasure_busy,
                     export=parsed.sweep.export)


def _workload_file(name: str, config_dirs: list[str]) -> bool:
    """Whether workload ``name`` is not shipped but a file of a config folder: composed from there (as
    ``workload=NAME``), where a shipped one is set by its name."""
    if name in workloads_mod.available():
        return False
    return any((Path(d) / "workload" / f"{name}.yaml").is_file() for d in config_dirs)


def _results_dir(overrides: list[str]) -> str:
    """The results folder the overrides name, before anything is composed: its ``ladders/`` holds the ladders
    this machine wrote itself (``climb``), which ``+ladder=NAME`` finds after ``conf/ladder/``."""
    given = [o for o in overrides if shell.given_key(o) == "results_dir"]
    if not given:
        return config_mod.RunConfig().results_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:  # the value as Hydra reads it: results_dir='my results' is the folder my results
        return str(OverridesParser.create().parse_override(given[-1]).value())
    except HydraException:
        return given[-1].split("=", 1)[1]  # composing the settings next says what is wrong with it


def _refuse(exc: Exception) -> int:
    print(f"error: {exc}", file=sys.stderr)
    if "unknown ladder" in str(exc):
        print(ladder_list(), file=sys.stderr)
    return 2


def _context(plan: SweepPlan, sweep_id: str, campaign_id: str = "") -> sweep_mod.SweepContext:
    return sweep_mod.SweepContext(sweep_id=sweep_id, ladder=plan.ladder, settings=plan.settings,
                                  user_keys=plan.user_keys, repeats=plan.repeats, rerun=plan.rerun,
                                  campaign_id=campaign_id, max_repeats=plan.max_repeats, budget_min=plan.budget_min,
                                  remeasure_busy=plan.remeasure_busy)


def run_sweep(plan: SweepPlan, sweep_id: str, campaign_id: str = "", driver=None) -> int:
    """Preflight, then every rung of every round in this process (``loop.run_ladder``); print the table.
    ``driver``: node 0's side of a sweep across nodes (``harness.sweeps.nodes.Driver``), told of every run."""
    ctx = _context(plan, sweep_id, campaign_id)
    try:
        machine = Machine.detect()
        check_writable(ctx.results_dir, "`python -m harness sweep`")
        for cfg in sweep_mod.preflight(ctx, machine):
            preflight.check_model_builds(cfg)
        held = lock.acquire(ctx.results_dir)
    except (ValueError, OSError) as exc:
        return _refuse(exc)
    try:  # the fitness glance (0.2 s) before the first run measured, after every refusal: a cached sweep skips it
        code = loop.run_ladder(ctx, machine, RungLines(console, before_first_run=warn_if_unfit),
                               *([driver] if driver is not None else []))
    finally:
        lock.release(held)
    loop.auto_compact(ctx.results_dir)
    if code != 2:  # 2: the first round would not fit in the budget, and nothing was measured
        table = _print_table(ctx, plan.overrides)
        if plan.export:  # the table just printed, not built again
            from harness.commands import export as export_cmd  # sweep.export only: 4 modules off a cached sweep's start

            export_cmd.export_after(plan.export, ctx.results_dir, sweep=sweep_id, table=table)
    return code


class RungLines:
    """The sweep as a person sees it (a listener of its events): a live status line while a rung runs, then one
    line of its outcome."""

    def __init__(self, console, before_first_run: Callable[[], None] | None = None):
        self.console = console
        self.before_first_run = before_first_run  # called once, before the first run measured (not one copied)
        self.progress: RunProgress | None = None
        self.said_bf16 = False  # the line on emulated bf16, said once

    def before_launch(self, cfg=None) -> None:
        """A run is about to be measured (the loop calls it; a run from the store is not one): the fitness glance
        before the first, and before the first bf16 one on a CPU that emulates bf16, a line that says so."""
        if self.before_first_run is not None:
            self.before_first_run()
            self.before_first_run = None
        if (cfg is not None and not self.said_bf16
                and cpu_bf16.emulated(cfg.device, cfg.precision, fitness.cpu_bf16())):
            self.said_bf16 = True
            self.console.print(f"[yellow]note:[/] {escape(cpu_bf16.EMULATED)}")

    def on(self, event: Event) -> None:
        turn = event.turn
        if event.kind == "started":
            dropped = sorted(event.dropped)
            note = f" (without the changes of rungs {dropped}, which did not run ok)" if dropped else ""
            self._open(f"{escape(turn.label)} {turn.rung.change(event.cfg.size) or 'baseline'}{note}")
        elif event.kind == "progress" and self.progress is not None:
            self.progress.update(event.info, event.elapsed)
        elif event.kind in OUTCOMES:
            label = self._close() or f"{escape(turn.label)} {turn.rung.change('full') or 'baseline'}"
            self.console.print(_outcome_line(label, event.outcome))
        elif event.kind == "failed":
            self._close()
            self.console.print(f"[red]rung {turn.rung.index} could not run:[/] {escape(str(event.error))}")
        elif event.kind == "already":
            # escaped: the console reads "[...]" as markup, and "[rung 1/4]" would vanish from the line
            self.console.print(f"{escape(turn.label)} {turn.rung.change('full') or 'baseline'}: "
                               "already measured in this sweep")
        elif event.text:  # a line of the loop's own (a busy run measured again, a look, a refusal), as plain text
            self._close()  # a run told to stop before it started (a sweep across nodes) leaves no status line
            self.console.print(escape(event.text))

    def _open(self, label: str) -> None:
        self._close()
        self.progress = RunProgress(self.console, label)
        self.progress.__enter__()

    def _close(self) -> str:
        """Stop the status line; its label ("" when none was shown)."""
        progress, self.progress = self.progress, None
        if progress is None:
            return ""
        progress.__exit__(None, None, None)
        return progress.label


def _outcome_line(label: str, outcome: sweep_mod.RungOutcome) -> str:
    rec = outcome.record
    if rec is None:
        return f"{label}: not run: {outcome.message}"
    if rec.status != "ok":
        why = (rec.error or "").strip().splitlines()
        return f"{label}: [red]{rec.status}[/] ({outcome.how}) {why[-1][:160] if why else ''}"
    return (f"{label}: [green]ok[/] ({outcome.how}) {rec.samples_per_s:.2f} samples/s, step p50 "
            f"{rec.step_ms_p50:.1f} ms, data wait {100 * (rec.data_wait_frac or 0):.0f}%")


def _print_table(ctx: sweep_mod.SweepContext, overrides=()) -> table_mod.SweepTable | None:
    """The sweep's table, built once from the store and printed (None when there is none); ``overrides``: the
    settings the sweep was given, which the noise command its notes print carries (less the sweep's own)."""
    try:
        table = table_mod.load_table(ctx.results_dir, ctx.sweep_id, shell.without(overrides, ("sweep.", "campaign")))
    except ValueError as exc:
        print(f"no table: {exc}", file=sys.stderr)
        return None
    print()
    terminal.print_sweep_table(table)
    if (units := units_view.load_unit_table(ctx.results_dir, ctx.sweep_id)) is not None:
        print(units_view.render_markdown(units))
    print(f"Again from the store: {shell.command('table', '--results', ctx.results_dir, '--sweep', ctx.sweep_id)}")
    return table


# ------------------------------------------------------------------------------------------
# a campaign: a Hydra multirun of sweeps


def launcher_target(argv: list[str]) -> str:
    """The ``_target_`` of the launcher the Hydra overrides in ``argv`` choose."""
    hydra_args = [a for a in argv if a.lstrip("+").startswith("hydra")]
    cfg = hydra_edge.compose_settings(hydra_args, return_hydra_config=True)
    return str(cfg.hydra.launcher.get("_target_", ""))


def campaign(argv: list[str]) -> int:
    """Check every sweep of the campaign, then launch them as one Hydra multirun; summary at the end."""
    campaign_id = new_id("campaign-")
    try:
        jobs = campaign_mod.expand(hydra_edge.sweep_alternatives(argv))
        plans = [plan_sweep(job, campaign=True) for job in jobs]
        target = launcher_target(argv)
    except ValueError as exc:
        return _refuse(exc)
    print(f"campaign {campaign_id}: {len(plans)} sweeps "
          + ", ".join(f"{p.ladder.name}[{' '.join(p.overrides) or 'defaults'}]" for p in plans))
    note = campaign_mod.launcher_warning(target)
    if note:
        print(note, file=sys.stderr)
    hydra_args = argv + [f"campaign={campaign_id}"]
    try:  # Hydra composes +ladder=NAME from its config search path
        roots = campaign_mod.results_ladder_roots((p.ladder, _results_of(p)) for p in plans)
    except OSError as exc:
        return _refuse(ValueError(f"cannot copy the results folder's ladders where Hydra finds them: {exc}"))
    for root in roots:
        hydra_args = hydra_edge.add_search_dir(hydra_args, root)
    with launcher.warm():  # one warm launcher for every sweep of the campaign that runs in this process
        code = hydra_edge.hydra_app(hydra_args, campaign_job, multirun=True)
    return max(code, _print_campaign(campaign_id, _results_of(plans[0]), len(plans)))


def _results_of(plan: SweepPlan) -> str:
    return plan.settings.get("results_dir", "results")


def campaign_job(cfg) -> int:
    """One Hydra job of a campaign: one whole sweep (in whatever process the launcher gives it)."""
    from hydra.core.hydra_config import HydraConfig

    hc = HydraConfig.get()
    overrides = [o for o in hc.overrides.task if not o.split("=", 1)[0].lstrip("+") == "campaign"]
    try:
        plan = plan_sweep(overrides, campaign=True, settings=hydra_edge.plain_settings(cfg),
                          config_dirs=hydra_edge.config_dirs(list(hc.overrides.hydra)))
    except ValueError as exc:
        return _refuse(exc)
    sweep_id = campaign_mod.job_sweep_id(plan.ladder.name, str(cfg.campaign), hc.job.num)
    return run_sweep(plan, sweep_id=sweep_id, campaign_id=str(cfg.campaign))


def _print_campaign(campaign_id: str, results_dir: str, expected: int) -> int:
    try:
        summary = table_mod.load_campaign(results_dir, campaign_id)
    except ValueError as exc:
        print(f"no campaign summary: {exc}", file=sys.stderr)
        return 1
    print()
    terminal.print_campaign(summary, tables=False)
    print(f"Again from the store: {shell.command('table', '--results', results_dir, '--campaign', campaign_id)}")
    return 0 if len(summary.rows) == expected else 1
