"""Where a sweep's wall time goes, and its duty cycle (the measured windows' share of it).

    python benchmarks/duty_cycle.py [--exec] [--cached] [+ladder=phase2] [key=value ...]

Runs ``python -m harness sweep`` (phase2 unless a ladder is given) into a fresh temporary results folder, as a user
would, times it from outside, and splits the wall time with the records' phase fields (``harness.run.parent.phases``):
per run, the start (interpreter and imports, or the fork), the model's build, the data's set-up, the warm-up, the
window and the teardown, the parent's gap between runs, and what is left of the command itself (its start, the
preflight, the table); then the model phase by part (imports, context, FLOP count, build, to device) and the warm-up's
first step apart from the rest. ``--exec`` starts every run as a fresh interpreter (``HARNESS_LAUNCH=exec``), to compare
with the warm launcher; ``--cached`` runs the sweep a second time into the same folder and times that one, which
measures nothing (every rung from the store).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness.run.parent import phases  # noqa: E402

PARTS = (("start (interpreter + imports, or fork)", "phase_launch_s"), ("model and optimizer", "phase_model_s"),
         ("data and loader", "phase_data_s"), ("warm-up", "phase_warmup_s"), ("measured window", "measured_s"),
         ("teardown", "phase_teardown_s"), ("parent between runs", "phase_gap_s"))


def timed_sweep(args: list[str], results: Path, env: dict) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "harness", "sweep", *args, f"results_dir={results}"], cwd=REPO,
                          capture_output=True, text=True, env=env)
    took = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"the sweep failed (exit {done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return took, done.stdout


def split(records: list, wall_s: float) -> list[tuple[str, float]]:
    """(part, seconds summed over the runs) for every part of the wall time, and what is left: the command's own."""
    rows = [(label, sum(getattr(r, name) or 0.0 for r in records)) for label, name in PARTS]
    rows.append(("the command itself (start, preflight, table)", max(0.0, wall_s - sum(s for _, s in rows))))
    return rows


def report(records: list, wall_s: float, how: str) -> str:
    lines = [f"sweep of {len(records)} runs ({how}): {wall_s:.1f} s wall"]
    for label, seconds in split(records, wall_s):
        lines.append(f"  {label:<46} {seconds:7.1f} s  {100 * seconds / wall_s:5.1f}%")
    lines.append("  the model phase and the warm-up, by part (mean per run; min-max):")
    for label, name in phases.PARTS:
        values = [getattr(r, name) for r in records if getattr(r, name, None) is not None]
        if values:
            lines.append(f"    {label:<44} {sum(values) / len(values):7.2f} s  ({min(values):.2f}-{max(values):.2f})")
    lines.append(phases.duty_cycle(records, wall_s))
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if {"-h", "--help"} & set(argv):
        print(__doc__.strip())
        return 0
    exec_only, cached = "--exec" in argv, "--cached" in argv
    args = [a for a in argv if a not in ("--exec", "--cached")]
    if not any(a.startswith(("+ladder=", "ladder=")) for a in args):
        args = ["+ladder=phase2", *args]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    if exec_only:
        env["HARNESS_LAUNCH"] = "exec"
    from harness.store import load_records

    with tempfile.TemporaryDirectory(prefix="harness-duty-") as tmp:
        wall, out = timed_sweep(args, Path(tmp), env)
        records = [r for r in load_records(tmp) if not r.cached_from]
        print(report(records, wall, "every run a fresh interpreter" if exec_only else "warm launcher"))
        if cached:
            again, _ = timed_sweep(args, Path(tmp), env)
            print(f"the same sweep again, every rung from the store: {again:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
