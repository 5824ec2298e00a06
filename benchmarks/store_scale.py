"""How the cost of reading the store grows with its size, before and after compaction.

    python benchmarks/store_scale.py [--runs 1000 10000] [--big] [--repeats 3] [--keep DIR] [--skip-loose]

Builds synthetic stores (realistic records: 60 raw step times and data waits, a ~1.5 KB config_json,
sweeps of 4-14 rungs, some settings measured again in later sweeps) in a temp folder and times the
library calls behind three commands, as medians of ``--repeats`` runs:

  table     ``table --sweep latest``: resolve the sweep, read its rows, build the table
  sweep     a fully cached sweep's store reading: per rung, this sweep's rows and the cache lookup
  check     ``check``: read the sweep and a baseline file
  full      ``load_runs`` of everything (what every command paid before the store was compacted and filtered)

Prints a table of seconds per store size, loose vs compacted. The done-when of issue 17 (< 1 s for
``table`` and a cached sweep's reads with 10,000 compacted runs) is printed, not asserted: timings
depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from harness import store  # noqa: E402
from harness.sweeps import rungs as sweep
from harness.analysis import regress, table as table_mod  # noqa: E402

CACHED_SWEEP_RUNGS = 10


def synthetic_rows(n: int, seed: int = 0) -> list[dict]:
    """``n`` records in sweeps of 4-14 rungs; the last sweep repeats settings measured before (cacheable)."""
    rng = random.Random(seed)
    settings = {"workload": "unet3d", "data": {"num_workers": 4, "pin_memory": True, "prefetch_factor": 2,
                                              "persistent_workers": True, "root": "/data/synthetic" * 4},
                "measure": {"steps": 60, "warmup_steps": 10, "timeout_s": 900}, "precision": "bf16-mixed",
                "model": {"channels": [32, 64, 128, 256, 320], "depth": 5, "norm": "instance"},
                "notes": "x" * 900}
    rows, i, s = [], 0, 0
    while i < n:
        rungs = rng.randint(4, 14)
        sweep_id = f"phase2-{s:06d}"
        for rung in range(rungs):  # the last sweep is whole: a store of n runs may hold up to 13 more
            settings["model"]["depth"] = rung
            step = [rng.uniform(70, 90) for _ in range(60)]
            rows.append(dict(
                run_id=f"{i:08d}-{rng.getrandbits(32):08x}", schema_version=store.SCHEMA_VERSION,
                status="ok" if rng.random() > 0.05 else "oom",
                timestamp=f"2026-{1 + (i * 12) // n:02d}-{1 + i % 28:02d}T{i % 24:02d}:00:00+0000",
                workload="unet3d", size="smoke", device="cpu", config_hash=f"cfg{rung:02d}-{rng.randint(0, 20)}",
                config_json=json.dumps(settings), env_key="env-a", sweep_id=sweep_id, ladder="synthetic",
                rung=rung, change=f"change {rung}", round=0, samples_per_s=rng.uniform(40, 60), unit="voxels",
                samples_per_step=2, step_ms_p50=statistics.median(step), step_ms_p90=max(step),
                step_ms_mean=statistics.fmean(step), data_wait_frac=0.04, step_ms=step,
                data_wait_ms=[rng.uniform(0, 5) for _ in range(60)], peak_host_rss_bytes=1.5e9, cpu_model="AMD EPYC",
                cpu_count=2, torch_version="2.5.1", python_version="3.11.7", hostname="bench"))
            i += 1
        s += 1
    return rows


def build_store(folder: Path, rows: list[dict]) -> None:
    """One loose file per run, as sweeps write them (without the fsync: the files are the same)."""
    runs = store.runs_dir(folder)
    runs.mkdir(parents=True)
    table = pa.Table.from_pylist([{name: r.get(name) for name in store.COLUMNS} for r in rows], schema=store.SCHEMA)
    for k, row in enumerate(rows):
        pq.write_table(table.slice(k, 1), runs / f"{row['run_id']}.parquet")


def cached_sweep_reads(folder: Path, keys: list[tuple[str, str]]) -> None:
    """What ``run_rung`` reads for each rung of a sweep whose every rung is in the cache."""
    used: set[str] = set()
    for config_hash, env_key in keys:
        store.load_runs(folder, columns=sweep.SWEEP_COLUMNS, where={"sweep_id": "bench-new-sweep"})
        hit = sweep.lookup_cached(str(folder), config_hash, env_key, used)
        assert hit is not None, "the benchmark's sweep should be fully cached"
        used.add(hit.run_id)


def time_it(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(folder: Path, rows: list[dict], baseline: Path, repeats: int, slow: bool) -> dict[str, float]:
    """Medians; ``slow`` (a loose store): one repetition, and the cached sweep timed on 2 rungs and scaled."""
    ok = [r for r in rows if r["status"] == "ok" and r["rung"] < CACHED_SWEEP_RUNGS]
    keys = list({r["rung"]: (r["config_hash"], r["env_key"]) for r in ok}.values())[:CACHED_SWEEP_RUNGS]
    sweep_s = (time_it(lambda: cached_sweep_reads(folder, keys[:2]), 1) * len(keys) / 2 if slow
               else time_it(lambda: cached_sweep_reads(folder, keys), repeats))
    repeats = 1 if slow else repeats
    return {
        "table": time_it(lambda: table_mod.build_table(store.load_runs(folder, sweep="latest"), "latest"), repeats),
        "sweep": sweep_s,
        "check": time_it(lambda: (regress.select_sweep(regress._load_sweep(str(folder), "latest")),
                                  regress.load_baseline(baseline)), repeats),
        "full": time_it(lambda: store.load_runs(folder), repeats),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[1000, 10000], help="store sizes (default 1000 10000)")
    parser.add_argument("--big", action="store_true", help="also 50,000 runs (several minutes, ~1.2 GB loose)")
    parser.add_argument("--repeats", type=int, default=3, help="repetitions per timing; the median is printed")
    parser.add_argument("--keep", help="build the stores in this folder and keep them")
    parser.add_argument("--skip-loose", action="store_true", help="time the compacted stores only (loose ones take "
                        "minutes at 10,000 runs)")
    args = parser.parse_args()
    sizes = sorted(set(args.runs + ([50000] if args.big else [])))
    root = Path(args.keep or tempfile.mkdtemp(prefix="store-scale-"))
    print(f"stores in {root}; medians of {args.repeats} (loose stores, which take seconds a read: once, and the "
          "cached sweep from 2 of its rungs x 5)")
    header = f"{'runs':>7} {'layout':<10} {'files':>6} {'MiB':>7} {'table':>8} {'sweep':>8} {'check':>8} {'full':>8}"
    results = []
    try:
        for n in sizes:
            folder = root / f"store-{n}"
            rows = synthetic_rows(n)
            n = len(rows)
            start = time.perf_counter()
            build_store(folder, rows)
            built = time.perf_counter() - start
            latest = [r for r in rows if r["sweep_id"] == rows[-1]["sweep_id"]]
            baseline = folder / "baselines" / "base.parquet"
            baseline.parent.mkdir()
            pq.write_table(pa.Table.from_pylist([{c: r.get(c) for c in store.COLUMNS} for r in latest],
                                                schema=store.SCHEMA), baseline)
            print(f"built {n} loose runs in {built:.0f} s ({len({r['sweep_id'] for r in rows})} sweeps; the latest "
                  f"has {len(latest)} runs)", flush=True)
            for layout in ("compacted",) if args.skip_loose else ("loose", "compacted"):
                if layout == "compacted":
                    start = time.perf_counter()
                    done = store.compact(folder)
                    print(f"compaction of {n} runs: {time.perf_counter() - start:.1f} s ({done.summary()})",
                          flush=True)
                files = store.record_files(folder) + store.part_files(folder)
                mib = sum(Path(f).stat().st_size for f in files) / 2**20
                times = measure(folder, rows, baseline, args.repeats, slow=layout == "loose")
                results.append((n, layout, len(files), mib, times))
                print(header if len(results) == 1 else "", end="\n" if len(results) == 1 else "")
                print(f"{n:>7} {layout:<10} {len(files):>6} {mib:>7.1f} " + " ".join(
                    f"{times[k]:>8.3f}" for k in ("table", "sweep", "check", "full")), flush=True)
            if not args.keep:
                shutil.rmtree(folder)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print("\nseconds (median); sweep = store reads of a fully cached 10-rung sweep (2 reads + 1 record per rung)")
    print(header)
    for n, layout, count, mib, times in results:
        print(f"{n:>7} {layout:<10} {count:>6} {mib:>7.1f} " + " ".join(
            f"{times[k]:>8.3f}" for k in ("table", "sweep", "check", "full")))
    big = [t for n, layout, _, _, t in results if n >= 10000 and layout == "compacted"]
    for t in big:
        verdict = "meets" if t["table"] < 1 and t["sweep"] < 1 else "MISSES"
        print(f"issue 17 target (< 1 s with 10,000+ compacted runs): table {t['table']:.3f} s, cached sweep "
              f"{t['sweep']:.3f} s: {verdict} it on this machine")
    return 0


if __name__ == "__main__":
    sys.exit(main())
