"""How long a fully cached sweep takes against the first one (the aim: <= 10%), and whether it stays so.

    python benchmarks/cached_sweep.py [--again 3] [+ladder=phase2] [key=value ...]

Runs the sweep into a fresh temporary results folder, then ``--again`` times more, as a user would (``python -m
harness sweep``, a new process each time), and prints the wall times, their ratio to the first and the files the
store holds after each. The later sweeps measure nothing: every rung comes from the store, so their time is what the
harness itself costs, and it must not grow as they pile up (each adds one small file of copies).

The harness's own modules are compiled to bytecode first, as any interpreter writes it at their first import: with
``PYTHONDONTWRITEBYTECODE`` set (some containers set it) nothing is ever written, and every start would compile a
hundred modules from source (~0.14 s of CPU on a 2-core AMD EPYC, counted), which is not the harness's cost.
"""

from __future__ import annotations

import compileall
import os
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
    again = 3
    if argv[:1] == ["--again"]:
        again, argv = int(argv[1]), argv[2:]
    args = argv or ["+ladder=phase2"]
    _bytecode()
    with tempfile.TemporaryDirectory(prefix="harness-bench-") as tmp:
        first = timed_sweep(args, Path(tmp))
        print(f"sweep {' '.join(args)}: first {first:.1f} s, {_files(Path(tmp))} files in the store")
        for _ in range(again):
            cached = timed_sweep(args, Path(tmp))
            print(f"  fully cached {cached:.2f} s ({100 * cached / first:.1f}% of the first), "
                  f"{_files(Path(tmp))} files in the store")
    return 0


def _bytecode() -> None:
    """The harness's modules compiled (written even under PYTHONDONTWRITEBYTECODE, which then is said)."""
    for package in ("harness", "harness_models"):
        if (REPO / package).is_dir():
            compileall.compile_dir(REPO / package, quiet=1)
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        print("PYTHONDONTWRITEBYTECODE is set: the harness's bytecode was compiled first, as a usual start writes it")


def _files(results: Path) -> int:
    return sum(1 for _ in results.rglob("*.parquet"))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
