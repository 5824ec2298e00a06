"""What a change did to each part of the step, beside what it did end to end.

A rung's ``x previous`` is the whole loop's; when the loop waits on its loader, a change that makes the model
faster cannot show there. This module reads, from the records alone:

* the **compute** part of a step: on a GPU the device's own step time (CUDA events, ``device_step_ms``), on a CPU
  the host's step time minus the time blocked on the loader (``step_ms`` - ``data_wait_ms``, per step), as samples
  per second of compute, so that a larger batch compares fairly;
* the **data** part: the loader's throughput, which is the loop's own while the loop waits on it (a rung whose
  loop waits on data at least ``data_part.PACED_WAIT`` of its step) and only a lower bound once it no longer does;
* the **validation** passes: their time per training sample (the pass's extra time over an ordinary step, spread
  over the steps between passes).

A guide's claim about one part (``component:`` in a ladder, ``claim_component`` in a record) is judged on that
part; a claim with no figure ("minor") gets the measured effect and no verdict; a knob that cannot act in the
situation measured gets a note instead of a verdict. :func:`judge` returns the table's rows and group rows so judged
(new ones: it changes none it is given) and the reading lines. Plain Python: no torch, no Hydra.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace

from harness.analysis.views import bound, data_part, epochs
from harness.analysis.stats import blocks, speedup
from harness.analysis.views.rows import GroupRow, Parts, RungRow

DIFFERENT = 1.10  # compute and end-to-end ratios this far apart (and outside the band) get a reading line
NOT_JUDGED = "not judged here (see note)"
NO_PART_BAND = ("no verdict (one run a rung: a part of the step has no band, the calibration measured the whole "
                "run; another round gives it one)")


def parts_of(ok) -> Parts:
    """The parts of one rung's ok runs (a pandas frame of records), each run's value under its round (a round run
    twice, a resumed sweep, keeps its last run, as the rung x round model does)."""
    values, sources, ms, validation, costs = {}, set(), [], {}, {}
    for _, run in ok.iterrows():
        round_ = _round_of(run)
        if (cost := epochs.cost_of(run)) is not None:
            costs[round_] = cost
        steps, source = _compute_steps(run)
        per_step = _samples_per_step(run)
        if steps and per_step:
            middle = speedup.median(steps)
            if middle and middle > 0:
                ms.append(middle)
                values[round_] = 1000.0 * per_step / middle
                sources.add(source)
        rate = _validation_rate(run, per_step)
        if rate is not None:
            validation[round_] = rate
    compute = {"compute_ms": speedup.median(ms), "compute_source": sources.pop(), "compute": values} \
        if values and len(sources) == 1 else {}
    shares = tuple(zip(*(ok.get(column, [None] * len(ok)) for column in ("data_wait_frac", "device_step_frac"))))
    return Parts(device_step_frac=_median_column(ok, "device_step_frac"), validation=validation or None,
                 epoch_costs=costs or None, shares=shares, **compute)


def _round_of(run) -> int:
    value = run.get("round")
    return int(value) if value is not None and value == value else 0


def _median_column(frame, column: str) -> float | None:
    return speedup.median(frame[column]) if column in frame else None


def _samples_per_step(run) -> float | None:
    value = run.get("samples_per_step")
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def _compute_steps(run) -> tuple[list[float], str]:
    """A run's per-step compute times: the device's own on CUDA, else the host's step minus its data wait; none for
    a run of the loader alone (``measure.mode=loader``: no model, no compute to compare)."""
    if run.get("mode") == "loader":
        return [], ""
    device = speedup.floats(run.get("device_step_ms"))
    if run.get("device") == "cuda" and device:
        return device, "device"
    steps, waits = speedup.floats(run.get("step_ms")), speedup.floats(run.get("data_wait_ms"))
    if steps and len(steps) == len(waits):
        return [max(s - w, 0.0) for s, w in zip(steps, waits)], "host"
    return [], ""


def _validation_rate(run, per_step: float | None) -> float | None:
    """Training samples per millisecond of validation: the passes inside the measured window (steps after which
    ``val.every_n_steps`` runs one) cost their extra time over an ordinary step, once every N steps."""
    try:
        every = int((json.loads(run.get("config_json") or "{}").get("val") or {}).get("every_n_steps") or 0)
    except (TypeError, ValueError):
        return None
    steps, warmup = speedup.floats(run.get("step_ms")), run.get("warmup_steps")
    if not every or not steps or not per_step or warmup is None or math.isnan(float(warmup)):
        return None
    first = int(warmup)
    passes = [t for i, t in enumerate(steps) if (first + i + 1) % every == 0]
    others = [t for i, t in enumerate(steps) if (first + i + 1) % every != 0]
    if not passes or not others:
        return None
    extra_ms = speedup.median(passes) - speedup.median(others)
    return per_step * every / extra_ms if extra_ms > 0 else None


# ------------------------------------------------------------------------------------------
# the table's side: ratios, verdicts on component and word claims, notes, readings


@dataclass(frozen=True)
class Judged:
    """The components view of a sweep: its rows and group rows with their parts judged, and the reading lines."""

    rows: list[RungRow]
    groups: list[GroupRow]
    readings: list[str]


def judge(rows: list[RungRow], groups: list[GroupRow], records, level: float = 0.05) -> Judged:
    """The rows with their compute ratios, the claims about one part or with no figure judged again, the knobs that
    cannot act here noted; the group rows likewise; and the reading lines. Takes the rows the table's own verdicts
    made (``level``: the two-sided level of their bands, the last look's) and changes none of what it is given."""
    rows, groups, in_samples = _epochs_in_samples(rows, groups)
    by_rung = {r.rung: r for r in rows}
    rows = [_judge_row(row, by_rung.get(row.built_on) if row.built_on is not None else None, rows, records, level)
            for row in rows]
    groups = [_judge_group(group, rows, level) for group in groups]
    by_rung = {r.rung: r for r in rows}
    base = by_rung.get(0)
    readings = bound.baseline_line(bound.of_rung(base)) if base and base.parts else []
    readings += [line for line in (reading(r, by_rung.get(r.built_on)) for r in rows) if line]
    return Judged(rows, groups, readings + in_samples + _epoch_readings(rows, groups))


def _epochs_in_samples(rows: list[RungRow], groups: list[GroupRow]
                       ) -> tuple[list[RungRow], list[GroupRow], list[str]]:
    """A claim at a guide's epoch given in seconds (``epoch_s:S``) is judged at the samples the baseline makes here in
    S seconds (``epochs.in_samples``): the rows and group rows with those claims resolved, and the reading lines that
    say how many samples."""
    baseline = next((r for r in rows if r.rung == 0), None)
    costs = _costs(baseline) if baseline is not None and baseline.parts is not None else []
    lines = []

    def resolved(item, name: str):
        claim = getattr(item, name)
        seconds, samples = epochs.epoch_seconds(claim), epochs.in_samples(claim, costs)
        if seconds is None or samples == claim:
            return item
        lines.append(f"The guide's epoch of {seconds:,} s is {epochs.epoch_samples(samples):,} samples at the "
                     f"baseline's steady pace here (rung 0).")
        return replace(item, **{name: samples})

    return [resolved(r, "claim_component") for r in rows], [resolved(g, "component") for g in groups], lines


def part_values(row: RungRow, component: str) -> dict[int, float]:
    """``{round: value}`` of one part of a rung's runs: samples/s of compute, training samples/s of validation, or
    the throughput at the guide's epoch (``epoch:N``); empty when its runs do not show it."""
    parts = row.parts
    if parts is None:
        return {}
    if component == "compute":
        return parts.compute or {}
    if component == "validation":
        return parts.validation or {}
    samples = epochs.epoch_samples(component)
    return epochs.derived(parts.epoch_costs, samples) if samples and parts.epoch_costs else {}


def part_ratio(rows: list[RungRow], component: str, new: RungRow, old: RungRow,
               level: float = 0.05) -> speedup.Ratio | None:
    """One part's ratio new/old on the rung x round model of that part's values over every rung of the sweep (one
    variance pooled over them, rounds as blocks, no calibration: ``blocks.cells_ratio``)."""
    cells = {(row.rung, r): v for row in rows for r, v in part_values(row, component).items()}
    return blocks.cells_ratio(cells, new.rung, old.rung, level)


def _part_verdict(measured: speedup.Ratio, low: float, high: float, what: str) -> str:
    verdict = NO_PART_BAND if math.isnan(measured.low) else speedup.verdict(measured, low, high)
    return f"{verdict} ({what} {measured.value:.2f}x)"


def _epoch_readings(rows: list[RungRow], groups: list[GroupRow]) -> list[str]:
    """How each claim judged at the guide's epoch was derived (its verdict cell gives the figure only)."""
    by_rung, lines = {r.rung: r for r in rows}, []
    for row in rows:
        samples = epochs.epoch_samples(row.claim_component)
        before = by_rung.get(row.built_on) if row.built_on is not None else None
        if samples and before is not None and row.parts is not None and before.parts is not None:
            lines.append(epochs.reading(row.change, _costs(row), _costs(before), samples, row.component_measured))
    for group in groups:
        samples = epochs.epoch_samples(group.component)
        start, end = _group_ends(group, rows)
        if samples and end is not None and start is not None and end.parts and start.parts:
            lines.append(epochs.reading(f"rungs {group.first}-{group.last} together", _costs(end), _costs(start),
                                        samples, group.component_measured))
    return [line for line in lines if line]


def _costs(row: RungRow) -> list[epochs.EpochCost]:
    return list((row.parts.epoch_costs or {}).values())


def _judge_row(row: RungRow, before: RungRow | None, rows: list[RungRow], records, level: float) -> RungRow:
    """One row with its parts judged: the compute ratio over the rung it was built on, why its knob cannot act here,
    what its runs' windows could not measure (notes), and the verdict on a claim about one part."""
    if row.parts is not None:
        x_compute = (part_ratio(rows, "compute", row, before, level)
                     if before is not None and before.parts is not None else None)
        runs = records[records["rung"] == row.rung]
        ok = runs[runs["status"] == "ok"]
        notes = tuple(note for note in (queued_start_note(ok), short_of_waves_note(ok)) if note)
        row = replace(row, parts=replace(row.parts, x_compute=x_compute, inert=inert_reason(row.change, runs)),
                      notes=row.notes + notes)
    if row.verdict.startswith("no verdict: machine busy"):  # a busy machine's runs judge no part either
        return row
    if row.parts is not None and row.parts.inert:  # a note, not a verdict: the claim was made where the knob acts
        return replace(row, notes=row.notes + (row.parts.inert,), verdict=NOT_JUDGED if row.claim else row.verdict)
    if row.absent:
        return row  # its x previous holds the changes of rungs with no record here too: no claim of its own judged
    if row.claim and row.claim_range is None and row.x_previous is not None:
        return replace(row, verdict=measured_only(row.x_previous))
    if not row.claim_component or row.claim_range is None:
        return row
    measured, verdict = component_verdict(row.claim_component, row, before, *row.claim_range, rows=rows, level=level)
    return replace(row, component_measured=measured, verdict=verdict)


def _judge_group(group: GroupRow, rows: list[RungRow], level: float) -> GroupRow:
    if group.claim_range is None and group.measured is not None:
        return replace(group, verdict=measured_only(group.measured))
    if not group.component or group.claim_range is None:
        return group
    before, end = _group_ends(group, rows)
    if before is None or end is None:
        return group
    measured, verdict = component_verdict(group.component, end, before, *group.claim_range,
                                          end_to_end=group.measured, rows=rows, level=level)
    return replace(group, component_measured=measured, verdict=verdict)


def _group_ends(group: GroupRow, rows: list[RungRow]) -> tuple[RungRow | None, RungRow | None]:
    """(the last rung before the group that has runs, the group's last rung that has runs): what it is judged on."""
    before = next((r for r in reversed(rows) if r.rung < group.first and r.runs is not None), None)
    end = next((r for r in reversed(rows) if group.first <= r.rung <= group.last and r.runs is not None), None)
    return before, end


def measured_only(measured: speedup.Ratio) -> str:
    """The verdict cell of a claim with no figure: what was measured, and no verdict."""
    if math.isnan(measured.low) or math.isnan(measured.high):
        return f"no figure claimed: {measured.value:.2f}x, no band (no variance known)"
    effect = "within noise" if measured.within_noise else ("faster" if measured.value > 1 else "slower")
    return f"no figure claimed: {measured.value:.2f}x, {effect}"


def component_verdict(component: str, new: RungRow, old: RungRow | None, low: float, high: float,
                      end_to_end: speedup.Ratio | None = None, rows: list[RungRow] | None = None,
                      level: float = 0.05) -> tuple[speedup.Ratio | None, str]:
    """(the part's ratio new/old, the verdict on it) for a claim about ``component``; ``rows``: the sweep's rungs,
    whose values of that part the model pools (default: the two compared)."""
    if old is None or new.parts is None or old.parts is None:
        return None, ""
    rows = rows if rows is not None else [old, new]
    samples = epochs.epoch_samples(component)
    if epochs.epoch_seconds(component) is not None:  # not resolved: the baseline's runs showed no epoch boundary
        return None, "not measured: no epoch boundary inside the baseline's measured windows"
    if component in ("compute", "validation") or samples is not None:
        measured = part_ratio(rows, component, new, old, level)
        if measured is None:
            return None, {"compute": "not measured: no compute time in these records",
                          "validation": "not measured: no validation pass inside both measured windows"}.get(
                component, "not measured: no epoch boundary inside both measured windows")
        return measured, _part_verdict(measured, low, high, "at the guide's epoch" if samples else component)
    return data_part.verdict(new, old, low, high, end_to_end or new.x_previous)


QUEUED_LATE_WAIT = 0.2  # the window's last third waits on the loader at least this share of its steps...
QUEUED_EARLY_SHARE = 0.5  # ... and its first third less than this fraction of that
WAVE_WAIT = 0.2  # a window that waited on data this share of its time, shorter than two waves of its workers
WAVES_ENOUGH = 8  # ... or than this many, when its waits show the waves: at most an eighth off their pace
WAVE_SHARE = 0.7  # ... this share of its data wait on one step in num_workers


def queued_start_note(runs) -> str:
    """A note when the window opened on batches the loader's workers made during the warm-up (a long one: a
    compile) and ran into the loader's own pace only later: the first third of the window waited on data far less
    than the last (median over the runs), so the rung's throughput and data wait mix the two ("" otherwise)."""
    early, late = [], []
    for _, run in runs.iterrows():
        steps, waits = speedup.floats(run.get("step_ms")), speedup.floats(run.get("data_wait_ms"))
        third = len(steps) // 3
        if third < 2 or len(waits) != len(steps):
            continue
        early.append(sum(waits[:third]) / max(sum(steps[:third]), 1e-9))
        late.append(sum(waits[-third:]) / max(sum(steps[-third:]), 1e-9))
    if not late:
        return ""
    first, last = speedup.median(early), speedup.median(late)
    if last < QUEUED_LATE_WAIT or first >= QUEUED_EARLY_SHARE * last:
        return ""
    return (f"the window opened on batches made during the warm-up: waiting on data {first:.0%} of its first third, "
            f"{last:.0%} of its last; a longer window (measure.steps) measures the loader's own pace")


@dataclass(frozen=True)
class Waves:
    """A data-bound window too short for its loader's waves: ``in_step`` is the share of its data wait that fell on
    one step in ``workers`` (workers in step), or None when it held fewer than two waves (nothing to check)."""

    steps: int
    workers: int
    accum: int
    in_step: float | None = None


def short_of_waves(run) -> Waves | None:
    """A run (a record's fields: a table row or a dict) that waited on data over a window too short for its loader's
    waves. Workers that start together and take alike a batch (a fixed storage latency) hand over ``num_workers``
    batches at once, then none until the next wave, so a window's pace depends on where in a wave it opened and
    closed: by up to one wave in the window's count of them. Fewer than two waves: always; fewer than
    ``WAVES_ENOUGH``: when its waits show the waves (``WAVE_SHARE`` of the wait on one step in ``workers``; workers
    whose batches vary drift apart, and their waits spread; not checked when epochs start inside the window). None
    otherwise."""
    steps, waits = speedup.floats(run.get("step_ms")), speedup.floats(run.get("data_wait_ms"))
    config = json.loads(run.get("config_json") or "{}")
    data = config.get("data") or {}
    workers, epoch = int(data.get("num_workers") or 0), int(data.get("epoch_steps") or 0)
    accum = int(config.get("accumulate_grad_batches") or 1)
    if workers < 2 or not steps or sum(waits) < WAVE_WAIT * sum(steps):
        return None
    if len(steps) * accum < 2 * workers:
        return Waves(len(steps), workers, accum)
    if accum > 1 or len(steps) >= WAVES_ENOUGH * workers or 0 < epoch < len(steps):
        return None  # (epochs inside the window: its waits' period is the epoch's, the epoch rule's matter)
    share = sum(sorted(waits, reverse=True)[:math.ceil(len(steps) / workers)]) / sum(waits)
    return Waves(len(steps), workers, accum, share) if share >= WAVE_SHARE else None


def short_of_waves_text(waves: Waves) -> str:
    n, w = waves.steps, waves.workers
    if waves.in_step is None:
        return (f"its window of {n} steps waited on data and is shorter than two waves of the loader's {w} workers "
                f"(they hand over {w} batches together, then none until the next): it cannot measure their pace; "
                f"measure.steps={math.ceil(2 * w / waves.accum)} can")
    return (f"its loader's {w} workers hand over their batches in waves ({waves.in_step:.0%} of the window's data "
            f"wait fell on one step in {w}): a window of {n} steps holds {n // w} waves and can be off their pace by "
            f"up to 1/{n // w}; measure.steps={WAVES_ENOUGH * w} makes that 1/{WAVES_ENOUGH}")


def short_of_waves_note(runs) -> str:
    """``short_of_waves_text`` for a rung when at least half of its runs are so ("" otherwise)."""
    short = [found for _, run in runs.iterrows() if (found := short_of_waves(run))]
    if not short or 2 * len(short) < len(runs):
        return ""
    return short_of_waves_text(short[0])


def inert_reason(change: str, runs) -> str:
    """Why the rung's knob cannot do what it is claimed for in the situation its runs measured ("" when it can).
    ``log_every_n_steps`` acts by sparing the logging step's device sync (the loss read); each logging step also
    writes a metrics line, which acts everywhere, but that is a small cost, and the claims are about the sync."""
    key = change.split("=", 1)[0]
    if not len(runs) or key not in ("log_every_n_steps", "data.non_blocking", "cudnn_deterministic"):
        return ""
    first = runs.iloc[0]
    if key == "cudnn_deterministic":
        return "" if first.get("device") == "cuda" else "cudnn_deterministic cannot act on a CPU: there is no cuDNN"
    config = json.loads(first.get("config_json") or "{}")
    if key == "log_every_n_steps":
        only_write = "fewer logging steps save only their metrics lines, a small write each"
        if first.get("device") != "cuda":
            return ("log_every_n_steps saves no device sync on a CPU: reading the loss waits for no device queue; "
                    + only_write)
        if first.get("workload") == "detr":
            return ("log_every_n_steps saves no device sync on detr: its Hungarian matcher copies predictions to the "
                    "host every step, a sync of its own; " + only_write)
        return ""
    if first.get("device") != "cuda":
        return "data.non_blocking cannot act on a CPU: a batch is not copied to a device"
    if not (config.get("data") or {}).get("pin_memory"):
        return ("data.non_blocking cannot act without pinned memory (data.pin_memory is off): a copy from pageable "
                "memory waits for the host as before")
    return ""


def reading(row: RungRow, before: RungRow | None) -> str:
    """One line when what the change did to the compute part and what it did end to end differ ("" otherwise)."""
    parts = row.parts
    if parts is None or parts.x_compute is None or row.x_previous is None or parts.inert:
        return ""
    xc, xp = parts.x_compute.value, row.x_previous.value
    # on the point values: the end-to-end band holds the host's noise, which the compute part does not share
    if abs(math.log(xc / xp)) < math.log(DIFFERENT) or (parts.x_compute.within_noise and row.x_previous.within_noise):
        return ""
    what = "the device's step" if parts.compute_source == "device" else "the compute part (step minus data wait)"
    if math.isnan(parts.x_compute.low):
        moved = f"{xc:.2f}x (no band: one run a rung)"
    elif parts.x_compute.within_noise:
        moved = f"unchanged ({xc:.2f}x)"
    else:
        moved = f"{xc:.2f}x faster" if xc > 1 else f"{1 / xc:.2f}x slower"
    return f"{row.change}: {what} {moved} per sample, end to end {xp:.2f}x; {_why(row, before, parts)}."


def _why(row: RungRow, before: RungRow | None, parts: Parts) -> str:
    """What limited the loop before and after the change (:func:`bound.of_rung`: the host's wait on the loader, and on a
    GPU whether the device idled meanwhile, read from all the rung's runs)."""
    found = [bound.of_rung(r) for r in (before, row) if r and r.data_wait_frac is not None]
    if any(r.label == bound.BOTH or r.undecided for r in found):
        return f"the loop {'was' if len(found) > 1 else 'is'} {' -> '.join(r.said() for r in found)}"
    if any(r.data_limits for r in found):
        span = " -> ".join(f"{r.data_wait_frac:.0%}" for r in found)
        if parts.x_compute.value > row.x_previous.value:
            return f"the loop is data-bound: {span} waiting"
        return f"the change acted on the loader: {span} waiting"
    if parts.compute_source == "device":  # the device's share of each run's step (bound.pace, from all the runs)
        return bound.pace([device for _, device in parts.shares] or [parts.device_step_frac])
    return bound.REST_PACE
