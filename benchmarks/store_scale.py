"""How the cost of reading the store grows with its size: loose and compacted.

    python benchmarks/store_scale.py [--runs 1000 10000] [--big] [--repeats 3] [--keep DIR] [--skip-loose]

Builds synthetic stores (realistic records: 60 raw step times and data waits, a ~1.5 KB config_json,
sweeps of 4-14 rungs over a few ladders, a noise calibration now and then, some settings measured again
in later sweeps) in a temp folder and times the library calls behind the commands, as medians of
``--repeats`` runs:

  table     ``table --sweep latest``: resolve the sweep, read its rows and the noise calibrations, build the table
  sweep     a fully cached 14-rung sweep's store reading: per rung, this sweep's rows and the cache lookup
  check     ``check``: read the sweep (and the calibrations) and a baseline file
  lookup    one cache lookup (``cache.lookup_cached``: the key columns, then the record it copies)
  full      ``load_runs`` of everything (what every command paid before the store was compacted and filtered)

Layouts: ``loose`` (one file per run, as sweeps write them) and ``compacted`` (what ``store compact`` writes).
Stores above ``--loose-max`` runs are built from files of 500 runs each (compaction reads ~3 ms per loose file;
the parts it writes are the same) and timed compacted only: auto-compaction keeps a real store below 500 loose
files. Prints seconds per store size and how each grows from one size to the next. The target (< 1 s for
``table`` and a cached sweep's reads with 10,000 compacted runs, growing with the sweep, not the store) is
printed, not asserted: timings depend on the machine and its load.
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
from harness.store import index as store_index  # noqa: E402
from harness.analysis.gate import baseline as baseline_mod, check# noqa: E402
from harness.analysis.stats import noise_model
from harness.analysis.views import table as table_mod
from harness.session import cache  # noqa: E402
from harness.sweeps import rungs as sweep  # noqa: E402

CACHED_SWEEP_RUNGS = 14
LADDERS = ("unet3d_conn", "resnet50_aggressive", "detr_baseline", "imagenet_loader")
COLUMNS = ("table", "sweep", "check", "lookup", "full")


def synthetic_rows(n: int, seed: int = 0) -> list[dict]:
    """``n`` records in sweeps of 4-14 rungs (every 40th a 5-run noise calibration); the last sweep repeats
    settings measured before (cacheable)."""
    rng = random.Random(seed)
    settings = {"workload": "unet3d", "data": {"num_workers": 4, "pin_memory": True, "prefetch_factor": 2,
                                              "persistent_workers": True, "root": "/data/synthetic" * 4},
                "measure": {"steps": 60, "warmup_steps": 10, "timeout_s": 900}, "precision": "bf16-mixed",
                "model": {"channels": [32, 64, 128, 256, 320], "depth": 5, "norm": "instance"},
                "notes": "x" * 900}
    rows, i, s = [], 0, 0
    while i < n:
        noise = s % 40 == 17 and i + 5 < n  # the last sweep is a ladder's
        rungs = 5 if noise else rng.randint(4, 14)
        sweep_id = f"phase2-{s:06d}"
        ladder = "noise" if noise else rng.choice(LADDERS)
        for k in range(rungs):  # the last sweep is whole: a store of n runs may hold up to 13 more
            rung = 0 if noise else k
            settings["model"]["depth"] = rung
            step = [rng.uniform(70, 90) for _ in range(60)]
            rows.append(dict(
                run_id=f"{i:08d}-{rng.getrandbits(32):08x}", schema_version=store.SCHEMA_VERSION,
                status="ok" if noise or rng.random() > 0.05 else "oom",
                timestamp=f"2026-{1 + (i * 12) // n:02d}-{1 + i % 28:02d}T{i % 24:02d}:00:00+0000",
                workload="unet3d", size="smoke", device="cpu",
                config_hash="noise-cfg" if noise else f"cfg{rung:02d}-{rng.randint(0, 20)}",
                config_json=json.dumps(settings), env_key="env-a", sweep_id=sweep_id, ladder=ladder,
                rung=rung, change=f"change {rung}", round=k if noise else 0, samples_per_s=rng.uniform(40, 60),
                unit="voxels", samples_per_step=2, step_ms_p50=statistics.median(step), step_ms_p90=max(step),
                step_ms_mean=statistics.fmean(step), data_wait_frac=0.04, step_ms=step,
                data_wait_ms=[rng.uniform(0, 5) for _ in range(60)], peak_host_rss_bytes=1.5e9, cpu_model="AMD EPYC",
                cpu_count=2, torch_version="2.5.1", python_version="3.11.7", hostname="bench"))
            i += 1
        s += 1
    return rows


def build_store(folder: Path, rows: list[dict], per_file: int = 1) -> None:
    """``per_file`` runs a loose file: 1 as sweeps write them (without the fsync: the files are the same), more
    to build a big store quickly (compaction then reads 500 runs a file instead of one)."""
    runs = store.runs_dir(folder)
    runs.mkdir(parents=True)
    table = pa.Table.from_pylist([{name: r.get(name) for name in store.COLUMNS} for r in rows], schema=store.SCHEMA)
    for k in range(0, len(rows), per_file):
        pq.write_table(table.slice(k, per_file), runs / f"{rows[k]['run_id']}.parquet")


def cached_sweep_reads(folder: Path, keys: list[tuple[str, str]]) -> None:
    """What ``run_rung`` reads for each rung of a sweep whose every rung is in the cache."""
    used: set[str] = set()
    for config_hash, env_key in keys:
        store.load_runs(folder, columns=sweep.SWEEP_COLUMNS, where={"sweep_id": "bench-new-sweep"})
        hit = cache.lookup_cached(str(folder), config_hash, env_key, used)
        assert hit is not None, "the benchmark's sweep should be fully cached"
        used.add(hit.run_id)


def time_it(fn, repeats: int) -> float:
    """Median seconds of ``fn``, each call as a fresh process makes it (no snapshot of the store yet)."""
    times = []
    for _ in range(repeats):
        store_index.forget()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def table_command(folder: Path) -> None:
    frame = noise_model.with_calibrations(folder, store.load_runs(folder, sweep="latest"))
    table_mod.build_table(frame, "latest", str(folder))


def measure(folder: Path, rows: list[dict], baseline: Path, repeats: int, slow: bool) -> dict[str, float]:
    """Medians; ``slow`` (a loose store): one repetition, and the cached sweep timed on 2 rungs and scaled."""
    ok = [r for r in rows if r["status"] == "ok" and r["ladder"] != "noise" and r["rung"] < CACHED_SWEEP_RUNGS]
    keys = list({r["rung"]: (r["config_hash"], r["env_key"]) for r in ok}.values())[:CACHED_SWEEP_RUNGS]
    sweep_s = (time_it(lambda: cached_sweep_reads(folder, keys[:2]), 1) * len(keys) / 2 if slow
               else time_it(lambda: cached_sweep_reads(folder, keys), repeats))
    repeats = 1 if slow else repeats
    return {
        "table": time_it(lambda: table_command(folder), repeats),
        "sweep": sweep_s,
        "check": time_it(lambda: (check.select_sweep(check.load_sweep(str(folder), "latest")),
                                  baseline_mod.load_baseline(baseline)), repeats),
        "lookup": time_it(lambda: cache.lookup_cached(str(folder), *keys[0], set()), repeats),
        "full": time_it(lambda: store.load_runs(folder), repeats),
    }


def line(n: int, layout: str, files: int | str, mib: float | str, times: dict[str, float]) -> str:
    return f"{n:>7} {layout:<10} {files:>6} {mib:>7} " + " ".join(f"{times[k]:>8.3f}" for k in COLUMNS)


HEADER = f"{'runs':>7} {'layout':<10} {'files':>6} {'MiB':>7} " + " ".join(f"{k:>8}" for k in COLUMNS)


def time_store(folder: Path, n: int, rows: list[dict], layouts: list[str], repeats: int, results: list) -> None:
    """Time each layout of one store, in order: loose, then compacted."""
    latest = [r for r in rows if r["sweep_id"] == rows[-1]["sweep_id"]]
    baseline = folder / "baselines" / "base.parquet"
    baseline.parent.mkdir()
    pq.write_table(pa.Table.from_pylist([{c: r.get(c) for c in store.COLUMNS} for r in latest],
                                        schema=store.SCHEMA), baseline)
    for layout in layouts:
        if layout == "compacted":
            start = time.perf_counter()
            done = store.compact(folder)
            print(f"compaction of {n} runs: {time.perf_counter() - start:.1f} s ({done.summary()})", flush=True)
        files = store.record_files(folder) + store.part_files(folder)
        mib = f"{sum(Path(f).stat().st_size for f in files) / 2**20:.1f}"
        times = measure(folder, rows, baseline, repeats, slow=layout == "loose")
        results.append((n, layout, len(files), mib, times))
        print(line(n, layout, len(files), mib, times), flush=True)


def growth(results: list) -> list[str]:
    """Per layout, how each timing grew from one store size to the next (the runs grew by the first factor)."""
    lines = []
    for layout in ("loose", "compacted"):
        mine = [(n, t) for n, lay, _, _, t in results if lay == layout]
        for (n0, t0), (n1, t1) in zip(mine, mine[1:]):
            lines.append(f"{layout:<10} {n0:>6} -> {n1:<6} runs x{n1 / n0:<5.1f} " + " ".join(
                f"{k} x{t1[k] / t0[k]:.1f}" for k in COLUMNS))
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[1000, 10000], help="store sizes (default 1000 10000)")
    parser.add_argument("--big", action="store_true", help="also 50,000 runs (compacted only)")
    parser.add_argument("--repeats", type=int, default=3, help="repetitions per timing; the median is printed")
    parser.add_argument("--keep", help="build the stores in this folder and keep them")
    parser.add_argument("--skip-loose", action="store_true", help="time the compacted stores only (loose ones take "
                        "minutes at 10,000 runs)")
    parser.add_argument("--loose-max", type=int, default=10000, help="the largest store also timed loose, and "
                        "built one file per run (default 10000)")
    args = parser.parse_args()
    sizes = sorted(set(args.runs + ([50000] if args.big else [])))
    root = Path(args.keep or tempfile.mkdtemp(prefix="store-scale-"))
    print(f"stores in {root}; medians of {args.repeats} (loose stores, which take seconds a read: once, and the "
          f"cached sweep from 2 of its rungs x {CACHED_SWEEP_RUNGS / 2:.0f})")
    print(HEADER)
    results: list = []
    try:
        for n in sizes:
            folder = root / f"store-{n}"
            loose = not args.skip_loose and n <= args.loose_max
            rows = synthetic_rows(n)
            n = len(rows)
            start = time.perf_counter()
            build_store(folder, rows, per_file=1 if loose else 500)
            print(f"built {n} runs in {time.perf_counter() - start:.0f} s ({len({r['sweep_id'] for r in rows})} "
                  f"sweeps; the latest has {sum(r['sweep_id'] == rows[-1]['sweep_id'] for r in rows)} runs)",
                  flush=True)
            time_store(folder, n, rows, (["loose"] if loose else []) + ["compacted"], args.repeats, results)
            if not args.keep:
                shutil.rmtree(folder)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(f"\nseconds (median); sweep = store reads of a fully cached {CACHED_SWEEP_RUNGS}-rung sweep (per rung: "
          "its sweep's rows, the key lookup, the record copied)")
    print(HEADER)
    for result in results:
        print(line(*result))
    print("\ngrowth from one store size to the next")
    print("\n".join(growth(results)))
    for n, layout, _, _, t in results:
        if n >= 10000 and layout == "compacted":
            verdict = "meets" if t["table"] < 1 and t["sweep"] < 1 else "MISSES"
            print(f"target (< 1 s with {n} compacted runs): table {t['table']:.3f} s, cached sweep "
                  f"{t['sweep']:.3f} s: {verdict} it on this machine")
    return 0


if __name__ == "__main__":
    sys.exit(main())
