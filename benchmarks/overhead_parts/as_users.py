"""End to end, as users compare: ``python -m harness run`` against their own script, fresh processes, all CPUs.

    python benchmarks/overhead.py --as-users [--rounds 12] [--workloads resnet50,unet3d,unet3d-full] [--steps 30]
                                  [--warmup 5] [--mode model|train] [--data random|synthetic] [--labels int64|uint8]
                                  [--step-fn] [--flops]

Each round runs the harness and ``benchmarks/user_script.py`` (a training script that imports nothing of the
harness) with the same model, batch, optimizer and step counts, one after the other, each a fresh process on every
CPU, in ABBA order (harness first in odd rounds, the script first in even ones), so a drift of the machine over a
round favours neither. A round's ratio is harness samples/s over the script's. Printed: every round (with each
side's minor page faults a measured step, the harness's from its record's ``window_minor_faults_per_step``, which say
the state of its heap whatever the load), the median ratio with a distribution-free 95% band of the median (its
order-statistic interval, ``stats.median_band``), the sign count (rounds below 1 of all), and a line on the two
heaps: each side's median faults a step and the rounds in which one side took more than 5% more than the other.

``--mode`` is the harness's ``measure.mode`` and the script's: ``model`` (one batch kept in memory) or ``train`` (a
batch from the loader every step). ``--data synthetic`` gives the script the harness's own data (its synthetic
volumes or images through a DataLoader, uint8 label maps), ``random`` a batch of random numbers with int64 labels
(``train`` needs ``synthetic``). ``--flops`` has the script count its FLOPs on the meta device first, as the
harness's child does: what differs between the two processes can be taken apart one step at a time. ``--labels
uint8`` gives the random batch uint8 label maps, as the harness's own (3D workloads only); ``--step-fn`` makes the
script's step a function, whose loss and graph go when it returns (the loop written inline keeps ``loss`` until the
next step's forward).

The verdict is against 0.98 (the harness's samples/s at least 0.98 of the script's) and on agreement within 2%
(the whole band inside 0.98-1.02), from the quiet rounds only: a side during which other processes used more than
10% of the CPUs (the record's ``other_cpu_pct`` for the harness's window; the machine's busy time less the script's
own for the script) makes its round busy, printed but left out, and with fewer than five quiet rounds there is no
verdict. After the first round it says how long the rounds will take.

The full-size unet3d comparison of docs/measuring.md, the plain script there being this script with uint8 labels
and its step a function:

    python benchmarks/overhead.py --as-users --workloads unet3d-full --labels uint8 --step-fn --rounds 12
"""

from __future__ import annotations

import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from user_script import HARNESS_SETTINGS, LABEL_DTYPES, SHAPES  # benchmarks/ is on the path, as the entry's folder

from harness.store import load_runs

from .common import REPO
from .stats import MIN_ROUNDS, median_band, verdict

BUSY_PCT = 10.0  # a side during which other processes used more of the CPUs than this makes its round busy
TARGET = 0.98  # the harness's samples/s against the script's: at least this
WITHIN = 0.02  # and the two agree within this
HEAP_APART = 0.05  # a side's page faults a step this much above the other's: its heap was in another state


def harness_side(workload: str, steps: int, warmup: int, results: Path, env: dict,
                 mode: str = "model") -> tuple[float, float, float]:
    """samples/s that ``python -m harness run`` reports for the script's training, the share of the CPUs other
    processes used in its window (the record's ``other_cpu_pct``), and its minor page faults a measured step (the
    record's ``window_minor_faults_per_step``: the state of its heap, as the script's)."""
    settings = [*HARNESS_SETTINGS[workload], f"measure.mode={mode}", f"measure.steps={steps}",
                f"measure.warmup_steps={warmup}", f"results_dir={results}"]
    done = subprocess.run([sys.executable, "-m", "harness", "run", *settings], cwd=REPO, capture_output=True,
                          text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"the harness run failed (exit {done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    record = load_runs(results).sort_values("timestamp").iloc[-1]
    others = float(record.get("other_cpu_pct", math.nan))
    faults = record.get("window_minor_faults_per_step")
    return (float(record["samples_per_s"]), others if math.isfinite(others) else 0.0,
            float(faults) if faults is not None else math.nan)


def script_side(workload: str, steps: int, warmup: int, env: dict,
                script_args: tuple[str, ...] = ()) -> tuple[float, float, float]:
    """samples/s of the user's own script (``script_args``: its --mode, --data, --labels, --flops), the share of
    the CPUs other processes used while it ran (:func:`others_pct`), and its minor page faults a timed step (which
    state glibc's heap was in: a count the load does not change)."""
    before = _clocks()
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "user_script.py"), workload, "--steps",
                           str(steps), "--warmup", str(warmup), *script_args], cwd=REPO, capture_output=True,
                          text=True, env=env)
    after = _clocks()
    if done.returncode != 0:
        sys.exit(f"the user script failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return float(out["samples_per_s"]), others_pct(before, after), float(out.get("minor_faults_per_step", math.nan))


def _clocks() -> tuple[float, float, float]:
    """(wall, the machine's busy CPU seconds, this process's finished children's CPU seconds)."""
    t, kids = psutil.cpu_times(), resource.getrusage(resource.RUSAGE_CHILDREN)
    busy = sum(t) - t.idle - getattr(t, "iowait", 0.0)
    return time.monotonic(), busy, kids.ru_utime + kids.ru_stime


def others_pct(before: tuple[float, float, float], after: tuple[float, float, float],
               cpus: int | None = None) -> float:
    """The share of the CPUs (0-100) that processes other than the finished child used between two ``_clocks``."""
    wall, busy, own = (a - b for a, b in zip(after, before))
    if wall <= 0:
        return 0.0
    return max(0.0, 100.0 * (busy - own) / (wall * (cpus or os.cpu_count() or 1)))


def add_options(parser) -> None:
    """The options of ``--as-users`` beside ``benchmarks/overhead.py``'s own."""
    parser.add_argument("--mode", choices=("model", "train"), default="model",
                        help="with --as-users: the harness's measure.mode and the script's (train: with the loader)")
    parser.add_argument("--data", choices=("random", "synthetic"), default="random",
                        help="with --as-users: the script's data, random numbers or the harness's synthetic data")
    parser.add_argument("--labels", choices=LABEL_DTYPES, default="int64",
                        help="with --as-users --data random: the script's label maps' dtype (uint8: the harness's)")
    parser.add_argument("--flops", action="store_true",
                        help="with --as-users: the script counts its FLOPs on the meta device first, as the child does")
    parser.add_argument("--step-fn", action="store_true",
                        help="with --as-users: the script's step is a function (its loss and graph go when it returns)")


def check_options(parser, args) -> None:
    """A combination of ``--mode``, ``--data``, ``--labels`` and the workloads the script cannot run is a usage
    error."""
    try:
        script_options(args.mode, args.data, args.flops, args.labels, args.workloads.split(","), args.step_fn)
    except ValueError as exc:
        parser.error(str(exc))


def script_options(mode: str, data: str, flops: bool, labels: str = "int64", workloads: list[str] | None = None,
                   step_fn: bool = False) -> tuple[str, ...]:
    """The script's arguments for the harness's ``measure.mode`` and the data asked for; ValueError for a loader
    of random numbers (the harness's loader always serves its workload's own data), a workload the script does not
    know, or uint8 labels where there is no random label map."""
    if mode == "train" and data != "synthetic":
        raise ValueError("--mode train compares the loaders too: add --data synthetic")
    unknown = [w for w in workloads or [] if w not in SHAPES]
    if unknown:
        raise ValueError(f"--workloads {','.join(unknown)}: not one of {', '.join(SHAPES)}")
    if labels != "int64":
        flat = [w for w in workloads or [] if len(SHAPES[w]["shape"]) != 4]
        if data != "random" or flat:
            raise ValueError(f"--labels {labels} is for --data random with 3D label maps (unet3d, unet3d-full)"
                             + (f", not {','.join(flat)}" if flat else ""))
    return ("--mode", mode, "--data", data, *(("--labels", labels) if labels != "int64" else ()),
            *(("--flops",) if flops else ()), *(("--step-fn",) if step_fn else ()))


def as_users(workloads: list[str], rounds: int, steps: int, warmup: int, env: dict, mode: str = "model",
             data: str = "random", flops: bool = False, labels: str = "int64",
             step_fn: bool = False) -> dict[str, list]:
    """The rounds' ratios harness / script per workload, with each round's busy flag; prints every round, when the
    rounds will be done, and each workload's summary (:func:`summary`)."""
    options = script_options(mode, data, flops, labels, workloads, step_fn)
    rows: dict[str, list[tuple[float, bool]]] = {w: [] for w in workloads}
    heaps: dict[str, list[tuple[float, float]]] = {w: [] for w in workloads}  # (harness, script) faults a step
    print(f"\nEnd to end as users compare: `python -m harness run` (measure.mode={mode}) against "
          f"benchmarks/user_script.py {' '.join(options)}, fresh processes on all CPUs, ABBA order, {warmup} warm-up "
          f"+ {steps} timed steps, {rounds} rounds")
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="harness-as-users-") as tmp:
        for r in range(rounds):
            for workload in workloads:
                results = Path(tmp) / f"{workload}-{r}"
                if r % 2 == 0:
                    ours, our_others, our_faults = harness_side(workload, steps, warmup, results, env, mode)
                    theirs, their_others, faults = script_side(workload, steps, warmup, env, options)
                else:
                    theirs, their_others, faults = script_side(workload, steps, warmup, env, options)
                    ours, our_others, our_faults = harness_side(workload, steps, warmup, results, env, mode)
                busy = max(our_others, their_others) > BUSY_PCT
                rows[workload].append((ours / theirs, busy))
                heaps[workload].append((our_faults, faults))
                order = "harness first" if r % 2 == 0 else "script first"
                print(f"round {r + 1:2d} {workload:11s} harness {ours:8.2f} samples/s, script {theirs:8.2f} "
                      f"samples/s (page faults a step {our_faults:.0f} / {faults:.0f}), ratio {ours / theirs:.3f} "
                      f"({order}; others {our_others:.0f}% / "
                      f"{their_others:.0f}% of the CPUs{': busy, left out' if busy else ''})", flush=True)
            if r == 0 and rounds > 1:
                took = time.monotonic() - began
                print(f"(a round takes {took:.0f} s here: {rounds} rounds ~{rounds * took / 60:.1f} min)", flush=True)
    for workload, values in rows.items():
        summary(workload, values)
        print(heap_states(workload, heaps[workload]))
    return {w: [ratio for ratio, _ in values] for w, values in rows.items()}


def summary(workload: str, rows: list[tuple[float, bool]]) -> str:
    """Print and return one workload's line: the quiet rounds' median ratio, its 95% band, the rounds below 1, and the
    verdicts against :data:`TARGET` and on agreement within :data:`WITHIN`; no verdict while busy rounds leave fewer
    than :data:`~overhead_parts.stats.MIN_ROUNDS` quiet ones."""
    quiet = [ratio for ratio, busy in rows if not busy]
    left_out = len(rows) - len(quiet)
    busy_note = f", {left_out} busy round(s) left out" if left_out else ""
    if not quiet:
        line = f"{workload:11s} harness/script: busy, no verdict (every one of {len(rows)} rounds was busy)"
    else:
        mid, low, high = median_band(quiet)
        below = sum(v < 1.0 for v in quiet)
        line = (f"{workload:11s} harness/script: median {mid:.3f}, 95% band of the median [{low:.3f}-{high:.3f}] "
                f"(rounds {min(quiet):.3f}-{max(quiet):.3f}, {below} of {len(quiet)} quiet rounds below 1"
                f"{busy_note}): {verdict(low, high, len(quiet), TARGET)}; {agreement(low, high, len(quiet))}")
    print(line)
    return line


def heap_states(workload: str, faults: list[tuple[float, float]], apart: float = HEAP_APART) -> str:
    """One line on the two sides' heaps over the rounds (``faults``: each round's minor page faults a measured step,
    harness and script): the median of each, and in how many rounds each side took more than ``apart`` more than the
    other (a heap in a state that zero-fills more pages a step, docs/measuring.md); rounds without a count are left
    out."""
    pairs = [(ours, theirs) for ours, theirs in faults if math.isfinite(ours) and math.isfinite(theirs)]
    if not pairs:
        return f"{workload:11s} page faults a step: not counted"
    more_ours = sum(ours > theirs * (1 + apart) for ours, theirs in pairs)
    more_theirs = sum(theirs > ours * (1 + apart) for ours, theirs in pairs)
    return (f"{workload:11s} page faults a step, median: harness {statistics.median(p[0] for p in pairs):.0f}, "
            f"script {statistics.median(p[1] for p in pairs):.0f}; more than {apart:.0%} more on the harness's "
            f"side in {more_ours} of {len(pairs)} rounds, on the script's in {more_theirs}")


def agreement(low: float, high: float, rounds: int, within: float = WITHIN) -> str:
    """Whether the band of the median ratio shows the two sides within ``within`` of each other."""
    if rounds < MIN_ROUNDS:
        return f"agreement: no verdict from {rounds} round(s)"
    if 1 - within <= low and high <= 1 + within:
        return f"within {within:.0%} shown"
    if high < 1 - within or low > 1 + within:
        return f"not within {within:.0%}"
    return f"within {within:.0%}: inconclusive (the band reaches past {1 - within:.2f}-{1 + within:.2f})"
