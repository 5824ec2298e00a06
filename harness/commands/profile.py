"""``python -m harness profile [--results DIR] [--sweep ID|latest] [--rung K [--rung K2]] [--against SWEEP:RUNG]``

Why a rung is slow, from the profiles the sweep's runs kept (a sweep run with profiling on):
  no --rung                 one line per profiled rung: step time, what bounds it, its top operator
  --rung K                  rung K's profile: the step's breakdown, top operators, compile's counters, the trace
  --rung K --rung K2        what changed from rung K to rung K2, and which operators explain it
  --rung K --against S:R    what changed from rung R of sweep S to rung K of this sweep

Exit codes: 0 fine, 2 bad input (one line naming the bad value and the valid choices). No torch, no Hydra.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from harness import shell
from harness.analysis.views.profile import bound_by, diff_profiles, render_diff, render_profile
from harness.profiles import ProfileSummary, summary_from_json
from harness.store import load_runs

COLUMNS = ["run_id", "sweep_id", "ladder", "rung", "change", "status", "timestamp", "profile_json", "profile_trace"]
ENABLE = "profile.enabled=true"  # the setting that makes a sweep's runs keep a profile


@dataclass
class Profiled:
    """The profile a rung of a sweep kept (its newest usable one when the rung ran several times)."""

    sweep_id: str
    rung: int
    change: str
    run_id: str
    summary: ProfileSummary

    @property
    def label(self) -> str:
        return self.change or f"rung {self.rung}"


def main(command: str, argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m harness {command}", description=__doc__.split("\n\n")[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", default="results", help="results folder (default: results)")
    parser.add_argument("--sweep", default="latest", help="sweep id, or 'latest' (default)")
    parser.add_argument("--rung", action="append", default=[], help="a rung (twice: what changed between them)")
    parser.add_argument("--against", default=None, metavar="SWEEP:RUNG",
                        help="compare --rung with this rung of another sweep (SWEEP may be 'latest')")
    args = parser.parse_args(argv)
    try:
        text = build(args.results, args.sweep, args.rung, args.against)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


def build(results: str, sweep: str, rungs: list[str], against: str | None) -> str:
    """The command's output; ValueError (one line) for a bad value, before anything is printed."""
    numbers = [_rung_number(value) for value in rungs]
    if len(numbers) > 2:
        raise ValueError(f"--rung given {len(numbers)} times ({', '.join(rungs)}); give one rung to see its profile "
                         "or two to see what changed between them")
    if against is not None and len(numbers) != 1:
        raise ValueError(f"--against {against!r} compares one --rung with another sweep's rung: give exactly one "
                         f"--rung (given {len(numbers)})")
    other = _parse_against(against) if against is not None else None
    sweep_id, profiles, ladder = sweep_profiles(results, sweep)
    if not numbers:
        return overview(results, sweep_id, profiles, ladder)
    chosen = [_pick(profiles, k, sweep_id, _how_to_profile(ladder, results)) for k in numbers]
    if other is not None:
        other_id, other_profiles, other_ladder = sweep_profiles(results, other[0])
        before = _pick(other_profiles, other[1], other_id, _how_to_profile(other_ladder, results))
        labels = (f"{other_id}:{before.rung} {before.label}", chosen[0].label)
        return render_diff(diff_profiles(before.summary, chosen[0].summary, labels))
    if len(chosen) == 1:
        p = chosen[0]
        _point_trace_at(p.summary, results)
        return render_profile(p.summary, title=f"sweep {sweep_id}, rung {p.rung} ({p.label}), run {p.run_id}")
    return render_diff(diff_profiles(chosen[0].summary, chosen[1].summary, (chosen[0].label, chosen[1].label)))


def sweep_profiles(results: str, sweep: str) -> tuple[str, dict[int, Profiled], str]:
    """(the sweep's id, its profiled rungs, its ladder): per rung the newest ok run whose profile was taken,
    else the newest one whose profiling failed (so that the failure can be shown)."""
    frame = load_runs(results, sweep=sweep, columns=COLUMNS)
    if frame.empty:
        raise ValueError(f"sweep {sweep!r} has no records in {results!r}")
    sweep_id = str(frame["sweep_id"].iloc[0])
    ladder = str(next((v for v in frame["ladder"] if isinstance(v, str) and v), ""))
    ranked: dict[int, tuple[tuple, Profiled]] = {}
    for row in frame.itertuples(index=False):
        if row.status != "ok" or not isinstance(row.profile_json, str) or not row.profile_json or _missing(row.rung):
            continue
        summary = summary_from_json(row.profile_json)
        if row.profile_trace:
            summary.trace.path = str(row.profile_trace)
        key = (not summary.error, str(row.timestamp or ""), str(row.run_id))
        profiled = Profiled(sweep_id, int(row.rung), str(row.change or ""), str(row.run_id), summary)
        if int(row.rung) not in ranked or key > ranked[int(row.rung)][0]:
            ranked[int(row.rung)] = (key, profiled)
    return sweep_id, {k: ranked[k][1] for k in sorted(ranked)}, ladder


def _missing(value) -> bool:
    return value is None or value != value  # None, NaN or pandas' NA (which is not equal to itself)


def _pick(profiles: dict[int, Profiled], rung: int, sweep_id: str, how_to_profile: str) -> Profiled:
    if rung in profiles:
        return profiles[rung]
    if not profiles:
        raise ValueError(f"sweep {sweep_id} has no profiled rung; {how_to_profile}")
    valid = ", ".join(str(k) for k in profiles)
    raise ValueError(f"rung {rung} of sweep {sweep_id} has no profile; rungs with a profile: {valid}")


def _how_to_profile(ladder: str, results: str) -> str:
    """The hint that profiles a sweep of ``ladder``, into the results folder ``results`` (where profile reads)."""
    if ladder:
        where = [] if results == "results" else [shell.override("results_dir", results)]
        return f"profile its rungs with `{shell.command('sweep', f'+ladder={ladder}', ENABLE, *where)}`"
    return f"profile a sweep's rungs by adding {ENABLE} to its command"


def overview(results: str, sweep_id: str, profiles: dict[int, Profiled], ladder: str = "") -> str:
    """One line per profiled rung, and the commands that show one rung or the change between two."""
    if not profiles:
        raise ValueError(f"sweep {sweep_id} has no profiled rung; {_how_to_profile(ladder, results)}")
    width = max(8, *(len(p.label) for p in profiles.values()))
    lines = [f"sweep {sweep_id}: {len(profiles)} profiled rungs", "",
             f"{'rung':>4}  {'change':<{width}}  {'step ms':>8}  {'bound':<13}  top operator"]
    for k, p in profiles.items():
        s = p.summary
        if s.error:
            lines.append(f"{k:>4}  {p.label:<{width}}  {'-':>8}  {'-':<13}  no profile: {s.error[:80]}")
            continue
        ops = s.top_device or s.top_cpu
        top = f"{ops[0].name} ({100 * ops[0].share:.0f}%)" if ops else "-"
        lines.append(f"{k:>4}  {p.label:<{width}}  {s.step_ms:>8.1f}  {bound_by(s):<13}  {top}")
    results_arg = "" if results == "results" else f" --results {shlex.quote(results)}"
    first = next(iter(profiles))
    lines += ["", f"one rung:  python -m harness profile{results_arg} --sweep {sweep_id} --rung {first}"]
    if len(profiles) > 1:
        second = list(profiles)[1]
        lines.append(f"a change:  python -m harness profile{results_arg} --sweep {sweep_id} --rung {first} "
                     f"--rung {second}")
    return "\n".join(lines) + "\n"


def _point_trace_at(summary: ProfileSummary, results: str) -> None:
    """The trace's path as seen from here (the record keeps it relative to the results folder)."""
    if summary.trace.path:
        path = Path(results) / summary.trace.path
        summary.trace.path = str(path) if path.is_file() else f"{path} (missing)"


def _rung_number(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"--rung {value!r} is not a rung number (0, 1, 2, ...)") from None


def _parse_against(value: str) -> tuple[str, int]:
    sweep, sep, rung = value.rpartition(":")
    if not sep or not sweep:
        raise ValueError(f"--against {value!r} is not SWEEP:RUNG (e.g. latest:0, or a sweep id and a rung)")
    try:
        return sweep, int(rung)
    except ValueError:
        raise ValueError(f"--against {value!r}: {rung!r} is not a rung number (SWEEP:RUNG, e.g. latest:0)") from None
