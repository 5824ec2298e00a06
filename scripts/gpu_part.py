"""Helpers of scripts/gpu_measure.sh, so that every part fits one 10-minute command on a lent GPU.

    python3 scripts/gpu_part.py rung LADDER RUNG SWEEP_ID [key=value ...]
        Measure ONE rung of a ladder into the sweep SWEEP_ID: the same settings, cache and failed-rung rules
        as `python -m harness sweep`, so rungs measured in separate commands (each on a fresh machine) make one
        sweep once their records are put in one results folder. Exit 1 unless the rung ends ok or skipped.
    python3 scripts/gpu_part.py check RESULTS_DIR BEFORE_LIST
        Exit 1 if a record written since BEFORE_LIST (file names present before the part) ended error,
        timeout, nan or oom; print one line per record.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

FAILED = ("error", "timeout", "nan", "oom")


def rung(ladder_name: str, index: str, sweep_id: str, overrides: list[str]) -> int:
    from harness import config as config_mod
    from harness.sweeps import ladder as ladder_mod
    from harness.run import runner
    from harness.sweeps import rungs as sweep_mod

    lad = ladder_mod.load(ladder_name)
    rung_index = int(index)
    if not 0 <= rung_index < len(lad.rungs):
        raise ValueError(f"rung {rung_index} is not in ladder {ladder_name!r}: choose 0..{len(lad.rungs) - 1}")
    cfg = config_mod.RunConfig()
    keys = set()
    for item in overrides:
        key, _, value = item.partition("=")
        config_mod.set_key(cfg, key, _parse(value))
        keys.add(key)
    clash = sweep_mod.conflicts(lad, keys)
    if clash:
        raise ValueError(f"{clash} is what ladder {ladder_name!r} varies; remove the override")
    ctx = sweep_mod.SweepContext(sweep_id=sweep_id, ladder=lad, settings=config_mod.to_dict(cfg),
                                 user_keys=frozenset(keys))
    machine = runner.Machine.detect()
    runner.prepare_data(sweep_mod.rung_config(ctx, rung_index, machine))  # before anything is timed
    outcome = sweep_mod.run_rung(ctx, rung_index, 0, machine)
    rec = outcome.record
    if rec is None:
        print(f"{ladder_name} rung {rung_index}: not run: {outcome.message}")
        return 0
    tail = (rec.error or "").strip().splitlines()
    speed = f" {rec.samples_per_s:.2f} samples/s" if rec.samples_per_s else ""
    print(f"{ladder_name} rung {rung_index} ({rec.change or 'baseline'}): {rec.status} ({outcome.how}){speed}"
          + (f": {tail[-1][:200]}" if tail else ""))
    return 0 if rec.status in ("ok", "skipped") else 1


def _parse(value: str):
    """Values as Hydra would read them from the command line: numbers, booleans, null, [lists]."""
    import yaml

    return yaml.safe_load(value) if value else value


def check(results_dir: str, before_list: str) -> int:
    from harness.store import load_parquet_files, runs_dir

    before = set(Path(before_list).read_text().split()) if Path(before_list).exists() else set()
    new = sorted(str(p) for p in runs_dir(results_dir).glob("*.parquet") if p.name not in before)
    if not new:
        print("no record was written")
        return 1
    frame = load_parquet_files(new)
    bad = 0
    for row in frame.itertuples():
        tail = (row.error or "").strip().splitlines()
        what = f"{row.ladder} rung {row.rung}" if row.ladder else "run"
        print(f"{what} {row.workload} {row.change or ''}: {row.status}" + (f": {tail[-1][:200]}" if tail else ""))
        bad += row.status in FAILED
    return 1 if bad else 0


def main(argv: list[str]) -> int:
    try:
        if len(argv) >= 4 and argv[0] == "rung":
            return rung(argv[1], argv[2], argv[3], argv[4:])
        if len(argv) == 3 and argv[0] == "check":
            return check(argv[1], argv[2])
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
