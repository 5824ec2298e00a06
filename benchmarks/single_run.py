"""What one ``python -m harness run`` costs beyond its measured window, against a plain script of the same training.

    python benchmarks/single_run.py [--rounds 8]

The README's first command, ``python -m harness run workload=unet3d`` (the CPU size: synthetic volumes, a loader
without workers, the training step), as a user runs it: a new process each time, its wall time taken from outside,
its window (``measured_s``) read from its record. Beside it, in ABBA order, ``benchmarks/user_script.py unet3d
--data synthetic --mode train`` with the run's own step and warm-up counts: a script of the same model, batch,
optimizer, loss and data that imports nothing of the harness, timed the same way (its window: the sum of its timed
steps). Both pay Python's start and the imports of torch and MONAI; the script imports MONAI as ``import monai``
does, every network and the optional packages MONAI finds installed, where the harness's reference workloads import
only the networks they use (docs/measuring.md, the warm launcher).

One run comes first, not counted, so that every counted run finds the caches a user's second run finds (the FLOP
count, the launcher's probe). Per round, each side's seconds beyond its window; then their medians, and the
harness's seconds less the script's of the same round, with the distribution-free 95% band of its median
(``overhead_parts/stats.py``): the machine's speed moves both sides alike within a round, so that difference moves
less with the hour than the aim (<= 5 s beyond the window on a 2-core CPU) does.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cached_sweep import compile_harness  # noqa: E402
from overhead_parts import stats  # noqa: E402

RUN = ("run", "workload=unet3d")


def harness_run(results: Path) -> tuple[float, float, dict]:
    """One ``harness run``: its wall time, its window and its record."""
    before = set(results.glob("runs/*.parquet"))
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "harness", *RUN, f"results_dir={results}"], cwd=REPO,
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"the run failed (exit {done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    (path,) = set(results.glob("runs/*.parquet")) - before
    record = pq.read_table(path).to_pylist()[0]
    return wall, float(record["measured_s"]), record


def script_run(steps: int, warmup: int) -> tuple[float, float]:
    """One plain script of the same training: its wall time and its window."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "user_script.py"), "unet3d", "--data",
                           "synthetic", "--mode", "train", "--steps", str(steps), "--warmup", str(warmup)],
                          cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"the script failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return wall, float(json.loads(done.stdout.strip().splitlines()[-1])["window_s"])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=8, help="rounds of two pairs, ABBA (default 8)")
    rounds = parser.parse_args(argv).rounds
    compile_harness()  # as a usual start writes it (see benchmarks/cached_sweep.py)
    with tempfile.TemporaryDirectory(prefix="harness-bench-") as tmp:
        results = Path(tmp)
        wall, window, record = harness_run(results)
        steps, warmup = len(record["step_ms"]), int(record["warmup_steps"])
        print(f"first run (not counted: it fills the caches): {wall - window:.2f} s beyond its window; "
              f"then {rounds} rounds, each the run and the script ({steps} steps after {warmup}) in ABBA order")
        ours, theirs = [], []
        for i in range(rounds):
            sides = ("harness", "script") if i % 2 == 0 else ("script", "harness")
            got = {}
            for side in sides:
                if side == "harness":
                    wall, window, record = harness_run(results)
                else:
                    wall, window = script_run(steps, warmup)
                got[side] = wall - window
            ours.append(got["harness"])
            theirs.append(got["script"])
            print(f"  round {i + 1}: harness {got['harness']:.2f} s beyond its window "
                  f"(launched_by {record.get('launched_by')}), script {got['script']:.2f} s")
    less = [a - b for a, b in zip(ours, theirs)]
    mid, low, high = stats.median_band(less)
    print(f"beyond the window, median: harness {statistics.median(ours):.2f} s ({min(ours):.2f}-{max(ours):.2f}), "
          f"plain script {statistics.median(theirs):.2f} s ({min(theirs):.2f}-{max(theirs):.2f})")
    print(f"the harness less the script, a round: median {mid:+.2f} s, 95% band of the median "
          f"[{low:+.2f} to {high:+.2f}] ({rounds} rounds; the band needs at least {stats.MIN_ROUNDS})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
