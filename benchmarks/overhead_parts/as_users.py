"""End to end, as users compare: ``python -m harness run`` against their own script, fresh processes, all CPUs.

    python benchmarks/overhead.py --as-users [--rounds 12] [--workloads resnet50,unet3d,unet3d-full] [--steps 30]
                                  [--warmup 5] [--mode model|train] [--data random|synthetic] [--flops]

Each round runs the harness and ``benchmarks/user_script.py`` (a training script that imports nothing of the
harness) with the same model, batch, optimizer and step counts, one after the other, each a fresh process on every
CPU, in ABBA order (harness first in odd rounds, the script first in even ones), so a drift of the machine over a
round favours neither. A round's ratio is harness samples/s over the script's. Printed: every round, the median
ratio with a 95% bootstrap band of the median (rounds resampled), and the sign count (rounds below 1 of all).

``--mode`` is the harness's ``measure.mode`` and the script's: ``model`` (one batch kept in memory) or ``train`` (a
batch from the loader every step). ``--data synthetic`` gives the script the harness's own data (its synthetic
volumes or images through a DataLoader, uint8 label maps), ``random`` a batch of random numbers with int64 labels
(``train`` needs ``synthetic``). ``--flops`` has the script count its FLOPs on the meta device first, as the
harness's child does: what differs between the two processes can be taken apart one step at a time.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from user_script import HARNESS_SETTINGS  # benchmarks/user_script.py: benchmarks/ is on the path, as the entry's folder

from harness.store import load_runs

from .common import REPO


def harness_side(workload: str, steps: int, warmup: int, results: Path, env: dict, mode: str = "model") -> float:
    """samples/s that ``python -m harness run`` reports for the script's training."""
    settings = [*HARNESS_SETTINGS[workload], f"measure.mode={mode}", f"measure.steps={steps}",
                f"measure.warmup_steps={warmup}", f"results_dir={results}"]
    done = subprocess.run([sys.executable, "-m", "harness", "run", *settings], cwd=REPO, capture_output=True,
                          text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"the harness run failed (exit {done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return float(load_runs(results).sort_values("timestamp").iloc[-1]["samples_per_s"])


def script_side(workload: str, steps: int, warmup: int, env: dict, script_args: tuple[str, ...] = ()) -> float:
    """samples/s of the user's own script (``script_args``: its --mode, --data, --flops)."""
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "user_script.py"), workload, "--steps",
                           str(steps), "--warmup", str(warmup), *script_args], cwd=REPO, capture_output=True,
                          text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"the user script failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["samples_per_s"])


def add_options(parser) -> None:
    """The options of ``--as-users`` beside ``benchmarks/overhead.py``'s own."""
    parser.add_argument("--mode", choices=("model", "train"), default="model",
                        help="with --as-users: the harness's measure.mode and the script's (train: with the loader)")
    parser.add_argument("--data", choices=("random", "synthetic"), default="random",
                        help="with --as-users: the script's data, random numbers or the harness's synthetic data")
    parser.add_argument("--flops", action="store_true",
                        help="with --as-users: the script counts its FLOPs on the meta device first, as the child does")


def check_options(parser, args) -> None:
    """A combination of ``--mode`` and ``--data`` the script cannot run is a usage error."""
    try:
        script_options(args.mode, args.data, args.flops)
    except ValueError as exc:
        parser.error(str(exc))


def script_options(mode: str, data: str, flops: bool) -> tuple[str, ...]:
    """The script's arguments for the harness's ``measure.mode`` and the data asked for; ValueError for a loader
    of random numbers (the harness's loader always serves its workload's own data)."""
    if mode == "train" and data != "synthetic":
        raise ValueError("--mode train compares the loaders too: add --data synthetic")
    return ("--mode", mode, "--data", data, *(("--flops",) if flops else ()))


def as_users(workloads: list[str], rounds: int, steps: int, warmup: int, env: dict, summary, mode: str = "model",
             data: str = "random", flops: bool = False) -> dict[str, list]:
    """The rounds' ratios harness / script per workload; ``summary(label, ratios)`` prints each workload's line."""
    options = script_options(mode, data, flops)
    ratios: dict[str, list[float]] = {w: [] for w in workloads}
    print(f"\nEnd to end as users compare: `python -m harness run` (measure.mode={mode}) against "
          f"benchmarks/user_script.py {' '.join(options)}, fresh processes on all CPUs, ABBA order, {warmup} warm-up "
          f"+ {steps} timed steps, {rounds} rounds")
    with tempfile.TemporaryDirectory(prefix="harness-as-users-") as tmp:
        for r in range(rounds):
            for workload in workloads:
                results = Path(tmp) / f"{workload}-{r}"
                if r % 2 == 0:
                    ours = harness_side(workload, steps, warmup, results, env, mode)
                    theirs = script_side(workload, steps, warmup, env, options)
                else:
                    theirs = script_side(workload, steps, warmup, env, options)
                    ours = harness_side(workload, steps, warmup, results, env, mode)
                ratios[workload].append(ours / theirs)
                print(f"round {r + 1:2d} {workload:11s} harness {ours:8.2f} samples/s, script {theirs:8.2f} "
                      f"samples/s, ratio {ours / theirs:.3f} ({'harness first' if r % 2 == 0 else 'script first'})",
                      flush=True)
    for workload, values in ratios.items():
        below = sum(v < 1.0 for v in values)
        summary(f"{workload:11s} harness/script ({below} of {len(values)} rounds below 1)", values)
    return ratios
