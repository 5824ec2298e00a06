"""``python -m harness sweep +ladder=NAME [overrides]``: the Hydra edge of a sweep.

The parent checks the input and resolves every rung (bad input stops before anything runs), then
launches the rungs as a Hydra multirun over ``sweep.round`` x ``sweep.rung`` (rounds outermost, so
repeats interleave: rung 0..K, then again), so any Hydra launcher can run them. Each job measures
its rung in a fresh child process. At the end the store is compacted if many loose files piled up,
and the table is printed from the store.
"""

from __future__ import annotations

import sys

from harness import cli
from harness import config as config_mod
from harness import ladder as ladder_mod
from harness import sweep as sweep_mod
from harness.store import check_writable, new_id

INTERNAL_KEYS = {"sweep.id", "sweep.rung", "sweep.round"}


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


def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__.strip() + "\n\nsettings: any `run` setting as key=value; sweep.repeats=N, sweep.rerun=true\n\n" + ladder_list())
        return 0
    name, overrides = split_ladder(argv)
    if name is None:
        print("error: no ladder given: add +ladder=NAME\n" + ladder_list(), file=sys.stderr)
        return 2
    try:
        lad = ladder_mod.load(name)
        cli.check_overrides(overrides)
        user_keys = {k for k in map(cli.override_key, overrides) if k}
        if user_keys & INTERNAL_KEYS:
            raise ValueError(f"{sorted(user_keys & INTERNAL_KEYS)} are set by the sweep itself; remove them")
        several = [o for o in overrides if cli.override_key(o) and _is_value_sweep(o.split("=", 1)[1])]
        if several:
            raise ValueError(f"{several[0]!r} gives several values; a sweep climbs one ladder with one value per "
                             "setting. Run one sweep per value (and compare them with `python -m harness compare`)")
        clash = sweep_mod.conflicts(lad, user_keys)
        if clash:
            rungs = [r.index for r in lad.rungs if r.key in clash]
            raise ValueError(f"{', '.join(clash)} is what ladder {name!r} varies (rungs {rungs}); an override would "
                             "make those rungs change nothing. Remove it, or use another ladder")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        if "unknown ladder" in str(exc):
            print(ladder_list(), file=sys.stderr)
        return 2
    try:
        ctx = _context(name, lad, overrides, user_keys, sweep_id=new_id(f"{name}-"))
        machine = _machine()
        check_writable(ctx.results_dir)
        sweep_mod.preflight(ctx, machine)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rounds = ",".join(str(i) for i in range(ctx.repeats))
    rungs = ",".join(str(r.index) for r in lad.rungs)
    launch = overrides + [f"+ladder={name}", f"sweep.id={ctx.sweep_id}", f"sweep.round={rounds}", f"sweep.rung={rungs}"]
    code = cli.hydra_command(launch, multirun=True, task=sweep_job)
    _auto_compact(ctx.results_dir)
    _print_table(ctx)
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


def _context(name, lad, overrides, user_keys, sweep_id) -> sweep_mod.SweepContext:
    """Compose the settings once (defaults + overrides) with Hydra's compose API."""
    cfg = cli.compose_settings(overrides)
    settings = cli.plain_settings(cfg)
    parsed = config_mod.from_dict(settings)
    if parsed.sweep.repeats < 1:
        raise ValueError(f"sweep.repeats={parsed.sweep.repeats} must be at least 1 (each rung is measured that many times)")
    return sweep_mod.SweepContext(sweep_id=sweep_id, ladder=lad, settings=settings, user_keys=frozenset(user_keys),
                                  repeats=parsed.sweep.repeats, rerun=parsed.sweep.rerun)


_MACHINE = None


def _machine():
    global _MACHINE
    if _MACHINE is None:
        from harness.runner import Machine

        _MACHINE = Machine.detect()
    return _MACHINE


def sweep_job(cfg) -> None:
    """One Hydra job: one rung of one round."""
    from hydra.core.hydra_config import HydraConfig

    from harness.console import console
    from harness.progress import RunProgress

    hc = HydraConfig.get()
    name = hc.runtime.choices.get("ladder")
    overrides = [o for o in hc.overrides.task if not o.startswith(("+ladder=", "ladder="))]
    user_keys = {k for k in map(cli.override_key, overrides) if k} - INTERNAL_KEYS
    rung, round_ = int(cfg.sweep.rung), int(cfg.sweep.round)
    try:
        lad = ladder_mod.load(name)
        settings = cli.plain_settings(cfg)
        ctx = sweep_mod.SweepContext(sweep_id=str(cfg.sweep.id), ladder=lad, settings=settings,
                                     user_keys=frozenset(user_keys), repeats=int(cfg.sweep.repeats), rerun=bool(cfg.sweep.rerun))
        label = f"[rung {rung + 1}/{len(lad.rungs)}" + (f", round {round_ + 1}/{ctx.repeats}]" if ctx.repeats > 1 else "]")
        change = lad.rungs[rung].change("full") if rung else "baseline"
        progress = RunProgress(console, f"{label} {change}")

        def on_start(resolved, dropped):
            note = f" (without the changes of failed rungs {sorted(dropped)})" if dropped else ""
            progress.label = f"{label} {lad.rungs[rung].change(resolved.size) or 'baseline'}{note}"

        with progress:
            outcome = sweep_mod.run_rung(ctx, rung, round_, _machine(), on_start, progress.update)
        console.print(_outcome_line(progress.label, outcome))
    except Exception as exc:  # a rung the parent could not even start: say so, go on with the next
        console.print(f"[red]rung {rung} could not run:[/] {exc}")
        cli.set_exit_code(1)


def _outcome_line(label: str, outcome: sweep_mod.RungOutcome) -> str:
    rec = outcome.record
    if rec is None:
        return f"{label}: not run: {outcome.message}"
    if rec.status != "ok":
        why = (rec.error or "").strip().splitlines()
        return f"{label}: [red]{rec.status}[/] ({outcome.how}) {why[-1][:160] if why else ''}"
    return (f"{label}: [green]ok[/] ({outcome.how}) {rec.samples_per_s:.2f} samples/s, step p50 {rec.step_ms_p50:.1f} ms, "
            f"data wait {100 * (rec.data_wait_frac or 0):.0f}%")


def _print_table(ctx: sweep_mod.SweepContext) -> None:
    from harness.analysis import table as table_mod
    from harness.store import load_runs

    try:
        table = table_mod.build_table(load_runs(ctx.results_dir, sweep=ctx.sweep_id), ctx.sweep_id)
    except ValueError as exc:
        print(f"no table: {exc}", file=sys.stderr)
        return
    print()
    print(table_mod.render(table, "md"))
    print(f"Again from the store: python -m harness table --results {ctx.results_dir} --sweep {ctx.sweep_id}")
