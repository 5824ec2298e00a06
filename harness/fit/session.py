"""One fit from start to end: check the settings, search the largest size that fits (each size a fresh process),
write the sizes that fit as a ladder, measure it with a sweep's rounds, print the curve.

Every search run is a record of the fit's own sweep (ladder ``fit``, no rung, ``change`` naming its size), so
``table --sweep <fit id>`` lists them; the sweep of the sizes that fit copies its first round from them (a round is
copied whole from one earlier sweep: ``harness.sweeps.rungs.round_source``) and measures its other rounds.
"""

from __future__ import annotations

import dataclasses
import sys

from rich.markup import escape

from harness import config as config_mod
from harness import shell
from harness.session.events import Display
from harness.config import ladder as ladder_mod
from harness.config import ladder_file as written
from harness.fit import state as state_mod
from harness.fit.axes import BATCH, Axis, axis_range
from harness.fit.search import FitConfig, check
from harness.records.sinks import Pipeline
from harness.session import engine
from harness.session import runner as session_runner
from harness.session.events import OUTCOMES, Event, Events
from harness.session.probe import Probe, Search
from harness.names import display_name
from harness.run.parent import runner
from harness.store import new_id
from harness.sweeps import loop
from harness.session.events import Listener
from harness.sweeps import rungs as sweep_mod
from harness.workload import applicability
from harness.analysis.views import fit_curve
from harness.config import workload as workloads_mod

LADDER_NAME = "fit"  # the `ladder` of the search's records


@dataclasses.dataclass
class Fit:
    """One fit's start, where it runs and what it has done (``state``, saved after every size)."""

    start: config_mod.RunConfig
    settings: dict
    machine: runner.Machine
    env: dict
    env_key: str
    state: state_mod.FitState
    display: Display
    sweep_display: Listener
    low: int
    high: int
    axis: Axis = BATCH


def run_fit(settings: dict, options: FitConfig, display: Display, sweep_display: Listener,
            given: list[str] | None = None) -> int:
    """Fit from ``settings`` (the composed run settings) under ``options``. ``given``: the words the fit was given,
    less its ``fit.*`` settings (the commands it prints are made of them). Exit code: 0; 1 when no size fits or a
    run of the sweep could not start; 2 for settings that cannot start (nothing measured then)."""
    try:
        fit = _begin(settings, options, display, sweep_display)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    low, high, axis = fit.low, fit.high, fit.axis
    display.say(escape(f"fit {fit.state.fit_id}: {_shown(fit.start)} ({fit.start.size}) on {fit.start.device}"
                f"{_limit_text(fit.start)}: {axis.label(low)}, doubling until out of memory or {axis.label(high)} "
                f"(fit.max), then bisecting{_steps_text(axis)}; each size a fresh process"))
    if fit.state.tried:
        display.say(f"resuming fit {fit.state.fit_id}: {len(fit.state.tried)} size(s) already tried are taken from "
                    "the store, none measured again")
    top = f"fit.max={high}" if axis is BATCH else f"fit.max ({axis.label(high)})"
    policy = SizeSearch(fit, Probe(low, high, axis.label, top))
    engine.run(policy, Events(SearchLines(display, axis)))
    found = policy.probe.found
    display.say(escape(f"search: {found.stopped} ({len(found.tried)} run(s))"))
    if not found.fits:
        print(f"No {axis.key} fits: {found.stopped}. Every run: "
              f"{shell.command('table', '--results', fit.start.results_dir, '--sweep', fit.state.fit_id)}")
        return 1
    return _measure_curve(fit, found, given or [])


def _begin(settings: dict, options: FitConfig, display: Display, sweep_display: Listener) -> Fit:
    """Everything that may refuse the fit, before anything is measured (ValueError, OSError)."""
    check(options)
    flat = config_mod.flatten(settings)
    prepared = session_runner.prepare(config_mod.from_dict(flat if options.axis != "batch" else
                                                           {**flat, BATCH.key: options.min}),
                                      "`python -m harness fit`", display.say)
    start, (env, env_key) = prepared.resolved, prepared.environment
    axis, low, high = axis_range(start, options)
    reason = applicability.skip_reason(start)
    if reason:  # nothing of the search could run here: said once, before anything starts
        raise ValueError(f"these settings cannot run here: {reason}")
    key = state_mod.fit_key(config_mod.config_hash(start), env_key, low, high, options.axis)
    fit_state = (state_mod.load(start.results_dir, key)
                 or state_mod.FitState(key=key, fit_id=new_id(f"{LADDER_NAME}-")))
    return Fit(start, settings, runner.Machine.detect(), env, env_key, fit_state, display, sweep_display,
               low, high, axis)


def _steps_text(axis: Axis) -> str:
    if axis.name == "sequence":
        return f" (lengths in steps of {axis.step} tokens)"
    return "" if axis is BATCH else f" (sides in steps of {axis.step} voxels, the start's aspect)"


def _search_context(fit: Fit, size: int) -> sweep_mod.SweepContext:
    """The settings of one size as a one-rung ladder over the start (as the sweep of the sizes will build them)."""
    rungs = (ladder_mod.Rung(0, ""), ladder_mod.Rung(1, fit.axis.key, fit.axis.value(size)))
    ladder = ladder_mod.Ladder(name=LADDER_NAME, description="", guide="", workload=fit.start.workload.name,
                               base={}, rungs=rungs)
    return sweep_mod.SweepContext(sweep_id=fit.state.fit_id, ladder=ladder, settings=fit.settings,
                                  user_keys=frozenset({"workload"}))


@dataclasses.dataclass
class SizeTurn:
    """One size of the search: a turn of the fit's session."""

    size: int
    label: str  # ``[batch_size=8]``, escaped for rich
    known: str = ""  # its status, when an earlier run of the fit tried it


class SizeSearch:
    """The fit's search as a policy over the session engine: one size a round, the next decided by the
    :class:`Probe` from the statuses so far; a size the fit's state holds is taken from there, not measured again."""

    remeasure_busy = False  # a busy run still says whether the size fits
    keep_going = False  # the search cannot go on without its answer

    def __init__(self, fit: Fit, probe: Probe):
        self.fit, self.probe = fit, probe

    def next_turns(self, round_: int, events: Events) -> list[SizeTurn] | None:
        size = self.probe.next()
        return None if size is None else [SizeTurn(size, escape(f"[{self.fit.axis.label(size)}]"))]

    def held(self, turn: SizeTurn) -> bool:
        turn.known = self.fit.state.status(turn.size) or ""
        if turn.known:
            self.probe.tell(turn.known)
        return bool(turn.known)

    def measure(self, turn: SizeTurn, again: bool, hooks: engine.Hooks) -> session_runner.Outcome:
        """One size, measured in a fresh process; its record stored and its status in the fit's state."""
        fit = self.fit
        cfg = sweep_mod.rung_config(_search_context(fit, turn.size), 1, fit.machine)
        hooks.started(cfg)
        # rung: the size's place in the search's order (as a climb's steps), so `table --sweep <fit id>` lists them
        labels = dict(sweep_id=fit.state.fit_id, ladder=LADDER_NAME, rung=len(fit.state.tried), round=0,
                      change=fit.axis.label(turn.size))
        outcome = session_runner.run_one(cfg, labels, Pipeline.to_store(cfg.results_dir), None, (fit.env, fit.env_key),
                                         hooks.progress)
        record = outcome.record
        fit.state.tried[str(turn.size)] = [record.status, record.run_id]
        state_mod.save(fit.start.results_dir, fit.state)
        self.probe.tell(record.status)
        return outcome

    def look(self, rounds: int, events: Events) -> bool:
        return True


class SearchLines:
    """The search as a person sees it (a listener of its events): a status line while a size runs, then its
    status and speed."""

    def __init__(self, display: Display, axis: Axis):
        self.display, self.axis = display, axis
        self.shown = self.progress = None

    def on(self, event: Event) -> None:
        turn = event.turn
        if event.kind == "started":
            self.shown = self.display.progress(turn.label)
            self.progress = self.shown.__enter__()
        elif event.kind == "progress" and self.progress is not None:
            self.progress.update(event.info, event.elapsed)
        elif event.kind in OUTCOMES or event.kind == "failed":
            shown, self.shown, self.progress = self.shown, None, None
            if shown is not None:
                shown.__exit__(None, None, None)
            if event.outcome is not None:
                self.display.say(self._status(turn, event.outcome.record))
        elif event.kind == "already":
            self.display.say(escape(f"[{self.axis.label(turn.size)}] {turn.known} (tried already)"))

    def _status(self, turn: SizeTurn, record) -> str:
        if record.status == "ok":
            return f"{turn.label} ok: {_speed_text(self.axis, turn.size, record.samples_per_s)}"
        return f"{turn.label} {record.status}: {escape(_last_line(record.error)[:160])}"


def _measure_curve(fit: Fit, found: Search, given: list[str]) -> int:
    """The sizes that fit as a ladder, measured as a sweep (resumed where an earlier run of the fit stopped);
    then the curve and the commands that show it again."""
    start = fit.start
    name = _write_ladder(fit, found, given)
    ladder = ladder_mod.load(name, start.results_dir, shell.config_dirs_of(given))
    fit.state.sweep_id = fit.state.sweep_id if fit.state.ladder == name else new_id(f"{name}-")
    fit.state.ladder = name
    state_mod.save(start.results_dir, fit.state)
    ctx = sweep_mod.SweepContext(sweep_id=fit.state.sweep_id, ladder=ladder, settings=fit.settings,
                                 user_keys=frozenset({"workload"}), repeats=start.sweep.repeats,
                                 max_repeats=start.sweep.max_repeats, budget_min=start.sweep.budget_min,
                                 remeasure_busy=start.sweep.remeasure_busy)
    fit.display.say(escape(f"measuring the {len(found.fits)} size(s) that fit: sweep {ctx.sweep_id} of ladder {name}"))
    code = loop.run_ladder(ctx, fit.machine, fit.sweep_display)
    loop.auto_compact(start.results_dir)
    print()
    axis = fit.axis
    units = None if axis is BATCH else (axis.unit, [axis.units(k) for k in found.fits])
    for line in fit_curve.report_lines(start.results_dir, ctx.sweep_id, [axis.value(k) for k in found.fits],
                                       found.stopped, axis.key, units):
        print(line)
    rerun = shell.command("sweep", f"+ladder={name}", *written.workload_words(given))
    print(f"Ladder written to {ladder.path}; re-run it (from the store): {rerun}")
    print(f"Every run: {shell.command('table', '--results', start.results_dir, '--sweep', ctx.sweep_id)}; the search: "
          f"{shell.command('table', '--results', start.results_dir, '--sweep', fit.state.fit_id)}; plots: "
          f"{shell.command('plot', '--results', start.results_dir, '--sweep', ctx.sweep_id)}")
    return code


def _write_ladder(fit: Fit, found: Search, given: list[str]) -> str:
    """``<results_dir>/ladders/fit-WORKLOAD-DEVICE-HASH.yaml``: the start's settings with the smallest size that fits
    as its baseline, one rung per larger size that fits; its name."""
    start = fit.start
    axis = fit.axis
    base = {k: v for k, v in written.ladder_base(fit.settings).items() if k != axis.key}
    sizes = [axis.value(k) for k in found.fits]
    bounds = {"fit.min": fit.low, "fit.max": fit.high, **({} if axis is BATCH else {"fit.axis": axis.name})}
    name = written.ladder_name(start.workload, start.device, {**base, **bounds}, "fit")
    hardware = f"{start.device} {fit.env.get('gpu_name') or fit.env.get('cpu_model')}{_limit_text(start)}"
    notes = [f"the search ({fit.state.fit_id}): {found.stopped}; tried "
             + ", ".join(f"{ladder_mod.format_value(axis.value(k))} {status}" for k, status in found.tried)]
    own = written.workload_only(given)
    if own and not _builtin(start):
        notes.append(f"workload {start.workload.name} as measured: {' '.join(own)} (give these to "
                     "`python -m harness sweep +ladder=...`)")
    mapping = {
        "description": f"The {axis.key}s that fit {_shown(start)} on {hardware}: "
                       f"{', '.join(map(ladder_mod.format_value, sizes))} (the largest: "
                       f"{ladder_mod.format_value(sizes[-1])})",
        "guide": f"measured by python -m harness fit (search {fit.state.fit_id})",
        "workload": start.workload.name,
        "base": {**base, axis.key: sizes[0]},
        "rungs": [{"set": {axis.key: size}} for size in sizes[1:]],
        "notes": notes,
    }
    written.write_ladder(mapping, name, start.results_dir, tuple(shell.config_dirs_of(given)), by="fit")
    return name


def _builtin(start: config_mod.RunConfig) -> bool:
    return workloads_mod.is_builtin(start.workload)


def _shown(start: config_mod.RunConfig) -> str:
    return display_name(start.workload.name, start.workload.model)


def _limit_text(start: config_mod.RunConfig) -> str:
    limit = start.memory.limit_gb
    return f", memory capped at {limit:g} GiB (memory.limit_gb)" if limit is not None else ""


def _speed_text(axis: Axis, k: int, samples_per_s: float) -> str:
    """samples/s, and on the patch axis the units a second too (samples/s of two patch sizes do not compare)."""
    text = f"{samples_per_s:.2f} samples/s"
    return text if axis is BATCH else f"{text}, {samples_per_s * axis.units(k):.3g} {axis.unit}/s"


def _last_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[-1] if lines else ""
