"""A rung's profile as the record keeps it: the summary's format (``profile_json``) and where its trace lives.

The measuring child profiles a few training steps after the measured window has closed
(``harness.run.child.profiling``) and writes a :class:`ProfileSummary`; analysis and commands read it back with
:func:`summary_from_json`. Pure Python (no torch), so that the store's readers can use it.

Times are milliseconds per profiled step, so that profiles of different step counts compare; a share is
of the profiled span (host wall time from the first profiled step's start to the last one's device work done).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

PROFILE_VERSION = 1
# The phases of a step on the host, in order; "other" is the rest of the step (logging sync, Python, hooks).
HOST_PHASES = ("data_wait", "copy", "forward", "backward", "optimizer", "other")
# On CUDA, the device's view: kernel time launched in each phase, and the span with no kernel running.
DEVICE_PHASES = ("forward", "backward", "optimizer", "other", "idle")
PHASE_LABELS = {"data_wait": "data wait", "copy": "host-to-device copy", "forward": "forward",
                "backward": "backward", "optimizer": "optimizer", "other": "other", "idle": "device idle"}
PROFILES_DIR = "profiles"  # in the results folder: <run_id>.trace.json.gz
TRACE_SUFFIX = ".trace.json.gz"
TRACE_STATUSES = ("none", "written", "truncated", "dropped", "failed")


@dataclass
class OperatorTime:
    """One operator's self time over the profiled steps (``calls`` and ``total_ms`` are totals, not per step)."""

    name: str
    calls: int
    total_ms: float
    share: float  # of the profiled span


@dataclass
class CompileStats:
    """What torch.compile did in the measuring process (Dynamo's counters at the profile's end)."""

    graph_breaks: int = 0
    unique_graphs: int = 0
    frames_compiled: int = 0
    recompiles_while_profiling: int = 0  # frames compiled during the profiled steps: the warm-up missed them
    break_reasons: list[str] = field(default_factory=list)  # the most frequent, first line each


@dataclass
class TraceInfo:
    """The Chrome/Perfetto trace: ``path`` relative to the folder it lies in (the results folder once stored)."""

    path: str = ""
    bytes: int = 0
    status: str = "none"  # one of TRACE_STATUSES
    note: str = ""


@dataclass
class ProfileSummary:
    """A profile of ``steps`` training steps run after the measured window (JSON-serialisable)."""

    device: str  # "cpu" or "cuda"
    steps: int
    span_ms: float  # the whole profiled span
    host_ms: dict[str, float]  # per step, by HOST_PHASES; they add up to step_ms
    device_ms: dict[str, float] | None = None  # CUDA only, per step, by DEVICE_PHASES; they add up to step_ms
    top_device: list[OperatorTime] = field(default_factory=list)  # by self device time (CUDA only)
    top_cpu: list[OperatorTime] = field(default_factory=list)  # by self CPU time
    compile: CompileStats | None = None  # None: not compiled
    trace: TraceInfo = field(default_factory=TraceInfo)
    run_id: str = ""
    error: str = ""  # profiling failed (the measurement stands): why
    version: int = PROFILE_VERSION

    @property
    def step_ms(self) -> float:
        return self.span_ms / self.steps if self.steps else 0.0

    def host_shares(self) -> dict[str, float]:
        return _shares(self.host_ms, self.step_ms)

    def device_shares(self) -> dict[str, float] | None:
        return None if self.device_ms is None else _shares(self.device_ms, self.step_ms)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def _shares(ms: dict[str, float], step_ms: float) -> dict[str, float]:
    return {phase: (value / step_ms if step_ms > 0 else 0.0) for phase, value in ms.items()}


def failed_summary(device: str, steps: int, error: str) -> ProfileSummary:
    """The summary of a profile that could not be taken: the record says why, and nothing else."""
    return ProfileSummary(device=device, steps=steps, span_ms=0.0, host_ms={}, error=error)


def summary_from_dict(data: dict) -> ProfileSummary:
    """A summary from its JSON object; keys this version does not know are ignored, missing ones take defaults."""
    known = {f.name for f in fields(ProfileSummary)}
    kwargs = {k: v for k, v in data.items() if k in known}
    kwargs["top_device"] = [_build(OperatorTime, op) for op in data.get("top_device") or []]
    kwargs["top_cpu"] = [_build(OperatorTime, op) for op in data.get("top_cpu") or []]
    kwargs["compile"] = _build(CompileStats, data["compile"]) if data.get("compile") else None
    kwargs["trace"] = _build(TraceInfo, data.get("trace") or {})
    kwargs.setdefault("host_ms", {})
    kwargs.setdefault("device", "")
    kwargs.setdefault("steps", 0)
    kwargs.setdefault("span_ms", 0.0)
    return ProfileSummary(**kwargs)


def _build(cls, data: dict):
    known = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in known})


def summary_from_json(text: str | None) -> ProfileSummary | None:
    """The summary a record's ``profile_json`` holds; None for an empty value (the run was not profiled).
    ValueError when it is not a profile summary."""
    if not text:
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"profile_json is not JSON ({exc})") from None
    if not isinstance(data, dict) or "host_ms" not in data:
        raise ValueError("profile_json is not a profile summary (no host_ms)")
    return summary_from_dict(data)


def trace_name(run_id: str) -> str:
    return f"{run_id}{TRACE_SUFFIX}"


def store_trace(summary_json: str, job_dir: str | os.PathLike, results_dir: str | os.PathLike,
                run_id: str) -> tuple[str, str]:
    """After the child: move the trace it wrote into ``job_dir`` to ``<results>/profiles/<run_id>.trace.json.gz``.

    Returns the record's ``(profile_json, profile_trace)``: the summary with its run id and the trace's new path,
    and that path relative to the results folder ("" without a trace). A trace that cannot be moved (a full or
    read-only results folder) is given up with a note in the summary: the measurement is kept either way.
    """
    summary = summary_from_json(summary_json)
    if summary is None:
        return "", ""
    summary.run_id = run_id
    source = Path(job_dir) / summary.trace.path if summary.trace.path else None
    if source is None or not source.is_file():
        summary.trace.path = ""
        return summary.to_json(), ""
    relative = f"{PROFILES_DIR}/{trace_name(run_id)}"
    try:
        target = Path(results_dir) / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if _same_device(source, target.parent):
            os.replace(source, target)
        else:  # the job folder is in /tmp, often another file system than the results folder
            _copy(source, target)
    except OSError as exc:
        summary.trace = TraceInfo(status="failed", note=f"the trace could not be kept in the results folder: "
                                                        f"{exc.strerror or exc} ({type(exc).__name__})")
        return summary.to_json(), ""
    summary.trace.path = relative
    return summary.to_json(), relative


def _same_device(a: Path, folder: Path) -> bool:
    return a.stat().st_dev == folder.stat().st_dev


def _copy(source: Path, target: Path) -> None:
    """Copy to a temporary name beside the target, then rename: a reader never sees half a trace."""
    import shutil

    partial = target.with_name(f".{target.name}.partial")
    shutil.copyfile(source, partial)
    os.replace(partial, target)
    source.unlink(missing_ok=True)
