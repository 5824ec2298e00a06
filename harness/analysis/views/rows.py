"""The sweep view's types: a rung's row, a group claim's row, the table (rows and notes) and a campaign's summary.

``harness.analysis.views.table.build_table`` makes them once per command, from the records alone; every renderer
(markdown, CSV, HTML, the terminal's rich table, the CI dashboards' JSON, the HTML report, the trackers' export)
takes them as they are. They are frozen: a renderer reads a row, it never fills one in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.analysis.stats import noise_model, speedup
from harness.analysis.views import epochs

MEMORY_NOTE = {"cuda": "peak VRAM reserved", "cpu": "peak host RSS"}  # what a rung's peak_mem_bytes is


@dataclass(frozen=True)
class Parts:
    """What one rung's ok runs say about the parts of their step (``harness.analysis.views.components``)."""

    compute_ms: float | None = None  # median over runs of a step's compute part
    compute_source: str = ""  # "device" (CUDA events) or "host" (step time minus data wait)
    compute: dict[int, float] | None = None  # round -> its run's samples per second of compute
    validation: dict[int, float] | None = None  # round -> its run's training samples per second of validation
    epoch_costs: dict[int, epochs.EpochCost] | None = None  # round -> its run's epoch boundaries' cost
    device_step_frac: float | None = None
    shares: tuple[tuple[float | None, float | None], ...] = ()  # each ok run's (data_wait_frac, device_step_frac)
    x_compute: speedup.Ratio | None = None  # over the rung this one was built on
    inert: str = ""  # why the rung's knob cannot do what it is claimed for here ("" when it can)


@dataclass(frozen=True)
class RungRow:
    rung: int
    change: str
    status: str  # ok, or the status of its (failed) runs
    how: str  # measured / cached / mixed
    repeats: int
    statuses: dict[str, int] = field(default_factory=dict)  # how many runs ended with each status
    busy: int = 0  # of its ok runs, those measured on a busy machine (left out of its figures and verdicts)
    samples_per_s: float | None = None
    spread: float | None = None  # relative (max-min)/median over repeats
    uncertainty: float | None = None
    x_baseline: speedup.Ratio | None = None
    x_previous: speedup.Ratio | None = None
    built_on: int | None = None
    absent: tuple[int, ...] = ()  # rungs between it and built_on with no record: their changes are in its x previous
    step_ms_p50: float | None = None
    step_ms_p90: float | None = None
    data_wait_frac: float | None = None
    peak_mem_bytes: float | None = None
    peak_mem_allocated_bytes: float | None = None  # CUDA: the allocated peak (live tensors), beside the reserved
    device_mem_bytes: float | None = None  # CUDA: NVML's device-wide memory in use (every process, CUDA context)
    alloc_retries: int | None = None  # CUDA: the most allocator retries of a run (memory pressure slows steps)
    gpu_util_pct: float | None = None
    claim: str = ""
    claim_range: tuple[float, float] | None = None
    claim_source: str = ""
    verdict: str = ""
    notes: tuple[str, ...] = ()  # why it failed, what it was built on, what its runs' windows could not measure
    samples_per_s_runs: list[float] = field(default_factory=list)
    runs: noise_model.Runs | None = None  # the ok runs as the noise model sees them
    world_size: int = 1  # devices (ranks) of the rung's runs
    scaling_efficiency: float | None = None  # E(N) = X(N) / (N x X(1)), on rungs that change devices or nodes
    scaling_band: tuple[float, float] | None = None  # its 95% band (the rung x round model)
    bound: str = ""  # what its newest profile says bounds a step (profile.enabled): data-, launch-, compute-bound
    parts: Parts | None = None  # the compute, data and validation parts of its step
    claim_component: str = ""  # the part of the step its claim is about ("" for the whole step)
    component_measured: speedup.Ratio | None = None  # that part's ratio, which the verdict judged

    @property
    def note(self) -> str:
        """The row's notes as one cell: ``; ``-joined ("" when none)."""
        return "; ".join(self.notes)

    @property
    def samples_per_s_band(self) -> tuple[float, float] | None:
        """The noise model's 95% band of the rung's throughput, (low, high); None without a figure or a band."""
        if self.samples_per_s is None or self.uncertainty is None:
            return None
        return self.samples_per_s * (1 - self.uncertainty), self.samples_per_s * (1 + self.uncertainty)


@dataclass(frozen=True)
class GroupRow:
    """A claim over rungs ``first``..``last`` together: rung ``last`` over the rung before ``first``."""

    first: int
    last: int
    claim: str
    claim_source: str
    claim_range: tuple[float, float] | None  # None for a claim with no figure
    changes: str = ""
    measured: speedup.Ratio | None = None
    verdict: str = ""
    note: str = ""
    component: str = ""  # the part of the step the claim is about ("" for the whole step)
    component_measured: speedup.Ratio | None = None


@dataclass(frozen=True)
class SweepTable:
    """One sweep's view: its rows, its group claims' rows, the total, and the notes and readings under them."""

    sweep_id: str
    ladder: str
    workload: str
    device: str
    hardware: str
    size: str
    rows: list[RungRow]
    total_claim: str = ""
    total_verdict: str = ""
    total_measured: speedup.Ratio | None = None
    total_claim_range: tuple[float, float] | None = None
    noise: noise_model.Noise = noise_model.DEFAULT
    notes: list[str] = field(default_factory=list)
    groups: list[GroupRow] = field(default_factory=list)
    readings: list[str] = field(default_factory=list)  # where a change's compute and end-to-end effects differ
    minutes: float | None = None  # from the sweep's first record to its last
    noise_note: str = ""  # what the bands rest on: the calibration, the runs' own spread, or nothing
    memory_limit_gb: float | None = None  # the device memory (memory.limit_gb) every run was capped at, if one


@dataclass(frozen=True)
class CampaignRow:
    sweep_id: str
    workload: str
    ladder: str
    device: str
    total_measured: speedup.Ratio | None
    total_claim: str
    total_verdict: str
    failed_rungs: int


@dataclass(frozen=True)
class CampaignSummary:
    campaign_id: str
    rows: list[CampaignRow]
    tables: list[SweepTable]
