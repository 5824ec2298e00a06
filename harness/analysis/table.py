"""The speedup table of a sweep (or of every sweep of a campaign), built from the store alone.

``build_table`` turns a sweep's records into rows of numbers, ratios and verdicts; ``harness.analysis.render``
writes them as markdown, CSV or HTML, and ``python -m harness table`` (``harness.commands.table``) prints them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from harness.analysis import components, noise_model, stats
from harness.analysis.profile import bound_by
from harness.profiles import summary_from_json
from harness.store import load_runs, resolve_id, resolve_sweep_id

MEMORY_NOTE = {"cuda": "peak VRAM reserved", "cpu": "peak host RSS"}  # what a rung's peak_mem_bytes is


@dataclass
class RungRow:
    rung: int
    change: str
    status: str  # ok, or the status of its (failed) runs
    how: str  # measured / cached / mixed
    repeats: int
    statuses: dict[str, int] = field(default_factory=dict)  # how many runs ended with each status
    samples_per_s: float | None = None
    spread: float | None = None  # relative (max-min)/median over repeats
    uncertainty: float | None = None
    x_baseline: stats.Ratio | None = None
    x_previous: stats.Ratio | None = None
    built_on: int | None = None
    step_ms_p50: float | None = None
    step_ms_p90: float | None = None
    data_wait_frac: float | None = None
    peak_mem_bytes: float | None = None
    peak_mem_allocated_bytes: float | None = None  # CUDA: the allocated peak (live tensors), beside the reserved
    gpu_util_pct: float | None = None
    claim: str = ""
    claim_range: tuple[float, float] | None = None
    claim_source: str = ""
    verdict: str = ""
    note: str = ""
    samples_per_s_runs: list[float] = field(default_factory=list)
    runs: noise_model.Runs | None = None  # the ok runs as the noise model sees them
    world_size: int = 1  # devices (ranks) of the rung's runs
    scaling_efficiency: float | None = None  # E(N) = X(N) / (N x X(1)), on rungs that change devices
    bound: str = ""  # what its newest profile says bounds a step (profile.enabled): data-, launch-, compute-bound
    parts: components.Parts | None = None  # the compute, data and validation parts of its step
    claim_component: str = ""  # the part of the step its claim is about ("" for the whole step)
    component_measured: stats.Ratio | None = None  # that part's ratio, which the verdict judged


@dataclass
class GroupRow:
    """A claim over rungs ``first``..``last`` together: rung ``last`` over the rung before ``first``."""

    first: int
    last: int
    claim: str
    claim_source: str
    claim_range: tuple[float, float] | None  # None for a claim with no figure
    changes: str = ""
    measured: stats.Ratio | None = None
    verdict: str = ""
    note: str = ""
    component: str = ""  # the part of the step the claim is about ("" for the whole step)
    component_measured: stats.Ratio | None = None


@dataclass
class SweepTable:
    sweep_id: str
    ladder: str
    workload: str
    device: str
    hardware: str
    size: str
    rows: list[RungRow]
    total_claim: str = ""
    total_verdict: str = ""
    total_measured: stats.Ratio | None = None
    total_claim_range: tuple[float, float] | None = None
    noise: noise_model.Noise = noise_model.DEFAULT
    notes: list[str] = field(default_factory=list)
    groups: list[GroupRow] = field(default_factory=list)
    readings: list[str] = field(default_factory=list)  # where a change's compute and end-to-end effects differ


def select_sweep(frame, sweep: str):
    """The records of one sweep (``latest`` or an id)."""
    return frame[frame["sweep_id"] == resolve_sweep_id(frame, sweep)]


def load_table(results_dir: str, sweep: str = "latest") -> SweepTable:
    """The table of one sweep of the store in ``results_dir``, with the store's noise calibration (ValueError
    for a missing folder or sweep)."""
    frame = noise_model.with_calibrations(results_dir, load_runs(results_dir, sweep=sweep))
    return build_table(frame, sweep, results_dir)


def build_table(frame, sweep: str = "latest", results_dir: str = "results") -> SweepTable:
    """The speedup table of one sweep from its records (and the store's calibration, if any); ``results_dir``
    is where the ladders this machine wrote (``<results_dir>/ladders/``) are looked for."""
    records = select_sweep(frame, sweep)
    sweep_id = str(records["sweep_id"].iloc[0])
    ladder_name = str(records["ladder"].iloc[0])
    ladder = _ladder_or_none(ladder_name, results_dir)
    claims = Claims.of(records, ladder, results_dir)
    rows = [_row(int(r), records[records["rung"] == r], claims) for r in sorted(records["rung"].dropna().unique())]
    first = records.iloc[0]
    device = str(first["device"])
    hardware = (f"{first['gpu_name']} x{int(first['gpu_count'])}" if device == "cuda"
                else f"{first['cpu_model']} ({int(first['cpu_count'])} CPUs)")
    table = SweepTable(sweep_id=sweep_id, ladder=ladder_name, workload=workload_name(first), device=device,
                       hardware=hardware, size=str(first["size"]), rows=rows,
                       noise=noise_model.noise_for(frame, records))
    _link(rows, table.noise)
    _scaling(rows)
    _total(table, claims)
    table.groups = [_group(g, rows, table.noise) for g in claims.groups]
    components.judge(table, records)
    _notes(table, ladder, records, claims)
    return table


def workload_name(record) -> str:
    """A sweep's workload as its table, plots, comparisons and report name it: the name, or for the inline
    ``custom`` workload the model it measured (``custom: pkg.module.Class``)."""
    from harness.names import display_name_of_record

    return display_name_of_record(str(record["workload"]), record.get("config_json"))


def _ladder_or_none(name: str, results_dir: str = "results"):
    from harness.sweeps import ladder as ladder_mod  # plain YAML reading, no torch: notes, and claims of old records

    try:
        return ladder_mod.load(name, results_dir)
    except ValueError:
        return None


@dataclass
class Claims:
    """The claims a sweep is judged against: stored with its records, or (older records) the ladder file's."""

    by_rung: dict[int, tuple[float | None, float | None, str, str]]  # rung -> (low, high, label, source)
    total: tuple[float, float, str, str] | None
    note: str = ""
    groups: list[dict] = field(default_factory=list)  # {first, last, low, high, label, source[, component]}
    components: dict[int, str] = field(default_factory=dict)  # rung -> the part of the step its claim is about

    @staticmethod
    def of(records, ladder, results_dir: str = "results") -> "Claims":
        stored = records["ladder_sha"].fillna("") != ""
        if stored.any():
            return Claims._stored(records[stored], ladder, results_dir)
        return Claims._from_ladder(ladder, str(records["ladder"].iloc[0]))

    @staticmethod
    def _stored(records, ladder, results_dir: str = "results") -> "Claims":
        by_rung, parts = {}, {}
        for _, r in records[records["claim_label"].fillna("") != ""].iterrows():  # a claim with no figure: no low
            by_rung[int(r["rung"])] = (_number(r["claim_low"]), _number(r["claim_high"]), r["claim_label"],
                                       r["claim_source"])
            if isinstance(r.get("claim_component"), str) and r["claim_component"]:
                parts[int(r["rung"])] = r["claim_component"]
        with_total = records[records["total_claim_low"].notna()]
        total = None
        if len(with_total):
            t = with_total.iloc[0]
            total = (float(t["total_claim_low"]), float(t["total_claim_high"]), t["total_claim_label"],
                     t["total_claim_source"])
        from harness.sweeps import ladder as ladder_mod

        sha, now = str(records["ladder_sha"].iloc[0]), ladder_mod.file_sha(str(records["ladder"].iloc[0]), results_dir)
        note = ("" if sha == now else f"the ladder file changed since this sweep (sha {sha} then, "
                f"{now or 'no file'} now): verdicts use the claims stored with the records")
        groups = next((json.loads(g) for g in records["group_claims_json"].fillna("") if g), [])
        return Claims(by_rung, total, note, groups, parts)

    @staticmethod
    def _from_ladder(ladder, name: str) -> "Claims":
        if ladder is None:
            return Claims({}, None)
        by_rung = {r.index: (r.claim.low, r.claim.high, r.claim.label(), r.claim.source)
                   for r in ladder.rungs if r.claim is not None}
        parts = {r.index: r.claim.component for r in ladder.rungs if r.claim is not None and r.claim.component}
        t = ladder.total_claim
        total = None if t is None else (t.low, t.high, t.label(), t.source)
        note = (f"these records predate stored claims: claims read from conf/ladder/{name}.yaml as it is now"
                if by_rung or total else "")
        from harness.sweeps import ladder as ladder_mod

        groups = json.loads(ladder_mod.group_claims_json(ladder.group_claims) or "[]")
        return Claims(by_rung, total, note, groups, parts)


def _number(value) -> float | None:
    """A stored claim bound (None for a claim with no figure, which pandas reads as NaN)."""
    return None if value is None or value != value else float(value)


def _row(rung: int, runs, claims: Claims) -> RungRow:
    ok = runs[(runs["status"] == "ok") & runs["samples_per_s"].notna()]
    statuses = {str(k): int(v) for k, v in runs["status"].value_counts().items()}
    status = "ok" if len(ok) else str(runs["status"].iloc[-1])
    cached = runs["cached_from"].fillna("") != ""
    how = "cached" if cached.all() else ("measured" if not cached.any() else "partly cached")
    row = RungRow(rung=rung, change=str(runs["change"].iloc[0]) or "(baseline)", status=status, how=how,
                  repeats=len(runs), statuses=statuses)
    if rung in claims.by_rung:
        low, high, row.claim, row.claim_source = claims.by_rung[rung]
        row.claim_range = (low, high) if low is not None else None
        row.claim_component = claims.components.get(rung, "")
    if len(ok):
        throughputs = [float(v) for v in ok["samples_per_s"]]
        row.samples_per_s_runs = throughputs
        row.samples_per_s = stats.median(throughputs)
        row.spread = stats.relative_spread(throughputs)
        row.runs = noise_model.runs_of(ok)
        row.step_ms_p50 = stats.median(ok["step_ms_p50"])
        row.step_ms_p90 = stats.median(ok["step_ms_p90"])
        row.data_wait_frac = stats.median(ok["data_wait_frac"])
        # GPU: the allocator's reserved peak is what must fit in the device (records older than it: allocated);
        # the allocated peak beside it, the live tensors a claim about memory is about
        cuda = (ok["device"] == "cuda").all()
        mem = ok["peak_vram_reserved_bytes"].fillna(ok["peak_vram_bytes"]) if cuda else ok["peak_host_rss_bytes"]
        row.peak_mem_bytes = stats.median(mem)
        row.peak_mem_allocated_bytes = stats.median(ok["peak_vram_bytes"]) if cuda else None
        row.gpu_util_pct = stats.median(ok["gpu_util_pct"])
        row.world_size = int(ok["world_size"].fillna(1).max()) if "world_size" in ok else 1
        row.bound = _profile_bound(ok)
        row.parts = components.parts_of(ok)
    if len(ok) < len(runs):
        failed = runs[~runs.index.isin(ok.index)]
        error = str(failed["error"].iloc[-1] or "").strip().splitlines()
        row.note = error[-1][:160] if error else ""
    skips = _cudagraph_skips(ok)
    if skips:
        note = f"no CUDA graphs: Inductor skipped capturing them ({skips} times)"
        row.note = f"{row.note}; {note}" if row.note else note
    return row


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


def _link(rows: list[RungRow], noise: noise_model.Noise) -> None:
    """x baseline and x previous (the last earlier ok rung: what this rung was built on)."""
    for row in rows:
        if row.runs is not None:
            row.uncertainty = noise_model.band(row.runs, noise)
    base = rows[0] if rows and rows[0].rung == 0 and rows[0].runs is not None else None
    previous = None
    for row in rows:
        if row.runs is None:
            continue
        if base is not None and row is not base:
            row.x_baseline = noise_model.ratio(row.runs, base.runs, noise)
        if previous is not None:
            row.x_previous = noise_model.ratio(row.runs, previous.runs, noise)
            row.built_on = previous.rung
            if previous.rung != row.rung - 1:
                built_on = f"built on rung {previous.rung} (rungs between did not run ok)"
                row.note = (row.note + "; " if row.note else "") + built_on
        if row.claim_range and row.x_previous is not None:
            row.verdict = stats.verdict(row.x_previous, *row.claim_range)
        previous = row


def _scaling(rows: list[RungRow]) -> None:
    """Scaling efficiency E(N) = X(N) / (N x X(1)) on the rungs that change ``devices``: X is the global
    throughput, X(1) that of the last earlier rung that ran ok on one device (1.0 is perfect scaling)."""
    single = None
    for row in rows:
        if row.samples_per_s is None:
            continue
        if row.change.startswith("devices=") and single is not None:
            row.scaling_efficiency = row.samples_per_s / (row.world_size * single)
        if row.world_size == 1:
            single = row.samples_per_s


def _total(table: SweepTable, claims: Claims) -> None:
    if claims.total is None:
        return
    low, high, label, source = claims.total
    table.total_claim = f"{label} ({source})"
    table.total_claim_range = (low, high)
    last = next((r for r in reversed(table.rows) if r.x_baseline is not None), None)
    if last is not None:
        table.total_measured = last.x_baseline
        table.total_verdict = stats.verdict(last.x_baseline, low, high)


def _group(claim: dict, rows: list[RungRow], noise: noise_model.Noise) -> GroupRow:
    """A group claim's verdict, like the total's: the last ok rung of the group over the last ok rung before it."""
    first, last = int(claim["first"]), int(claim["last"])
    figure = claim.get("low") is not None
    group = GroupRow(first=first, last=last, claim=claim["label"], claim_source=claim["source"],
                     claim_range=(float(claim["low"]), float(claim["high"])) if figure else None,
                     changes=", ".join(r.change for r in rows if first <= r.rung <= last),
                     component=claim.get("component", ""))
    before = next((r for r in reversed(rows) if r.rung < first and r.runs is not None), None)
    end = next((r for r in reversed(rows) if first <= r.rung <= last and r.runs is not None), None)
    if before is None or end is None:
        group.note = "no ok rung " + ("before the group" if before is None else "in the group")
        return group
    group.measured = noise_model.ratio(end.runs, before.runs, noise)
    if group.claim_range is not None:
        group.verdict = stats.verdict(group.measured, *group.claim_range)
    missing = [r for r in range(first, last + 1) if r not in {row.rung for row in rows if row.runs is not None}]
    if before.rung != first - 1 or missing:
        group.note = f"rung {end.rung} over rung {before.rung}" + (
            f"; rungs {missing} did not run ok" if missing else "")
    return group


def _notes(table: SweepTable, ladder, records, claims: Claims) -> None:
    if ladder is not None:
        table.notes.extend(ladder.notes)
        if ladder.stop_on_oom:
            oom = [r for r in table.rows if r.status == "oom"]
            if oom:
                table.notes.append(f"memory ran out at rung {oom[0].rung} ({oom[0].change}); the ladder stopped there")
        missing = [r.index for r in ladder.rungs if r.index not in {row.rung for row in table.rows}]
        if missing and not any(r.status == "oom" for r in table.rows):
            table.notes.append(f"rungs {missing} have no record in this sweep "
                               "(interrupted? run the sweep again to resume)")
    if claims.note:
        table.notes.append(claims.note)
    busy = records[(records["status"] == "ok") & (records["other_cpu_pct"].fillna(0) > stats.BUSY_PCT)]
    if len(busy):
        worst = float(busy["other_cpu_pct"].max())
        table.notes.append(f"rungs {sorted(set(int(r) for r in busy['rung']))} ran while other processes used up to "
                           f"{worst:.0f}% of the CPUs: their numbers are not trustworthy; measure on an idle machine")
    table.notes.append(_noise_note(table))


def _noise_note(table: SweepTable) -> str:
    ok = [r for r in table.rows if r.runs is not None]
    fewest = min((r.runs.n for r in ok), default=0)
    text = table.noise.describe()
    if fewest >= 2 and not table.noise.calibrated:
        text += f"; rungs with {fewest}+ runs: Welch t on the runs' own spread"
    if fewest == 1:
        smallest = noise_model.detectable_speedup(table.noise.cv, table.noise.df, 1)
        text += (f"; with one run per rung a speedup below ~{smallest:.2f}x cannot be told from noise: "
                 "add sweep.repeats=3 for tighter bands")
    return text


# ------------------------------------------------------------------------------------------
# Campaigns: many sweeps launched as one (``sweep -m``)


@dataclass
class CampaignRow:
    sweep_id: str
    workload: str
    ladder: str
    device: str
    total_measured: stats.Ratio | None
    total_claim: str
    total_verdict: str
    failed_rungs: int


@dataclass
class CampaignSummary:
    campaign_id: str
    rows: list[CampaignRow]
    tables: list[SweepTable]


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
