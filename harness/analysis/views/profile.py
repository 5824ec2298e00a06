"""Reading profiles: one rung's (:func:`render_profile`), what changed between two (:func:`diff_profiles`,
:func:`render_diff`), what bounds a step (:func:`bound_by`), each rung's newest profile in a sweep's records
(:func:`rung_profiles`), and the report's HTML fragment (:func:`profile_html`).

Reads the summaries the records keep (``profile_json``, see ``harness.profiles``): no torch, no Hydra. Times are
milliseconds per profiled step.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from harness.analysis.views import bound
from harness.profiles import (DEVICE_PHASES, HOST_PHASES, PHASE_LABELS, OperatorTime, ProfileSummary,
                              summary_from_dict, summary_from_json)

DATA_BOUND_SHARE = 0.3  # the host waits for the next batch this much of the step: the loader sets the pace
LAUNCH_BOUND_IDLE = 0.6  # no kernel runs this much of the span, and the loader is not why: launches set the pace
UNCHANGED_REL = 0.1  # a phase or operator within 10% (or 0.1 ms) of its old time reads "unchanged"
UNCHANGED_MS = 0.1
TOP_ROWS = 10
PHASE_COLOURS = {"data_wait": "#d62728", "copy": "#ff7f0e", "forward": "#1f77b4", "backward": "#2ca02c",
                 "optimizer": "#9467bd", "other": "#8c8c8c", "idle": "#e0e0e0"}


def as_summary(value) -> ProfileSummary:
    """A ProfileSummary from a summary, its JSON object or its JSON text."""
    if isinstance(value, ProfileSummary):
        return value
    if isinstance(value, Mapping):
        return summary_from_dict(dict(value))
    summary = summary_from_json(value)
    if summary is None:
        raise ValueError("an empty profile_json: the run was not profiled")
    return summary


def bound_by(summary) -> str:
    """``data-bound``, ``both: the loader and the device``, ``launch-bound`` or ``compute-bound`` (``unknown`` for a
    failed profile).

    Data-bound: the host waits for batches >= 30% of the step while the device idles (on a GPU: both, the loader
    and the device, when the device runs kernels nearly all of the span). Launch-bound (CUDA): the device runs no
    kernel >= 60% of the span while the loader is not the cause. Else compute-bound: the step is busy doing its work."""
    s = as_summary(summary)
    if s.error or not s.steps or s.step_ms <= 0:
        return "unknown"
    return _bound(s.host_shares().get("data_wait", 0.0), (s.device_shares() or {}).get("idle"))


def _bound(wait: float, idle: float | None) -> str:
    """:func:`bound_by`'s rule on the host's data wait and the device's idle share of the span (None: no device)."""
    if wait >= DATA_BOUND_SHARE:
        # the host waits on the loader; data-bound only if the device idles meanwhile (harness.analysis.views.bound)
        return bound.BOTH if idle is not None and idle < 1 - bound.DEVICE_BUSY else "data-bound"
    if idle is not None and idle >= LAUNCH_BOUND_IDLE:
        return "launch-bound"
    return "compute-bound"


def bound_reason(summary) -> str:
    """:func:`bound_by`'s label with the numbers that decided it; where one lies within ``bound.NEAR`` of its line,
    what another profile of the same settings may read (a profile is one run's, by design: a rung profiles its
    newest run; ``bound.near_note``)."""
    s = as_summary(summary)
    label = bound_by(s)
    if label == "unknown":
        return f"unknown ({s.error or 'no profiled step'})"
    wait = s.host_shares().get("data_wait", 0.0)
    idle = (s.device_shares() or {}).get("idle")
    idle_text = f", the device idle {_pct(idle)} of the span" if idle is not None else ""
    near = bound.near_note(_bound, {"wait": wait, "idle": idle}, (
        ("wait", DATA_BOUND_SHARE, "data wait {:.0%}"), ("idle", 1 - bound.DEVICE_BUSY, "the device idle {:.0%}"),
        ("idle", LAUNCH_BOUND_IDLE, "the device idle {:.0%}")))
    near_text = f"; one profiled run: {near}" if near else ""
    return f"{label} (data wait {_pct(wait)} of the step{idle_text}{near_text})"


def render_profile(summary, title: str = "") -> str:
    """A profile as text: the breakdown, the top operators, compile's counters and the trace."""
    s = as_summary(summary)
    head = title or f"profile of run {s.run_id or '?'}"
    if s.error:
        return f"{head}: no profile ({s.error})\n"
    lines = [f"{head}: {s.device}, {s.steps} profiled steps, {_ms(s.step_ms)} ms a step: {bound_reason(s)}", ""]
    lines.append("step breakdown (host): " + _phases_text(s.host_ms, s.step_ms, HOST_PHASES))
    if s.device_ms is not None:
        lines.append("device (kernel time by the phase that launched it): "
                     + _phases_text(s.device_ms, s.step_ms, DEVICE_PHASES))
    if s.top_device:
        lines += ["", "top operators by self device time:", *_operator_rows(s.top_device, s.steps)]
    lines += ["", "top operators by self CPU time:", *_operator_rows(s.top_cpu, s.steps)]
    if s.compile is not None:
        c = s.compile
        lines += ["", f"torch.compile: {c.graph_breaks} graph breaks, {c.unique_graphs} graphs, {c.frames_compiled} "
                      f"frames compiled, {c.recompiles_while_profiling} of them while profiling"]
        lines += [f"  {reason}" for reason in c.break_reasons]
    lines += ["", _trace_text(s)]
    return "\n".join(lines) + "\n"


def _phases_text(ms: Mapping[str, float], step_ms: float, order: Sequence[str]) -> str:
    return " | ".join(f"{PHASE_LABELS[p]} {_ms(ms[p])} ms ({_pct(ms[p] / step_ms if step_ms else 0)})"
                      for p in order if p in ms)


def _operator_rows(ops: Sequence[OperatorTime], steps: int, rows: int = TOP_ROWS) -> list[str]:
    if not ops:
        return ["  (none)"]
    width = min(70, max(len(op.name) for op in ops[:rows]))
    out = [f"  {'operator':<{width}}  {'calls/step':>10}  {'ms/step':>9}  {'share':>6}"]
    for op in ops[:rows]:
        name = op.name if len(op.name) <= width else op.name[: width - 1] + "~"
        calls = f"{op.calls / steps:.0f}" if op.calls else "-"
        out.append(f"  {name:<{width}}  {calls:>10}  {_ms(op.total_ms / steps):>9}  {_pct(op.share):>6}")
    return out


def _trace_text(s: ProfileSummary) -> str:
    t = s.trace
    if t.path:
        cut = f"; {t.note}" if t.status == "truncated" else ""
        size = f"{t.bytes / 2**20:.1f} MiB" if t.bytes >= 2**20 else f"{t.bytes / 1024:.0f} KiB"
        return f"trace: {t.path} ({size}{cut}); open it in https://ui.perfetto.dev"
    return f"trace: none{f' ({t.note})' if t.note else ''}"


@dataclass
class Change:
    """One phase's or operator's time per step before and after (None: below that side's table of operators)."""

    name: str
    before_ms: float | None
    after_ms: float | None

    @property
    def delta_ms(self) -> float:
        return (self.after_ms or 0.0) - (self.before_ms or 0.0)

    @property
    def unchanged(self) -> bool:
        if self.before_ms is None or self.after_ms is None:
            return False
        return abs(self.delta_ms) < max(UNCHANGED_MS, UNCHANGED_REL * max(self.before_ms, self.after_ms))


@dataclass
class ProfileDiff:
    labels: tuple[str, str]
    step: Change
    host: list[Change]
    device: list[Change] | None  # both CUDA
    operators: list[Change]  # largest change first; by device time when both have it, else CPU time
    operator_time: str  # "self device time" or "self CPU time"
    bound: tuple[str, str]
    notes: list[str] = field(default_factory=list)


def diff_profiles(before, after, labels: tuple[str, str] = ("before", "after")) -> ProfileDiff:
    """What changed from ``before`` to ``after``: the step, each phase, and the operators whose time moved most."""
    b, a = as_summary(before), as_summary(after)
    for label, s in zip(labels, (b, a)):
        if s.error or not s.steps:
            raise ValueError(f"{label} has no profile to compare: {s.error or 'no profiled step'}")
    host = [Change(PHASE_LABELS[p], b.host_ms.get(p), a.host_ms.get(p)) for p in HOST_PHASES]
    device = None
    if b.device_ms is not None and a.device_ms is not None:
        device = [Change(PHASE_LABELS[p], b.device_ms.get(p), a.device_ms.get(p)) for p in DEVICE_PHASES]
    by_device = bool(b.top_device and a.top_device)
    ops_b, ops_a = (b.top_device, a.top_device) if by_device else (b.top_cpu, a.top_cpu)
    operators = _operator_changes(ops_b, b.steps, ops_a, a.steps)
    notes = []
    if b.device != a.device:
        notes.append(f"the two ran on different devices ({b.device} and {a.device})")
    return ProfileDiff(labels=(labels[0], labels[1]), step=Change("step", b.step_ms, a.step_ms), host=host,
                       device=device, operators=operators,
                       operator_time="self device time" if by_device else "self CPU time",
                       bound=(bound_by(b), bound_by(a)), notes=notes)


def _operator_changes(before: Sequence[OperatorTime], steps_b: int, after: Sequence[OperatorTime],
                      steps_a: int) -> list[Change]:
    per_b = {op.name: op.total_ms / steps_b for op in before}
    per_a = {op.name: op.total_ms / steps_a for op in after}
    names = list(dict.fromkeys([*per_b, *per_a]))
    changes = [Change(name, per_b.get(name), per_a.get(name)) for name in names]
    return sorted(changes, key=lambda c: -abs(c.delta_ms))


def reading(diff: ProfileDiff, operators: int = 2) -> str:
    """One line: the step, the operators that moved most and the data wait, e.g. ``bf16: step 120 -> 80 ms;
    convolution backward 41 -> 18 ms; data wait unchanged at 31 ms``."""
    parts = [f"step {_change_text(diff.step)}"]
    moved = [c for c in diff.operators if not c.unchanged][:operators]
    if moved:
        parts.append(", ".join(f"{pretty_operator(c.name)} {_change_text(c)}" for c in moved))
    wait = next(c for c in diff.host if c.name == PHASE_LABELS["data_wait"])
    parts.append(f"data wait {_change_text(wait)}")
    idle = next((c for c in diff.device or [] if c.name == PHASE_LABELS["idle"]), None)
    if idle is not None:
        parts.append(f"device idle {_change_text(idle)}")
    if diff.bound[0] != diff.bound[1]:
        parts.append(f"{diff.bound[0]} -> {diff.bound[1]}")
    return f"{diff.labels[1]}: " + "; ".join(parts)


def _change_text(c: Change) -> str:
    if c.unchanged:
        return f"unchanged at {_ms(c.after_ms)} ms"
    if c.before_ms is None:
        return f"new in the top operators at {_ms(c.after_ms)} ms"
    if c.after_ms is None:
        return f"{_ms(c.before_ms)} ms -> out of the top operators"
    return f"{_ms(c.before_ms)} -> {_ms(c.after_ms)} ms"


def pretty_operator(name: str) -> str:
    """``aten::convolution_backward`` -> ``convolution backward``."""
    return name.removeprefix("aten::").replace("_", " ").strip() or name


def render_diff(diff: ProfileDiff, rows: int = TOP_ROWS) -> str:
    """The diff as text: the reading, the phases side by side, and the operators that changed most."""
    first, second = diff.labels
    width = max(len(PHASE_LABELS[p]) for p in (*HOST_PHASES, *DEVICE_PHASES)) + 2
    lines = [reading(diff), *(f"note: {n}" for n in diff.notes), "",
             f"{'':<{width}}{first[:14]:>14}  {second[:14]:>14}  {'change':>10}"]
    lines.append(_diff_row(diff.step, width))
    lines += ["host:"] + [_diff_row(c, width) for c in diff.host]
    if diff.device is not None:
        lines += ["device:"] + [_diff_row(c, width) for c in diff.device]
    lines += ["", f"operators whose {diff.operator_time} changed most (ms per step; '-': not in that side's top):"]
    name_width = min(70, max([len(c.name) for c in diff.operators[:rows]] + [8]))
    for c in diff.operators[:rows]:
        name = c.name if len(c.name) <= name_width else c.name[: name_width - 1] + "~"
        lines.append(f"  {name:<{name_width}}  {_opt_ms(c.before_ms):>9} -> {_opt_ms(c.after_ms):>9}  "
                     f"{c.delta_ms:+.2f}")
    lines.append(f"bound: {diff.bound[0]} -> {diff.bound[1]}")
    return "\n".join(lines) + "\n"


def _diff_row(c: Change, width: int) -> str:
    return f"  {c.name:<{width - 2}}{_opt_ms(c.before_ms):>14}  {_opt_ms(c.after_ms):>14}  {c.delta_ms:>+10.2f}"


def _opt_ms(value: float | None) -> str:
    return "-" if value is None else _ms(value)


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 10:
        return f"{value:.0f}"
    return f"{value:.1f}" if abs(value) >= 1 else f"{value:.2f}"


def _pct(share: float) -> str:
    return f"{100 * share:.0f}%"


@dataclass
class RungProfile:
    """The profile a rung of a sweep kept: its newest ok run's that was taken, else its newest failed one."""

    rung: int
    label: str  # "rung K: change"
    run_id: str
    summary: ProfileSummary
    trace: str  # the record's profile_trace: relative to the results folder ("" without one)


def rung_profiles(records) -> list[RungProfile]:
    """Per rung of a sweep's records (a frame with ``rung``, ``change``, ``status``, ``timestamp``, ``run_id``,
    ``profile_json``, ``profile_trace``), in rung order, the profile it kept; rungs without one are left out."""
    if "profile_json" not in records:
        return []
    best: dict[int, tuple[tuple, RungProfile]] = {}
    for row in records.itertuples(index=False):
        text = row.profile_json if isinstance(row.profile_json, str) else ""
        if row.status != "ok" or not text or row.rung is None or row.rung != row.rung:
            continue
        try:
            summary = summary_from_json(text)
        except ValueError:
            continue
        rung = int(row.rung)
        label = f"rung {rung}: {row.change or '(baseline)'}"
        trace = row.profile_trace if isinstance(row.profile_trace, str) else ""
        key = (not summary.error, str(row.timestamp or ""), str(row.run_id))
        if rung not in best or key > best[rung][0]:
            best[rung] = (key, RungProfile(rung, label, str(row.run_id), summary, trace))
    return [best[rung][1] for rung in sorted(best)]


def profile_html(summaries_by_rung: Mapping[object, object], trace_links: Mapping[object, str] | None = None,
                 operators: int = 5) -> str:
    """The report's fragment: per rung (in the mapping's order) its breakdown as a stacked bar, what bounds it,
    its top operators and a link to its trace (``trace_links``: key -> href). Inline CSS only, no script."""
    links = trace_links or {}
    rows = [_html_rung(str(key), as_summary(value), links.get(key, ""), operators)
            for key, value in summaries_by_rung.items() if value]
    if not rows:
        return ""
    legend = " ".join(f'<span style="display:inline-block;width:10px;height:10px;background:{PHASE_COLOURS[p]};'
                      f'margin:0 3px 0 10px"></span>{html.escape(PHASE_LABELS[p])}'
                      for p in (*HOST_PHASES, "idle"))
    return ('<section class="profiles"><h2>Profiles: where each rung\'s step goes</h2>'
            f'<p style="font-size:small">{legend}</p>' + "".join(rows) + "</section>")


def _html_rung(label: str, s: ProfileSummary, link: str, operators: int) -> str:
    if s.error:
        return f"<div><b>{html.escape(label)}</b>: no profile ({html.escape(s.error)})</div>"
    bars = _html_bar("host", s.host_ms, s.step_ms, HOST_PHASES)
    if s.device_ms is not None:
        bars += _html_bar("device", s.device_ms, s.step_ms, DEVICE_PHASES)
    ops = s.top_device or s.top_cpu
    kind = "device" if s.top_device else "CPU"
    items = "".join(f"<li><code>{html.escape(op.name)}</code> {_ms(op.total_ms / s.steps)} ms "
                    f"({_pct(op.share)})</li>" for op in ops[:operators])
    trace = f' <a href="{html.escape(link, quote=True)}">trace</a>' if link else ""
    return (f'<div style="margin:12px 0"><b>{html.escape(label)}</b>: {_ms(s.step_ms)} ms a step, '
            f"{html.escape(bound_reason(s))}{trace}{bars}"
            f'<div style="font-size:small">top operators by self {kind} time:<ol>{items}</ol></div></div>')


def _html_bar(name: str, ms: Mapping[str, float], step_ms: float, order: Sequence[str]) -> str:
    cells = []
    for phase in order:
        share = ms.get(phase, 0.0) / step_ms if step_ms else 0.0
        if share <= 0:
            continue
        title = f"{PHASE_LABELS[phase]}: {_ms(ms[phase])} ms ({_pct(share)})"
        cells.append(f'<div title="{html.escape(title, quote=True)}" style="width:{100 * share:.2f}%;'
                     f'background:{PHASE_COLOURS[phase]};height:100%"></div>')
    return (f'<div style="display:flex;align-items:center;gap:6px;font-size:small">'
            f'<span style="width:50px">{name}</span><div style="display:flex;width:480px;height:14px;'
            f'border:1px solid #999">{"".join(cells)}</div></div>')
