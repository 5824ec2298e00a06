"""How long a fully cached sweep takes against the first one (the aim: <= 10%), and whether it stays so.

    python benchmarks/cached_sweep.py [--again 3] [+ladder=phase2] [key=value ...]

Runs the sweep into a fresh temporary results folder, then ``--again`` times more, as a user would (``python -m
harness sweep``, a new process each time), and prints the wall times, their ratio to the first and the files the
store holds after each. The later sweeps measure nothing: every rung comes from the store, so their time is what the
harness itself costs, and it must not grow as they pile up (each adds one small file of copies).

Beside each, a fresh interpreter imports alone the modules a cached sweep loads that are not the harness's own (the
libraries: pandas, pyarrow, Hydra, scipy.special and what they import; listed once, from one more cached sweep run
in-process, in the order it loaded them), timed from outside the same way: the part of the sweep's time that moves
with the machine's speed of that moment and is not the harness's code.

The harness's own modules are compiled to bytecode first, as any interpreter writes it at their first import: with
``PYTHONDONTWRITEBYTECODE`` set (some containers set it) nothing is ever written, and every start would compile a
hundred modules from source (~0.14 s of CPU on a 2-core AMD EPYC, counted), which is not the harness's cost.
"""

from __future__ import annotations

import compileall
import json
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
    compile_harness()
    with tempfile.TemporaryDirectory(prefix="harness-bench-") as tmp:
        first = timed_sweep(args, Path(tmp))
        print(f"sweep {' '.join(args)}: first {first:.1f} s, {_files(Path(tmp))} files in the store")
        libraries = Path(tmp) / "libraries.json"
        libraries.write_text(json.dumps(library_modules(args, Path(tmp))))
        for _ in range(again):
            cached = timed_sweep(args, Path(tmp))
            alone = timed_imports(libraries)
            print(f"  fully cached {cached:.2f} s ({100 * cached / first:.1f}% of the first), "
                  f"{_files(Path(tmp))} files in the store; the libraries it imports, alone: {alone:.2f} s")
    return 0


# Run in a fresh interpreter: the sweep in-process, then the modules it loaded that are not the harness's own, in the
# order they were loaded (a package before its modules).
LIST_LIBRARIES = """
import json, sys
before = set(sys.modules)
from harness import cli
code = cli.main(sys.argv[1:])
own = ("harness", "harness_models")
print(json.dumps([m for m in sys.modules if m not in before and m.partition(".")[0] not in own]))
sys.exit(code)
"""
IMPORT_LIBRARIES = """
import importlib, json, sys
for name in json.loads(open(sys.argv[1]).read()):
    try:
        importlib.import_module(name)
    except Exception:  # a module made at run time, not importable on its own
        pass
"""


def library_modules(args: list[str], results: Path) -> list[str]:
    """The modules a fully cached sweep loads that are not the harness's own (the libraries: pandas, pyarrow,
    Hydra, scipy.special, numpy, rich, and the standard library's modules they and the harness use)."""
    done = subprocess.run([sys.executable, "-c", LIST_LIBRARIES, "sweep", *args, f"results_dir={results}"], cwd=REPO,
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"the sweep failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def timed_imports(libraries: Path) -> float:
    """A fresh interpreter that imports those modules alone, in that order, timed from outside: what the libraries
    cost at this moment, which the sweep's time holds."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", IMPORT_LIBRARIES, str(libraries)], cwd=REPO, check=True)
    return time.perf_counter() - start


def compile_harness() -> None:
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
