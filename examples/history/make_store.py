"""Write the example history store (``examples/history/results``): seeded, synthetic records, no measurement.

Two configs of a ``phase2``-like ladder on one CPU, eight sweeps on eight days at eight commits; from the sixth
commit on rung 1 is 20% slower (the change point ``history`` marks and ``history --regressions`` lists); the
third sweep measured each config once (a one-run session: a point without a band). Every record says it is
synthetic (``hostname``). Run from the repository's top folder:

    python examples/history/make_store.py
    python -m harness history --results examples/history/results --out examples/history/site
    python -m harness history --results examples/history/results --regressions
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from harness.store import RunRecord, compact, write_record  # noqa: E402

STORE = HERE / "results"
COMMITS = [f"{i:x}" * 40 for i in range(1, 9)]  # eight commits, 111..., 222..., ...
SLOWED_FROM = 5  # the sixth commit's sweep is the first slow one
LEVELS = {0: 50.0, 1: 64.0}  # samples/s of rung 0 (fp32) and rung 1 (bf16)


def main() -> None:
    rng = np.random.default_rng(7)
    shutil.rmtree(STORE, ignore_errors=True)
    for day, commit in enumerate(COMMITS):
        session = rng.normal(0, 0.01, 2)  # each config's level moves a little between sessions
        runs = 1 if day == 2 else 3
        for rung, level in LEVELS.items():
            slow = 0.8 if rung == 1 and day >= SLOWED_FROM else 1.0
            for r in range(runs):
                sps = level * slow * float(np.exp(session[rung] + rng.normal(0, 0.01)))
                write_record(RunRecord(
                    run_id=f"example-{day}-{rung}-{r}", status="ok",
                    timestamp=f"2026-11-{day + 1:02d}T10:{rung}{r}:00+00:00",
                    workload="unet3d", size="smoke", device="cpu", config_hash=f"example-rung{rung}",
                    sweep_id=f"phase2-example-{day + 1}", ladder="phase2", rung=rung,
                    change="precision=bf16-mixed" if rung else "", round=r, samples_per_s=sps, cpu_model="Example CPU",
                    cpu_count=8, torch_version="2.8.0", git_commit=commit, hostname="synthetic example",
                    other_cpu_pct=1.0), STORE)
    compact(STORE)
    print(f"wrote {STORE}")


if __name__ == "__main__":
    main()
