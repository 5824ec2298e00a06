"""How long a fully cached sweep takes against the first one (the aim: <= 10%).

    python benchmarks/cached_sweep.py [+ladder=phase2] [key=value ...]

Runs the sweep twice into a fresh temporary results folder, as a user would (``python -m harness
sweep``, a new process each time), and prints both wall times and their ratio. The second sweep
measures nothing: every rung comes from the store, so its time is what the harness itself costs.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def timed_sweep(args: list[str], results: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "harness", "sweep", *args, f"results_dir={results}"], cwd=REPO,
                          capture_output=True, text=True)
    took = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"the sweep failed (exit {done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return took


def main(argv: list[str]) -> int:
    args = argv or ["+ladder=phase2"]
    with tempfile.TemporaryDirectory(prefix="harness-bench-") as tmp:
        first = timed_sweep(args, Path(tmp))
        cached = timed_sweep(args, Path(tmp))
    print(f"sweep {' '.join(args)}: first {first:.1f} s, fully cached {cached:.1f} s "
          f"({100 * cached / first:.1f}% of the first)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
