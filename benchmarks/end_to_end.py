"""End to end, as users compare: ``python -m harness run`` against their own script, fresh processes, all CPUs.

    python benchmarks/overhead.py --as-users [--rounds 12] [--workloads resnet50,unet3d] [--steps 30] [--warmup 5]

Each round runs the harness and ``benchmarks/user_script.py`` (a training script that imports nothing of the
harness) with the same model, batch, optimizer and step counts, one after the other, each a fresh process on every
CPU, in ABBA order (harness first in odd rounds, the script first in even ones), so a drift of the machine over a
round favours neither. A round's ratio is harness samples/s over the script's. Printed: every round, the median
ratio with a 95% bootstrap band of the median (rounds resampled), and the sign count (rounds below 1 of all).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

from user_script import HARNESS_SETTINGS  # noqa: E402


def harness_side(workload: str, steps: int, warmup: int, results: Path, env: dict) -> float:
    """samples/s that ``python -m harness run`` reports for the script's training."""
    settings = [*HARNESS_SETTINGS[workload], "measure.mode=model", f"measure.steps={steps}",
                f"measure.warmup_steps={warmup}", f"results_dir={results}"]
    done = subprocess.run([sys.executable, "-m", "harness", "run", *settings], cwd=REPO, capture_output=True,
                          text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"the harness run failed (exit {done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    from harness.store import load_runs

    return float(load_runs(results).sort_values("timestamp").iloc[-1]["samples_per_s"])


def script_side(workload: str, steps: int, warmup: int, env: dict) -> float:
    """samples/s of the user's own script."""
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "user_script.py"), workload, "--steps",
                           str(steps), "--warmup", str(warmup)], cwd=REPO, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"the user script failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["samples_per_s"])


def as_users(workloads: list[str], rounds: int, steps: int, warmup: int, env: dict, summary) -> dict[str, list]:
    """The rounds' ratios harness / script per workload; ``summary(label, ratios)`` prints each workload's line."""
    ratios: dict[str, list[float]] = {w: [] for w in workloads}
    print(f"\nEnd to end as users compare: `python -m harness run` against benchmarks/user_script.py, fresh "
          f"processes on all CPUs, ABBA order, {warmup} warm-up + {steps} timed steps, {rounds} rounds")
    with tempfile.TemporaryDirectory(prefix="harness-as-users-") as tmp:
        for r in range(rounds):
            for workload in workloads:
                results = Path(tmp) / f"{workload}-{r}"
                if r % 2 == 0:
                    ours = harness_side(workload, steps, warmup, results, env)
                    theirs = script_side(workload, steps, warmup, env)
                else:
                    theirs = script_side(workload, steps, warmup, env)
                    ours = harness_side(workload, steps, warmup, results, env)
                ratios[workload].append(ours / theirs)
                print(f"round {r + 1:2d} {workload:9s} harness {ours:8.2f} samples/s, script {theirs:8.2f} samples/s,"
                      f" ratio {ours / theirs:.3f} ({'harness first' if r % 2 == 0 else 'script first'})", flush=True)
    for workload, values in ratios.items():
        below = sum(v < 1.0 for v in values)
        summary(f"{workload:9s} harness/script ({below} of {len(values)} rounds below 1)", values)
    return ratios
