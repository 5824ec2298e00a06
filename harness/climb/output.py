"""What a climb leaves behind: the trajectory table, the ladder file of its best settings, the commands it
prints (each runs as printed)."""

from __future__ import annotations

import math
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from harness import shell
from harness.climb.ascent import ACCEPTED, ClimbResult, Step
from harness.config import ladder_file as written
from harness.config import workload as workloads_mod
from harness.names import display_name
from harness.analysis.stats.speedup import band_text

if TYPE_CHECKING:
    from harness.analysis.stats.speedup import Ratio



def training_note(key: str, before: Any, after: Any) -> str:
    """What an accepted change does to the training itself ("" when it only changes speed)."""
    if key == "batch_size":
        k = after / before
        return (f"batch_size {before} -> {after}: each step sees {k:g}x the samples; scale the learning rate "
                f"(linear rule: lr x {k:g}, with warm-up) and check that the model still converges")
    if key == "precision" and after != "32":
        return (f"precision={after}: lower-precision arithmetic; compare the loss curve and final accuracy "
                "with fp32 before adopting it")
    if key == "tf32" and after:
        return "tf32=true: matmuls and convolutions in TF32 (10-bit mantissa); check the accuracy"
    return ""


def format_value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return "null" if value is None else str(value)


def _band(r: Ratio | None) -> str:
    return band_text(r)


TRAJECTORY_HEADER = ("step", "pass", "knob", "value", "vs incumbent [95% band]", "runs", "decision", "why")


def trajectory_table(result: ClimbResult) -> str:
    """The trajectory as a markdown table: one row per candidate tried."""
    lines = ["| " + " | ".join(TRAJECTORY_HEADER) + " |", "|" + "---|" * len(TRAJECTORY_HEADER)]
    for s in result.steps:
        runs = f"{s.runs[0]}+{s.runs[1]}" + (f" ({s.cached} cached)" if s.cached else "")
        value = f"{format_value(s.before)} -> {format_value(s.value)}" + "".join(
            f" (with {k}={format_value(v)})" for k, v in s.enabling)
        decision = s.outcome if s.outcome != ACCEPTED else "accepted, not kept" if s.step in result.dropped else \
            f"**{s.outcome}**"
        cells = (str(s.step), str(s.pass_), s.key, value, _band(s.ratio), runs, decision, s.why)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def total(result: ClimbResult) -> tuple[float, float, float] | None:
    """What the accepted steps say together (None when nothing was accepted): the product of their ratios, and
    its band, each step's band measured again after it was accepted where there is one (the accepting runs
    overstate a winner). The steps are measured apart, so their errors add on the log scale as independent
    errors do, in quadrature, each side of the band on its own; multiplying the band ends would stack every
    step's worst case at once, a range too wide to say anything. The start and the best settings were never
    measured side by side: a direct comparison (the ladder's sweep) is the better figure."""
    if not result.kept:
        return None
    bands = [s.confirmed or s.ratio for s in result.kept]
    value = math.prod(r.value for r in bands)
    down = math.sqrt(sum(math.log(r.value / r.low) ** 2 for r in bands if r.low > 0))
    up = math.sqrt(sum(math.log(r.high / r.value) ** 2 for r in bands if r.value > 0))
    return value, value * math.exp(-down), value * math.exp(up)


def ladder_file(result: ClimbResult, workload: str, base: dict, climb_id: str, hardware: str,
                workload_words: list[str] | None = None, shown_as: str = "") -> dict:
    """The best settings as a ladder (baseline = the start, one rung per accepted change), as the mapping
    ``harness.config.ladder.parse`` reads. A rung's claim is the band of the runs that measured the change once
    more after it was accepted, never of those that accepted it (the winner's curse); no claim without them. A
    workload that is not a built-in is only named by the ladder: ``workload_words`` (the overrides and config
    folders that make it) go in its notes, ``shown_as`` (its model, for ``custom``) in its description."""
    rungs = []
    for s in result.kept:
        parts = s.confirmed_parts if s.confirmed is not None else ()
        ratios = parts if len(parts) == len(s.changes) else (None,) * len(s.enabling) + (s.confirmed,)
        for (key, value), r, against in zip(s.changes, ratios, ("the incumbent",) * len(s.enabling) + (
                "the rung before" if s.enabling else "the incumbent",)):
            rung: dict[str, Any] = {"set": {key: value}}
            if r is not None:
                rung["claim"] = [round(r.low, 3), round(r.high, 3)]
                rung["source"] = (f"climb {climb_id} step {s.step}: measured again after it was accepted, "
                                  f"{r.value:.3f}x [{r.low:.3f}-{r.high:.3f}] against {against}, "
                                  f"{s.runs[0]}+{s.runs[1]} runs")
            elif key == s.key:
                rung["note"] = "no claim: not measured again after it was accepted (the winning runs overstate it)"
            if (key, value) in s.enabling:
                rung["note"] = f"only to fit {s.key}={format_value(s.value)}, which ran out of memory without it"
            rungs.append(rung)
    out: dict[str, Any] = {
        "description": f"Fastest settings `climb` found{f' for {shown_as}' if shown_as else ''} on {hardware}: "
                       f"{len(rungs)} accepted change(s)",
        "guide": f"measured by python -m harness climb (sweep {climb_id})",
        "workload": workload,
        "base": dict(base),
        "rungs": rungs,
    }
    notes = [n for n in (training_note(s.key, s.before, s.value) for s in result.kept) if n]
    if workload_words:  # the ladder names the workload; what it is lives in these words, given to every re-run
        notes.append(f"workload {workload} as measured: {' '.join(shlex.quote(w) for w in workload_words)} "
                     "(give these to `python -m harness sweep +ladder=...`)")
    t = total(result)
    if t is not None:  # not a total claim: the start and the end were never measured side by side
        notes.append(f"the accepted steps together: {t[0]:.2f}x (band {t[1]:.2f}-{t[2]:.2f}x); this sweep's "
                     "x baseline measures the whole climb directly")
    if notes:
        out["notes"] = notes
    return out


def step_line(s: Step) -> str:
    """One decided step as a line of rich markup: the change, its ratio to the incumbent, the outcome, why."""
    colour = {"accepted": "green", "oom": "red", "failed": "red", "not run": "yellow"}.get(s.outcome, "")
    outcome = f"[{colour}]{s.outcome}[/]" if colour else s.outcome
    change = ", ".join(f"{k}={format_value(v)}" for k, v in s.changes)
    return (f"step {s.step}: {escape(change)} vs incumbent "
            f"{_band(s.ratio)}: {outcome} ({escape(s.why)})")


# ------------------------------------------------------------------------------------------
# the ladder file


# ------------------------------------------------------------------------------------------
# the end of a climb


def report(result: ClimbResult, settings: dict, start, env: dict, climb_id: str, used_s: float,
           budget_s: float, given: list[str], earlier_s: float = 0.0) -> None:
    """Write the ladder of the best settings and print the trajectory, the best settings and the commands that
    re-run them (``start``: the resolved start settings, a RunConfig; ``given``: the words the climb was given,
    less its ``climb.*`` settings; ``earlier_s`` of ``used_s`` were spent by earlier runs of this climb)."""
    base = written.ladder_base(settings)
    workload = start.workload.name
    shown = display_name(workload, start.workload.model_node)
    name = written.ladder_name(start.workload, start.device, base)
    hardware = f"{start.device} {env.get('gpu_name') or env.get('cpu_model')} ({env.get('cpu_count')} CPUs)"
    own = not workloads_mod.is_builtin(start.workload)
    mapping = ladder_file(result, workload, base, climb_id, hardware, written.workload_only(given) if own else None,
                          shown if shown != workload else "")
    path = written.write_ladder(mapping, name, start.results_dir, tuple(shell.config_dirs_of(given or [])))
    print()
    print(f"#### climb {climb_id}: {shown} ({start.size}) on {hardware}")
    print()
    print(trajectory_table(result))
    print()
    earlier = f" ({earlier_s / 60:.1f} of them before it resumed)" if earlier_s else ""
    print(f"Stopped: {result.stopped}. Took {used_s / 60:.1f}{earlier} of {budget_s / 60:g} min.")
    for line in best_lines(result, mapping, given):
        print(line)
    for line in rerun_lines(name, path, start, climb_id, given):
        print(line)
    print()


def best_lines(result: ClimbResult, mapping: dict, given: list[str]) -> list[str]:
    """The best settings found, what they change in the training, and the command that runs them: the words the
    climb was given, with the accepted changes in place of what they change."""
    product = total(result)
    changes = {k: v for s in result.kept for k, v in s.changes}
    end = [f"End check: {result.final_why}."] if result.final_why else []
    side = result.final if result.final is not None and not result.dropped else None
    if product is None:
        lines = end + ["Nothing held as faster beyond noise: the start settings stay the best found." if result.accepted
                       else "Nothing was faster beyond noise: the start settings stay the best found."]
    elif side is not None:
        lines = end + [f"Best: {side.value:.2f}x over the start, band {side.low:.2f}-{side.high:.2f}x (the start and "
                       "the best measured side by side): " + ", ".join(f"{k}={format_value(v)}"
                                                                     for k, v in changes.items())]
    else:
        lines = end + [f"Best: {product[0]:.2f}x over the start, band {product[1]:.2f}-{product[2]:.2f}x (the kept "
                       "steps together; the ladder's sweep below compares the start and the best directly): "
                       + ", ".join(f"{k}={format_value(v)}" for k, v in changes.items())]
    notes = [note for note in mapping.get("notes", []) if not note.startswith("workload ")]
    lines += [f"- changes the training: {note}" for note in notes]
    best = shell.command("run", *shell.without(given, changes), *(shell.override(k, v) for k, v in changes.items()))
    return lines + [f"Best command: {best}"]


def rerun_lines(name: str, path: Path, start, climb_id: str, given: list[str]) -> list[str]:
    """Where the ladder is, and the commands that re-run it, gate CI on it and show every run: complete, with the
    workload's overrides and config folders the climb was given."""
    rerun = shell.command("sweep", f"+ladder={name}", *written.workload_words(given))
    results = [] if start.results_dir == "results" else ["--results", start.results_dir]
    save = shell.command("baseline", "save", name, "--sweep", "latest", *results)
    return [f"Ladder written to {path}; re-run it (from the store, in seconds): {rerun}",
            f"Gate CI on it: {rerun} && {save}",
            f"Every run: {shell.command('table', '--results', start.results_dir, '--sweep', climb_id)}"]
