"""Where a run's wall time goes, and a sweep's duty cycle (its measured windows over its wall time).

A run's wall time, from the parent starting the child to every one of its processes gone, splits at the child's
progress markers (``phase_marks`` in its result: UNIX times, comparable with the parent's on one machine):

  launch    the parent's start of the child -> "build": a fresh interpreter's start and imports, or the fork
  model     "build" -> "data": the FLOPs count, the model and the optimizer built with every knob applied; split
            into the workload's imports ("build" -> "imported": its model's, loss's and dataset's modules), the
            device's context ("imported" -> "context": on one CUDA device the main thread's wait for the context,
            which a thread of its own creates while the imports run, its own time apart as "context_began" ->
            "context_ready"; under DDP the context made then, and the process group's joining), the FLOP count
            ("context" -> "flops": once for a model and input, kept in the sweep's folder and the harness's
            cache, the later runs read it), the build ("flops" ->
            "built") and the move to the device ("built" -> "on_device"); the rest (the optimizer, a compiler's
            wrapper) is the model phase less those
  data      "data" -> "warmup": the data set built and the loader started (the one batch of measure.mode=model)
  warm-up   "warmup" -> "measure": the warm-up steps (the record's first_step_s and compile_s are within it); split
            into its first step (the record's first_step_s: cuDNN's engines loaded and benchmarked, a compile) and
            the rest (the other steps, the collection before them)
  window    the measured window (the record's measured_s)
  teardown  "measured" -> gone: the closing reads, the loader's end, the result written, every process gone

and the parent's own time between runs (``phase_gap_s``: from the previous run of the sweep gone to this one's
start: the store, the next rung's settings, the cache). A phase whose markers were not reached (a run that failed
early) is left empty.
"""

from __future__ import annotations

import statistics
from typing import Any, Iterable

# (record field, the mark it starts at, the mark it ends at); "spawn" and "gone" are the parent's own
PHASES = (
    ("phase_launch_s", "spawn", "build"),
    ("phase_model_s", "build", "data"),
    ("phase_data_s", "data", "warmup"),
    ("phase_warmup_s", "warmup", "measure"),
    ("phase_teardown_s", "measured", "gone"),
    ("phase_imports_s", "build", "imported"),
    ("phase_context_s", "imported", "context"),
    ("phase_flops_s", "context", "flops"),
    ("phase_build_s", "flops", "built"),
    ("phase_to_device_s", "built", "on_device"),
    ("phase_context_thread_s", "context_began", "context_ready"),
)
# a forked run that waited at most this for its launcher found it ready (the wait is then the socket's round trip)
READY_WAIT_S = 0.5
# the model phase's parts and the warm-up's, as benchmarks/duty_cycle.py shows them
PARTS = (("imports", "phase_imports_s"), ("context (waited for)", "phase_context_s"),
         ("context (its thread, beside the imports)", "phase_context_thread_s"), ("FLOP count", "phase_flops_s"),
         ("build", "phase_build_s"), ("to device", "phase_to_device_s"), ("first step", "phase_first_step_s"),
         ("other warm-up steps", "phase_warmup_rest_s"))
SHOWN = (("launch", "phase_launch_s"), ("model", "phase_model_s"), ("data", "phase_data_s"),
         ("warm-up", "phase_warmup_s"), ("window", "measured_s"), ("teardown", "phase_teardown_s"))


def record_fields(marks: dict[str, float], spawned: float, gone: float, gap_s: float | None,
                  how: str, preloaded: str = "", first_step_s: float | None = None,
                  waited_s: float | None = None) -> dict[str, Any]:
    """The record's timing fields of one run: its phases (``PHASES``), its wall time, the parent's gap before it,
    how it was started ("fork" or "exec") and, forked, what its launcher had imported and how long the run waited
    for the launcher to be ready (``waited_s``)."""
    times = {**{k: float(v) for k, v in marks.items() if isinstance(v, (int, float))}, "spawn": spawned,
             "gone": gone}
    out: dict[str, Any] = {}
    for name, begin, end in PHASES:
        out[name] = max(0.0, times[end] - times[begin]) if begin in times and end in times else None
    warmup = out["phase_warmup_s"]
    out["phase_first_step_s"] = first_step_s if warmup is not None and first_step_s is not None else None
    out["phase_warmup_rest_s"] = max(0.0, warmup - first_step_s) if out["phase_first_step_s"] is not None else None
    out["phase_wall_s"] = max(0.0, gone - spawned)
    out["phase_gap_s"] = None if gap_s is None else max(0.0, gap_s)
    out["launched_by"] = how
    out["launcher_preloaded"] = preloaded if how == "fork" else ""
    out["phase_launcher_wait_s"] = max(0.0, waited_s) if how == "fork" and waited_s is not None else None
    return out


def steady(records: Iterable[Any]) -> list[Any]:
    """The runs forked from a launcher that was ready (``phase_launcher_wait_s`` at most ``READY_WAIT_S``) and that
    measured a window: a sweep's runs after its launcher's imports, what a run costs once the start is paid."""
    return [r for r in records if getattr(r, "launched_by", "") == "fork" and getattr(r, "measured_s", None)
            and getattr(r, "phase_wall_s", None) is not None
            and getattr(r, "phase_launcher_wait_s", None) is not None and r.phase_launcher_wait_s <= READY_WAIT_S]


def beyond_window_s(record: Any) -> float:
    """A run's seconds beyond its measured window: its wall time less the window, and the parent's gap before it."""
    return max(0.0, record.phase_wall_s - record.measured_s) + (getattr(record, "phase_gap_s", None) or 0.0)


def steady_cost(records: Iterable[Any]) -> str:
    """What a steady run (``steady``) cost beyond its window, in words ("" where none was steady); where some ran
    settings that had run before in the command (``seen_before``), their own mean beside it: a setting's first
    run on a machine pays its first step's one-time costs (cuDNN's engines, the GPU's kernels) again."""
    records = list(records)
    runs = steady(records)
    beyond = [beyond_window_s(r) for r in runs]
    if not beyond:
        return ""
    spread = f"; {min(beyond):.1f}-{max(beyond):.1f}" if len(beyond) > 1 else ""
    again = [beyond_window_s(r) for r in seen_before(records) if any(r is s for s in runs)]
    seen = (f"; {statistics.fmean(again):.1f} s once its settings had run (mean of {len(again)})"
            if again and len(again) < len(beyond) else "")
    return (f"a run forked from a ready launcher: {statistics.fmean(beyond):.1f} s beyond its window "
            f"(mean of {len(beyond)}{spread}){seen}")


def seen_before(runs: Iterable[Any]) -> list[Any]:
    """The runs (in the order measured) whose settings (``config_hash``) an earlier one of ``runs`` had run."""
    seen: set[Any] = set()
    out = []
    for run in runs:
        key = getattr(run, "config_hash", None)
        if key is not None and key in seen:
            out.append(run)
        seen.add(key)
    return out


def duty_cycle(records: Iterable[Any], wall_s: float) -> str:
    """One line: the measured windows' share of ``wall_s`` and where a run's time went on average (mean of the
    runs that reached each phase). ``records``: the RunRecords of the runs measured (not copied from the cache)."""
    runs = list(records)
    window = sum(r.measured_s or 0.0 for r in runs)
    share = f"{100.0 * window / wall_s:.0f}%" if wall_s > 0 else "-"
    parts = []
    for label, name in SHOWN + (("between runs", "phase_gap_s"),):
        values = [getattr(r, name) for r in runs if getattr(r, name, None) is not None]
        if values:
            parts.append(f"{label} {statistics.fmean(values):.1f}")
    where = f"; a run's seconds (mean): {', '.join(parts)}" if parts else ""
    cost = steady_cost(runs)
    return (f"duty cycle {share}: {len(runs)} run{'s' if len(runs) != 1 else ''} measured {window:.1f} s "
            f"in {wall_s:.1f} s{where}" + (f"; {cost}" if cost else ""))
