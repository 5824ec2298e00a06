"""Helpers of scripts/gpu_measure.sh that run on the GPU machine, so that every part fits one 10-minute command.

    python3 scripts/gpu_part.py ladder LADDER RUNGS ROUNDS SWEEP_ID [key=value ...]
        Measure rungs RUNGS (``3`` or ``0-5``) of a ladder, for rounds ROUNDS (``0`` or ``1-2``), into the sweep
        SWEEP_ID: the same settings, cache, failed-rung rules and launch path (every run forked from one warm
        launcher) as `python -m harness sweep`, so rungs measured in separate commands (each on a fresh machine)
        make one sweep once their records are in one results folder. A rung this sweep already has for that round
        is kept (a part started again resumes), unless it ended error or timeout. Exit 1 if a rung measured here
        failed by ``failure``'s rule (an injected fault, or the out-of-memory that ends a stop_on_oom ladder, is
        what was asked for).
    python3 scripts/gpu_part.py total LADDER ROUNDS SWEEP_ID [key=value ...]
        A guide's total: rung 0 against the ladder's last rung, rounds ROUNDS in ABBA order, into SWEEP_ID.
    python3 scripts/gpu_part.py rung LADDER RUNG SWEEP_ID [key=value ...]
        The same for one rung, round 0.
    python3 scripts/gpu_part.py table RESULTS_DIR BEFORE_LIST LADDER
        The table (`python -m harness table`) of each sweep of LADDER that a record written since BEFORE_LIST joined.
    python3 scripts/gpu_part.py check RESULTS_DIR BEFORE_LIST [strict]
        With strict (the headline's): exit 1 if a record written since BEFORE_LIST ended otherwise than ok. Else
        exit 1 if a record written since BEFORE_LIST (the record files present before the part) ended error,
        timeout, nan or oom, or was skipped because compile failed on the model (a harness or model problem, not a
        knob that cannot act here); an injected fault, or the out-of-memory that ends a stop_on_oom ladder, is
        what was asked for. One line per record; no record at all is not a failure.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness import api  # noqa: E402 (the harness of this checkout, on the path above)

FAILED = ("error", "timeout", "nan", "oom")
RETRIED = ("error", "timeout")  # a rung that ended so is measured again when its part runs again
COMPILE_FAILED = re.compile(r"compile=\S+ failed on this model")


def span(text: str, what: str, limit: int | None = None) -> list[int]:
    """``3`` or ``0-5`` as a list of whole numbers (ValueError naming the bad value and what is valid)."""
    first, _, last = text.partition("-")
    if not first.isdigit() or (last and not last.isdigit()) or int(last or first) < int(first):
        raise ValueError(f"{what} {text!r} is not valid: give N or FIRST-LAST, e.g. 3 or 0-5")
    values = list(range(int(first), int(last or first) + 1))
    if limit is not None and values[-1] >= limit:
        raise ValueError(f"{what} {text!r} is not valid: choose within 0..{limit - 1}")
    return values


def ladder(ladder_name: str, rungs_text: str, rounds_text: str, sweep_id: str, overrides: list[str]) -> int:
    """Rungs ``rungs_text`` of a ladder for rounds ``rounds_text``, each round in rung order."""
    sweep = _open(ladder_name, rounds_text, sweep_id, overrides)
    rungs, rounds = span(rungs_text, "rungs", len(sweep.ladder.rungs)), span(rounds_text, "rounds")
    return _turns(sweep, [(index, round_) for round_ in rounds for index in rungs])


def total(ladder_name: str, rounds_text: str, sweep_id: str, overrides: list[str]) -> int:
    """A guide's total: the ladder's rung 0 against its last rung (every change of the guide), round after round
    in ABBA order (0 then last, last then 0, ...), so that a drift of the machine over the part hits both alike."""
    sweep = _open(ladder_name, rounds_text, sweep_id, overrides)
    last = len(sweep.ladder.rungs) - 1
    code = _turns(sweep, [(index, round_) for round_ in span(rounds_text, "rounds")
                          for index in ((0, last) if round_ % 2 == 0 else (last, 0))])
    print(total_verdict(sweep.results_dir, sweep_id, sweep.ladder), flush=True)
    return code


def total_verdict(results_dir: str, sweep_id: str, lad) -> str:
    """The guide total's verdict from a sweep of its two ends: the last rung over rung 0 as the sweep's table
    measures it (its band from the rounds), against the ladder's total claim (the table's own total line says
    the same: docs/statistics.md)."""
    last = len(lad.rungs) - 1
    try:
        rows = {row.rung: row for row in api.load_table(results_dir, sweep_id).rows}
    except ValueError as exc:
        return f"{lad.name} total: no table ({exc})"
    row = rows.get(last)
    measured = (row.x_previous if row.built_on == 0 else row.x_baseline) if row else None
    claim = lad.total_claim
    head = f"{lad.name} total, rung {last} over rung 0: {api.band_text(measured)}; the guide claims "
    head += f"{claim.low:g}-{claim.high:g}x" if claim.low != claim.high else f"{claim.low:g}x"
    if measured is None:
        return head + ": not measured (rung 0 or the last rung did not run ok)"
    return head + f": {api.claim_verdict(measured, claim.low, claim.high)}"


def _turns(sweep: api.Sweep, turns: list[tuple[int, int]]) -> int:
    """Measure (rung, round) turns in order into the sweep (one that it has is kept); 1 when one fails the part."""
    code = 0
    for turn in sweep.measure(turns, keep=lambda rung, round_: _kept(sweep, rung, round_)):
        code |= _said(sweep, turn)
    return code


def _said(sweep: api.Sweep, turn: api.Turn) -> int:
    """Print what one rung of one round did: 1 when it fails the part."""
    label = f"{sweep.ladder.name} rung {turn.rung}" + (f" round {turn.round}" if turn.round else "")
    if turn.how == "kept":
        print(f"{label}: already measured in sweep {sweep.sweep_id}")
        return 0
    rec = turn.record
    if rec is None:
        print(f"{label}: not run: {turn.message}")
        return 0
    tail = (rec.error or "").strip().splitlines()
    speed = f" {rec.samples_per_s:.2f} samples/s" if rec.samples_per_s else ""
    verdict = failure(rec.status, rec.error or "", sweep.ladder.name, rec.config_json or "{}")
    print(f"{label} ({rec.change or 'baseline'}): {rec.status} ({turn.how}){speed}"
          + (f": {tail[-1][:200]}" if tail else "") + (f"  <- FAILS THE PART: {verdict}" if verdict else ""),
          flush=True)
    return int(bool(verdict))


def _open(ladder_name: str, rounds_text: str, sweep_id: str, overrides: list[str]) -> api.Sweep:
    return api.open_sweep(ladder_name, sweep_id, overrides, rounds=span(rounds_text, "rounds")[-1] + 1)


def _kept(sweep: api.Sweep, rung: int, round_: int) -> bool:
    """Whether this sweep has a record of the rung in this round that is not to be measured again."""
    try:
        mine = api.load_runs(sweep.results_dir, columns=["rung", "round", "status"],
                             where={"sweep_id": sweep.sweep_id})
    except ValueError:  # no results folder yet
        return False
    mine = mine[(mine["rung"] == rung) & (mine["round"].fillna(0) == round_)]
    return bool((~mine["status"].isin(RETRIED)).any())


def _new_records(results_dir: str, before_list: str) -> list[str]:
    """The record files under ``results_dir`` that BEFORE_LIST (the files present before the part) does not name."""
    before = set(Path(before_list).read_text().split()) if Path(before_list).exists() else set()
    return sorted(str(p) for p in api.runs_dir(results_dir).glob("*.parquet") if p.name not in before)


def table(results_dir: str, before_list: str, ladder_name: str) -> int:
    """Print the table of each sweep of ``ladder_name`` that a new record joined (1 when there is none)."""
    import subprocess

    new = _new_records(results_dir, before_list)
    rows = api.load_run_files(new) if new else None
    sweeps = sorted({s for s in rows[rows["ladder"] == ladder_name]["sweep_id"].dropna()}) if new else []
    if not sweeps:
        print(f"no new record of ladder {ladder_name}: no table")
        return 1
    return max(subprocess.run([sys.executable, "-m", "harness", "table", "--results", results_dir, "--sweep", sweep],
                              cwd=REPO).returncode for sweep in sweeps)


def check(results_dir: str, before_list: str, strict: bool = False) -> int:
    new = _new_records(results_dir, before_list)
    if not new:
        print("no new record (nothing measured, or every rung was measured already)")
        return 0
    bad = 0
    for row in api.load_run_files(new).itertuples():
        tail = (row.error or "").strip().splitlines()
        what = f"{row.ladder} rung {row.rung}" if row.ladder else "run"
        verdict = failure(row.status, row.error or "", row.ladder or "", row.config_json or "{}")
        verdict = verdict or (f"ended {row.status}, not ok" if strict and row.status != "ok" else "")
        launched = getattr(row, "launched_by", "") or ""  # fork (the warm launcher) or exec (a fresh interpreter)
        print(f"{what} {row.workload} {row.change or ''}: {row.status}" + (f" ({launched})" if launched else "")
              + (f": {tail[-1][:200]}" if tail else "") + (f"  <- FAILS THE PART: {verdict}" if verdict else ""))
        bad += bool(verdict)
    return 1 if bad else 0


def failure(status: str, error: str, ladder_name: str, config_json: str) -> str:
    """Why a record fails its part ("" when it does not)."""
    if status == "skipped":
        return "compile failed on the model" if COMPILE_FAILED.search(error) else ""
    if status not in FAILED:
        return ""
    if json.loads(config_json).get("debug", {}).get("fault", "none") != "none":
        return ""  # an injected fault ended as asked
    if status == "oom" and ladder_name and _stops_on_oom(ladder_name):
        return ""
    return f"ended {status}"


def _stops_on_oom(ladder_name: str) -> bool:
    try:
        return api.load_ladder(ladder_name).stop_on_oom
    except ValueError:
        return False


def main(argv: list[str]) -> int:
    try:
        if len(argv) >= 5 and argv[0] == "ladder":
            return ladder(argv[1], argv[2], argv[3], argv[4], argv[5:])
        if len(argv) >= 4 and argv[0] == "total":
            return total(argv[1], argv[2], argv[3], argv[4:])
        if len(argv) >= 4 and argv[0] == "rung":
            return ladder(argv[1], argv[2], "0", argv[3], argv[4:])
        if len(argv) == 4 and argv[0] == "table":
            return table(argv[1], argv[2], argv[3])
        if len(argv) in (3, 4) and argv[0] == "check" and argv[3:] in ([], ["strict"]):
            return check(argv[1], argv[2], strict=argv[3:] == ["strict"])
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
