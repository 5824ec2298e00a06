"""End to end, fresh processes: ``python -m harness run`` as a user runs it (its parent included) against the plain
loop in a process of its own. Paired (>= 2 CPUs): each side pinned to one half of the CPUs while a reference plain
loop steps on the other half, its speed read over the reference's in the side's own window; sequential otherwise."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

from harness.store import load_runs

from .common import ENTRY, REPO, env

MIN_STEPS_IN_WINDOW = 5


def _pinned(cpus: set[int] | None):
    """For ``preexec_fn``: the new process (and all it starts) runs on ``cpus`` only."""
    return None if cpus is None else (lambda: os.sched_setaffinity(0, cpus))


def cpu_halves() -> tuple[set[int], set[int]] | None:
    """This process's CPUs split in two equal, disjoint halves (an odd one left out); None below 2 CPUs."""
    cpus = sorted(os.sched_getaffinity(0))
    half = len(cpus) // 2
    return (set(cpus[:half]), set(cpus[half:2 * half])) if half else None


def harness_run(settings: list[str], results: Path, cpus: set[int] | None = None) -> dict:
    """One ``python -m harness run``: samples/s, its window and the parent's CPU share in it, from its stored record."""
    done = subprocess.run([sys.executable, "-m", "harness", "run", *settings, f"results_dir={results}"], cwd=REPO,
                          capture_output=True, text=True, env=env(), preexec_fn=_pinned(cpus))
    if done.returncode != 0:
        sys.exit(f"the harness run failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    run = load_runs(results).sort_values("timestamp").iloc[-1]
    parent = run["parent_cpu_pct"]
    return {"samples_per_s": float(run["samples_per_s"]), "step_ms": float(run["step_ms_mean"]),
            "parent_cpu_pct": None if parent is None or parent != parent else float(parent),
            "window": (float(run["window_start_unix"]), float(run["measured_s"])),
            "step_s": float(run["measured_s"]) / int(run["measured_steps"])}


def plain_run(settings: list[str], cpus: set[int] | None = None) -> dict:
    """The plain loop's fixed window (the harness's warm-up and steps), in a fresh process of its own: samples/s,
    the window (UNIX start, seconds) and seconds a step."""
    # a session of its own, as the harness's child has: with the kernel's autogroup scheduling a session is a
    # scheduling group, so under other load both sides get the same share of the CPUs
    done = subprocess.run([sys.executable, str(ENTRY), "--plain", json.dumps(settings)], cwd=REPO,
                          capture_output=True, text=True, env=env(), start_new_session=True, preexec_fn=_pinned(cpus))
    if done.returncode != 0:
        sys.exit(f"the plain loop failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return {**out, "window": tuple(out["window"]), "step_ms": out["step_s"] * 1000.0, "parent_cpu_pct": None}


class Follower:
    """A plain loop in its own process on ``cpus``, stepping from the moment it is ready until :meth:`stop`,
    keeping each step's end time: its speed can then be read over any window that fell inside."""

    def __init__(self, settings: list[str], cpus: set[int] | None):
        self.proc = subprocess.Popen([sys.executable, str(ENTRY), "--follow", json.dumps(settings)],
                                     cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(),
                                     start_new_session=True, preexec_fn=_pinned(cpus))
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            self.proc.kill()
            sys.exit(f"the plain loop did not start:\n{self.proc.stderr.read()[-3000:]}")

    def stop(self) -> dict:
        """Its steps: {"first": the first step's start, "ends": every step's end}, UNIX seconds."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGUSR1)
        out, err = self.proc.communicate(timeout=600)
        if self.proc.returncode != 0:
            sys.exit(f"the plain loop failed (exit {self.proc.returncode}):\n{err[-3000:]}")
        return json.loads(out.strip().splitlines()[-1])


def seconds_per_step_within(steps: dict, window: tuple[float, float]) -> float:
    """The follower's mean step time over the steps that began and ended inside ``window`` (UNIX start, length)."""
    start, end = window[0], window[0] + window[1]
    ends = steps["ends"]
    inside = [i for i, e in enumerate(ends) if e <= end and (ends[i - 1] if i else steps["first"]) >= start]
    if len(inside) < MIN_STEPS_IN_WINDOW:
        raise ValueError(f"only {len(inside)} plain steps fell inside the {window[1]:.1f} s window "
                         f"(at least {MIN_STEPS_IN_WINDOW}): measure more steps")
    first, last = inside[0], inside[-1]
    return (ends[last] - (ends[first - 1] if first else steps["first"])) / len(inside)


def against_reference(settings: list[str], results: Path, kind: str, cpus: set[int], reference_cpus: set[int]) -> dict:
    """One side of a paired round: ``kind`` ("harness", or "plain": the plain loop's fixed window) on ``cpus`` while a
    reference plain loop steps on ``reference_cpus``. Adds "speed": the side's throughput over the reference's in
    the side's window (the machine's speed at that moment divides out)."""
    reference = Follower(settings, reference_cpus)
    try:
        side = harness_run(settings, results, cpus) if kind == "harness" else plain_run(settings, cpus)
    finally:
        steps = reference.stop()
    return {**side, "speed": seconds_per_step_within(steps, side["window"]) / side["step_s"]}


def paired_round(settings: list[str], results: Path, halves: tuple[set[int], set[int]], flip: bool,
                 measured: str = "harness") -> tuple[float, list[dict], list[dict]]:
    """One round: ``measured`` (the harness; "plain" for the A/A control) and the plain loop, each once on either
    half against a reference on the other. Returns (measured/plain throughput: the geometric mean of the two halves'
    speed ratios, the measured side's runs, the plain side's runs). ``flip`` puts the plain loop first."""
    a, b = halves
    roles = ("plain", "measured") if flip else ("measured", "plain")
    runs: dict[str, list[dict]] = {"measured": [], "plain": []}
    for cpus, reference in ((a, b), (b, a)):
        for role in roles:
            kind = measured if role == "measured" else "plain"
            runs[role].append(against_reference(settings, results, kind, cpus, reference))
    speed = {role: math.prod(r["speed"] for r in rs) ** (1 / len(rs)) for role, rs in runs.items()}
    return speed["measured"] / speed["plain"], runs["measured"], runs["plain"]


def sequential_round(settings: list[str], results: Path, flip: bool) -> tuple[float, list[dict], str]:
    """One round, one fresh process after the other (``flip``: the plain loop first): (harness/plain throughput,
    the harness's runs, the line's detail)."""
    if flip:
        plain, harness = plain_run(settings), harness_run(settings, results)
    else:
        harness, plain = harness_run(settings, results), plain_run(settings)
    ratio = harness["samples_per_s"] / plain["samples_per_s"]
    return ratio, [harness], (f"harness {harness['samples_per_s']:8.2f} samples/s, plain "
                              f"{plain['samples_per_s']:8.2f} samples/s, ratio {ratio:.3f}")
