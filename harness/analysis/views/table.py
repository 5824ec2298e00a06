"""The speedup table of a sweep (or of every sweep of a campaign), built from the store alone.

``build_table`` turns a sweep's records into rows of numbers, ratios and verdicts, with their notes, once: each step
(a rung's figures, its link to the rung it was built on, the scaling, the groups, the components' judgement, the
notes) is a function that returns what it made and changes nothing it is given, and the result is the frozen
``SweepTable`` of ``harness.analysis.views.rows``. ``harness.analysis.views.render`` writes it as markdown, CSV or
HTML, and ``python -m harness table`` (``harness.commands.table``) prints it; no renderer builds a row.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace

import numpy as np

from harness.analysis.stats import calibration, noise_model, speedup, sweepstats
from harness.analysis.views import components, cpu_bf16, diagnosis
from harness.analysis.views import scaling
from harness.analysis.stats.busy import BUSY_VERDICT, busy_reasons
from harness.analysis.views.claims import Claims
from harness.analysis.views.profile import bound_by
from harness.analysis.views.rows import CampaignRow, CampaignSummary, GroupRow, RungRow, SweepTable
from harness.config import ladder as ladder_mod
from harness.names import display_name_of_record
from harness.profiles import summary_from_json
from harness.store import load_runs, resolve_id, select_sweep

def load_table(results_dir: str, sweep: str = "latest", words=()) -> SweepTable:
    """The table of one sweep of the store in ``results_dir``, with the store's noise calibrations (ValueError
    for a missing folder or sweep); ``words``: the settings the sweep was given, where known (:func:`build_table`)."""
    frame = load_runs(results_dir, sweep=sweep)
    return build_table(calibration.calibration_frame(results_dir, frame), sweep, results_dir, words)


def build_table(frame, sweep: str = "latest", results_dir: str = "results", words=()) -> SweepTable:
    """The speedup table of one sweep from its records (and the store's calibrations in ``frame``, if any);
    ``results_dir`` is where the ladders this machine wrote (``<results_dir>/ladders/``) are looked for, and where
    the noise command its notes print stores a calibration; ``words``: the settings the sweep was given (where
    known: its workload's, carried by that command). The verdicts are those of ``sweepstats.judge``: the rung x
    round model at the sweep's last look. A pure function: the rows and their notes are made here once, and every
    renderer takes the table as it is."""
    records = select_sweep(frame, sweep)
    first = records.iloc[0]
    ladder_name = str(first["ladder"])
    ladder = _ladder_or_none(ladder_name, results_dir)
    claims = Claims.of(records, ladder, results_dir)
    measured = [_row(int(r), records[records["rung"] == r], claims) for r in sorted(records["rung"].dropna().unique())]
    noise = sweepstats.sweep_noise(frame, records)
    rungs = max([len(ladder.rungs) if ladder is not None else 1] + [r.rung + 1 for r in measured])
    figures = {k: (c[0], c[1]) for k, c in claims.by_rung.items()}
    judgement = sweepstats.judge(records, rungs, figures, claims.total[:2] if claims.total else None, claims.groups,
                                 noise)
    rows = scaling.efficiency(_link(measured, judgement), judgement)
    judged = components.judge(rows, [_group(g, rows, judgement) for g in claims.groups], records,
                              judgement.level or 0.05)
    hint = calibration.calibrate_hint(str(first["workload"]), str(first["size"]), str(first["device"]), results_dir,
                                      words)
    minutes, noise_note = _minutes(records), _noise_note(judgement, hint, _rounds_setting(ladder_name),
                                                     _given_rounds(first))
    notes = _notes(judged.rows, ladder, claims, judgement, noise_note, minutes, hint)
    notes += [n for n in (copied_rounds_note(records, frame, results_dir), cpu_bf16.note(records)) if n]
    return SweepTable(sweep_id=str(first["sweep_id"]), ladder=ladder_name, workload=workload_name(first),
                      device=str(first["device"]), hardware=noise_model.hardware_label(first, short=True),
                      size=str(first["size"]), rows=judged.rows, noise=noise.noise, notes=notes, groups=judged.groups,
                      readings=judged.readings, minutes=minutes, noise_note=noise_note,
                      memory_limit_gb=_memory_limit(records), **_total(claims, judgement))


def copied_rounds_note(records, frame, results_dir: str = "results") -> str:
    """Which rounds were copied from which earlier sweep (``sweep.rerun=false``), "" when none was: a round is
    copied whole from one earlier sweep or measured whole, so its session's shift is its round effect; a round whose
    copies stand beside runs measured now (their sweep of this session: an interrupted sweep resumed) says how many.
    The originals' sweeps are read from ``frame`` or, where it lacks them, from the store in ``results_dir``."""
    copied = records[records["cached_from"].fillna("") != ""]
    if not len(copied):
        return ""
    origin = dict(zip(frame["run_id"], frame["sweep_id"]))
    missing = sorted(set(copied["cached_from"]) - set(origin))
    if missing:
        try:
            found = load_runs(results_dir, columns=["run_id", "sweep_id"], where={"run_id": missing})
            origin.update(zip(found["run_id"], found["sweep_id"]))
        except ValueError:  # no store here (a frame built in memory)
            pass
    rounds_of = records["round"].fillna(0).astype(int)
    by_sweep: dict[str, Counter] = {}  # sweep -> runs copied from it, by round
    for original, round_ in zip(copied["cached_from"], rounds_of[copied.index]):
        by_sweep.setdefault(origin.get(original, "a sweep no longer in the store"), Counter())[round_] += 1
    runs_in = rounds_of.value_counts().to_dict()
    whole = {sweep: rounds for sweep, counts in by_sweep.items()
             if (rounds := sorted(r for r, n in counts.items() if n == runs_in[r]))}
    parts = [f"round{'s' if len(rounds) > 1 else ''} {', '.join(map(str, rounds))} from sweep {sweep}"
             for sweep, rounds in sorted(whole.items(), key=lambda item: item[1][0])]
    parts += [f"{n} of round {r}'s {runs_in[r]} runs from sweep {sweep}, the rest measured now"
              for sweep, counts in by_sweep.items() for r, n in sorted(counts.items()) if n < runs_in[r]]
    return ("copied from earlier sweeps (sweep.rerun=false): " + "; ".join(parts) + ". A round is copied whole from "
            "one earlier sweep or measured whole, so a session's shift is that round's effect and leaves the ratios "
            "(runs of this session, 30 minutes or less before, may stand beside fresh ones: an interrupted sweep "
            "resumed); sweep.rerun=true measures every round now")


def workload_name(record) -> str:
    """A sweep's workload as its table, plots, comparisons and report name it: the name, or for the inline
    ``custom`` workload the model it measured (``custom: pkg.module.Class``)."""

    return display_name_of_record(str(record["workload"]), record.get("config_json"))


def _memory_limit(records) -> float | None:  # the memory.limit_gb every run of the sweep had (None: none, or mixed)
    limits = records["memory_limit_gb"]
    return float(limits.iloc[0]) if limits.notna().all() and limits.nunique() == 1 else None


def _minutes(records) -> float | None:
    import pandas as pd

    stamps = pd.to_datetime(records["timestamp"], utc=True, errors="coerce", format="ISO8601").dropna()
    return float((stamps.max() - stamps.min()).total_seconds() / 60) if len(stamps) else None


def _ladder_or_none(name: str, results_dir: str = "results"):
    try:
        return ladder_mod.load(name, results_dir)
    except ValueError:
        return None


def _row(rung: int, runs, claims: Claims) -> RungRow:
    """One rung's row as its records say: statuses, figures, its claim, and why runs failed (no verdicts yet)."""
    ok = runs[(runs["status"] == "ok") & runs["samples_per_s"].notna()]
    cached = runs["cached_from"].fillna("") != ""
    claim = {}
    if rung in claims.by_rung:
        low, high, label, source = claims.by_rung[rung]
        claim = {"claim": label, "claim_source": source, "claim_range": (low, high) if low is not None else None,
                 "claim_component": claims.components.get(rung, "")}
    notes = []
    if len(ok) < len(runs):
        failed = runs[~runs.index.isin(ok.index)]
        error = str(failed["error"].iloc[-1] or "").strip().splitlines()
        notes.append(error[-1][:160] if error else "")
    if skips := _cudagraph_skips(ok):
        notes.append(f"no CUDA graphs: Inductor skipped capturing them ({skips} times)")
    return RungRow(rung=rung, change=str(runs["change"].iloc[0]) or "(baseline)",
                   status="ok" if len(ok) else str(runs["status"].iloc[-1]),
                   how="cached" if cached.all() else ("measured" if not cached.any() else "partly cached"),
                   repeats=len(runs), statuses={str(k): int(v) for k, v in runs["status"].value_counts().items()},
                   busy=sum(bool(why) for why in busy_reasons(ok)),
                   notes=tuple(n for n in notes if n), **claim, **(_figures(ok) if len(ok) else {}))


def _figures(ok) -> dict:
    """A rung's figures from its ok runs: those of the quiet ones where any was quiet (a busy run's say nothing)."""
    quiet = ok[[not why for why in busy_reasons(ok)]]
    shown = quiet if len(quiet) else ok  # the figures of the runs the verdicts use
    throughputs = [float(v) for v in shown["samples_per_s"]]
    # GPU: the allocator's reserved peak is what must fit in the device (records older than it: allocated);
    # the allocated peak beside it, the live tensors a claim about memory is about
    cuda = (ok["device"] == "cuda").all()
    mem = ok["peak_vram_reserved_bytes"].fillna(ok["peak_vram_bytes"]) if cuda else ok["peak_host_rss_bytes"]
    retries = ok["window_cuda_alloc_retries"].fillna(ok["cuda_alloc_retries"])  # the window's (older: the run's)
    return {"samples_per_s_runs": throughputs, "samples_per_s": speedup.median(throughputs),
            "spread": speedup.relative_spread(throughputs), "runs": noise_model.runs_of(ok),
            "step_ms_p50": speedup.median(shown["step_ms_p50"]), "step_ms_p90": speedup.median(shown["step_ms_p90"]),
            "data_wait_frac": speedup.median(shown["data_wait_frac"]), "peak_mem_bytes": speedup.median(mem),
            "peak_mem_allocated_bytes": speedup.median(ok["peak_vram_bytes"]) if cuda else None,
            "device_mem_bytes": speedup.median(ok["gpu_mem_used_bytes"]) if cuda else None,
            "alloc_retries": int(retries.max()) if cuda and retries.notna().any() else None,
            "gpu_util_pct": speedup.median(ok["gpu_util_pct"]),
            "world_size": int(ok["world_size"].fillna(1).max()) if "world_size" in ok else 1,
            "bound": _profile_bound(ok),
            "parts": components.parts_of(quiet) if len(quiet) else None}  # a busy machine's parts say nothing


def _cudagraph_skips(ok) -> int:
    """The most CUDA-graph captures Inductor skipped in a run of the rung (0 where none, or not counted)."""
    if "cudagraph_skips" not in ok:
        return 0
    counts = ok["cudagraph_skips"].dropna()
    return int(counts.max()) if len(counts) else 0


def _profile_bound(ok) -> str:
    """What the newest profile among the rung's ok runs says bounds a step ("" where none was profiled)."""
    if "profile_json" not in ok:
        return ""
    for text in ok.sort_values("timestamp", ascending=False)["profile_json"]:
        try:
            summary = summary_from_json(text if isinstance(text, str) else "")
        except ValueError:
            continue
        if summary is not None and not summary.error:
            return bound_by(summary)
    return ""


def _link(rows: list[RungRow], judgement: sweepstats.Judgement) -> list[RungRow]:
    """The rows with x baseline, and x previous with its verdict: the rung over the last earlier rung that ran ok
    (what it was built on), from the sweep's rung x round model; a rung whose runs were all busy gets no verdict."""
    out, previous = [], None
    present = {row.rung for row in rows}
    for row in rows:
        if row.runs is None:
            out.append(row)
            continue
        out.append(_linked(row, previous, judgement, present))
        previous = row.rung
    return out


def _linked(row: RungRow, previous: int | None, judgement: sweepstats.Judgement,
            present: set[int] | None = None) -> RungRow:
    """One rung that ran ok, linked to the rung ``previous`` it was built on. A rung between that did not run ok
    was dropped from this one's settings (the sweep runs later rungs without its change); one with no record here
    at all (a guide's total measures rung 0 and the last alone) was not, and its change is in this rung's x
    previous too: then the rung's own claim is not judged. ``present``: the rungs with a row (None: all)."""
    notes, fields = list(row.notes), {}
    absent = [] if previous is None or present is None else \
        [r for r in range(previous + 1, row.rung) if r not in present]
    if absent:
        notes.append(f"built on rung {previous}: rungs {absent} have no record here, and their changes are in "
                     f"this rung too (x previous holds them; its own claim is not judged)")
    elif previous is not None and previous != row.rung - 1:
        notes.append(f"built on rung {previous} (rungs between did not run ok)")
    answer = judgement.answers.get(f"rung {row.rung}")
    if answer is not None:
        fields["x_previous"] = judgement.measured(answer)
        if answer.built_on is not None and answer.built_on != previous:
            notes.append(f"x previous over rung {answer.built_on} (the runs between were all on a busy machine)")
        if (row.claim_range and not absent) or answer.verdict.startswith("no verdict: machine busy"):
            fields["verdict"] = sweepstats.verdict_text(answer)
    return replace(row, uncertainty=judgement.uncertainty(row.rung), built_on=previous, absent=tuple(absent),
                   notes=tuple(notes),
                   x_baseline=judgement.ratio(row.rung, 0) if row.rung > 0 else None, **fields)


def _total(claims: Claims, judgement: sweepstats.Judgement) -> dict:
    """The table's total: its claim, and what was measured and the verdict where the sweep judged it."""
    if claims.total is None:
        return {}
    low, high, label, source = claims.total
    total = {"total_claim": f"{label} ({source})", "total_claim_range": (low, high)}
    answer = judgement.answers.get("total")
    if answer is not None:
        total |= {"total_measured": judgement.measured(answer), "total_verdict": sweepstats.verdict_text(answer)}
    return total


def _group(claim: dict, rows: list[RungRow], judgement: sweepstats.Judgement) -> GroupRow:
    """A group claim's verdict, like the total's: its last rung over the rung before its first, judged only when
    every one of those ran ok."""
    first, last = int(claim["first"]), int(claim["last"])
    figure = claim.get("low") is not None
    group = GroupRow(first=first, last=last, claim=claim["label"], claim_source=claim["source"],
                     claim_range=(float(claim["low"]), float(claim["high"])) if figure else None,
                     changes=", ".join(r.change for r in rows if first <= r.rung <= last),
                     component=claim.get("component", ""))
    answer = judgement.answers.get(f"rungs {first}-{last}")
    if answer is None:
        return replace(group, verdict=f"not measured (rungs {first}-{last} are not all in this sweep)")
    skipped = [r.rung for r in rows if first <= r.rung <= last and r.status == "skipped"]
    return replace(group, measured=judgement.measured(answer),
                   verdict=sweepstats.verdict_text(answer) if group.claim_range is not None else "",
                   # the device's: the guide's machine ran them
                   note=(f"rungs {skipped} skipped here (their knob cannot act on this device): judged without them"
                         if skipped else ""))


def _notes(rows: list[RungRow], ladder, claims: Claims, judgement: sweepstats.Judgement, noise_note: str,
           minutes: float | None, hint: str) -> list[str]:
    """The notes under the table: the ladder's, where it stopped or what is missing, the claims', a busy machine's,
    the noise's and what the bands rest on, and how a sweep.repeats=auto sweep ended."""
    notes = []
    if ladder is not None:
        notes.extend(ladder.notes)
        oom = [r for r in rows if r.status == "oom"]
        if ladder.stop_on_oom and oom:
            notes.append(f"memory ran out at rung {oom[0].rung} ({oom[0].change}); the ladder stopped there")
        have = {row.rung for row in rows}
        missing = [r.index for r in ladder.rungs if r.index not in have]
        if missing and not oom and {0, len(ladder.rungs) - 1} <= have:
            notes.append(f"rungs {missing} have no record in this sweep: the total is its last rung over rung 0, "
                         "every change in it; the rungs between are judged where they ran (run the sweep again to "
                         "measure them)")
        elif missing and not oom:
            notes.append(f"rungs {missing} have no record in this sweep (interrupted? run the sweep again to resume)")
    if claims.note:
        notes.append(claims.note)
    notes += _busy_notes(judgement) + list(judgement.noise.notes) + [noise_note]
    if judgement.max_rounds:
        notes.append(_stopping_note(judgement, minutes, hint))
    return notes


def _busy_notes(judgement: sweepstats.Judgement) -> list[str]:
    """Which runs a busy machine took out of the table, and which were measured again."""
    if not judgement.busy:
        return []
    again = len(judgement.busy) - len(judgement.left_out())
    rungs = sorted({rung for rung, _ in judgement.busy})
    reason = judgement.busy[min(judgement.busy)]
    text = (f"{judgement.busy_runs} run(s) of rungs {rungs} were measured on a busy machine ({reason}): "
            f"{BUSY_VERDICT}, so they are left out")
    if again:
        text += f" ({again} measured again on a quiet one in the same round)"
    return [text + "; measure on an idle machine"]


CLIMB_LADDER = "climb"  # the ladder of a climb's records (its LADDER_NAME; a test holds the two equal)


def _rounds_setting(ladder_name: str) -> str:
    """The setting that gives the records' command more rounds: a sweep's, a climb's, none for ``diagnose`` (it
    measures each part once: a calibration alone gives its table bands)."""
    return {diagnosis.LADDER: "", CLIMB_LADDER: "climb.repeats"}.get(ladder_name, "sweep.repeats")


def _given_rounds(first) -> str:
    """The ``sweep.repeats`` a sweep's records were measured under, as its settings were stored ("" unknown)."""
    try:
        return str(json.loads(first["config_json"] or "{}").get("sweep", {}).get("repeats", ""))
    except (ValueError, TypeError, AttributeError, KeyError):
        return ""


def _noise_note(judgement: sweepstats.Judgement, hint: str, rounds: str = "sweep.repeats", given: str = "") -> str:
    """What the bands rest on: the calibration, the runs' own spread, or nothing; ``hint``: how to calibrate
    (``calibration.calibrate_hint``); ``rounds``: the setting that takes more rounds ("": none); ``given``: the
    sweep's own ``sweep.repeats``, when a sweep that was to take more rounds ended after one (busy, its budget)."""
    noise = judgement.noise
    df = float(judgement.model.df[0])
    if noise.noise.calibrated:
        text = noise.noise.describe()
        if judgement.rounds == 1:
            smallest = noise_model.detectable_speedup(noise.noise.cv, noise.noise.df, 1, rungs=judgement.model.rungs)
            text += (f"; with one run a rung a speedup below ~{smallest:.2f}x is told from no change in fewer than "
                     f"{speedup.POWER:.0%} of sweeps" + (f": add {rounds}=3 for tighter bands" if rounds else ""))
        return text
    if df > 0:
        return (f"noise: no calibration here ({hint}); bands from the runs' own spread: the rung x round model, "
                f"{df:.0f} degrees of freedom")
    if judgement.rounds > 1:
        ran = int((~np.isnan(judgement.model.logs[0])).any(axis=1).sum())  # rungs with an ok run
        why = ("one rung leaves" if ran < 2 else
               "rungs that share too few rounds (a second round of one rung alone) leave")
        return f"noise: no calibration here, and {why} the rung x round model no degrees of freedom"
    more = f"add {rounds}=2 or " if rounds else ""
    if rounds == "sweep.repeats" and given not in ("", "1"):  # it was to take more: the same command adds them
        more = f"the sweep ended after its first round (it was given sweep.repeats={given}): run it again, or "
    return f"noise: no calibration here and one run a rung: no bands, no verdicts; {more}{hint}"


def _stopping_note(judgement: sweepstats.Judgement, took: float | None, hint: str) -> str:
    """How a sweep.repeats=auto sweep ended (``took``: its minutes): decided after N rounds, or the verdicts still
    open and what decides (``hint``: how to calibrate)."""
    rounds, budget = judgement.rounds, judgement.max_rounds
    when = f"{rounds} round(s)" + (f" ({took:.1f} minutes)" if took is not None else "")
    level = (f"bands at the {1 - judgement.level:.2%} level of look {rounds} of at most {budget}" if judgement.level
             else "no look yet (one round and no calibration)")
    if judgement.all_decided:
        return f"sweep.repeats=auto: decided after {when}; {level} (95% together over every look)"
    why = "the round budget was spent" if rounds >= budget else "stopped early (time budget spent, or interrupted)"
    opened = sweepstats.open_questions(judgement)
    busy = sum("no verdict: machine busy (" in q for q in opened)
    decide = f"more rounds (a larger sweep.max_repeats and sweep.budget_min) or a calibration ({hint}) would decide"
    advice = ("They need an idle machine" if busy == len(opened) else
              f"The busy ones need an idle machine; {decide} the others" if busy else f"M{decide[1:]} them")
    return f"sweep.repeats=auto: {why} after {when} with verdicts still open: {'; '.join(opened)}. {advice}; {level}"


# ------------------------------------------------------------------------------------------
# Campaigns: many sweeps launched as one (``sweep -m``)


def resolve_campaign_id(frame, campaign: str) -> str:
    """``latest`` (the campaign with the newest record) or a campaign id that exists; ValueError otherwise."""
    return resolve_id(frame, "campaign_id", campaign, "campaign", "python -m harness sweep -m +ladder=A,B ...")


def load_campaign(results_dir: str, campaign: str = "latest") -> CampaignSummary:
    """:func:`campaign_summary` of the store in ``results_dir`` (ValueError for a missing folder or campaign)."""
    return campaign_summary(load_runs(results_dir), campaign, results_dir)


def campaign_summary(frame, campaign: str = "latest", results_dir: str = "results") -> CampaignSummary:
    """One table per sweep of the campaign, and a line per sweep: total measured against claimed."""
    campaign_id = resolve_campaign_id(frame, campaign)
    records = frame[frame["campaign_id"] == campaign_id]
    sweep_ids = list(records.sort_values("timestamp")["sweep_id"].drop_duplicates())
    tables = [build_table(frame, s, results_dir) for s in sweep_ids]
    rows = [CampaignRow(sweep_id=t.sweep_id, workload=t.workload, ladder=t.ladder, device=f"{t.device} {t.hardware}",
                        total_measured=next((r.x_baseline for r in reversed(t.rows) if r.x_baseline), None),
                        total_claim=t.total_claim or "-", total_verdict=t.total_verdict or "-",
                        failed_rungs=sum(r.status != "ok" for r in t.rows))
            for t in tables]
    return CampaignSummary(campaign_id=campaign_id, rows=rows, tables=tables)
