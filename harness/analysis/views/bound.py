"""What limits a training loop: the loader, the device, or both at once. Plain Python, no torch.

The host's wait on its loader (``data_wait_frac``) alone does not say the loop is data-bound. On a GPU the host
queues the device's work and runs ahead of it, so the host may wait on the loader while the device is still busy
with the steps already queued: then the device is not starved, and a faster loader alone shows nothing, nor does a
cheaper step alone (the host would wait longer). The device's own share of the step (``device_step_frac``, CUDA
events) says which: data-bound only when the device sits idle while the host waits. On a CPU the model runs on
the host itself, so a host that waits is a model that waits: the wait alone decides.

* **data-bound**: the host waits (at least :data:`HOST_WAITING` of its step) and the device idles (busy less than
  :data:`DEVICE_BUSY` of the step); more or faster loader workers move the loop.
* **compute-bound**: the device is busy the whole step and the host does not wait; a cheaper step moves it.
* **both: the loader and the device**: the device busy the whole step *and* the host waiting: each limits, so a
  change to one side alone shows little end to end.
* **host-bound**: neither waits on the other, and the device idles: the host's own work (kernel launches,
  logging, the optimizer's host side) sets the pace.

A rung of a sweep is read from **all its runs** (:func:`of_runs`), not from the median alone: the shares vary from
run to run of one setting (an H200's three runs of the connectomics guide's baseline: device busy 88-93% of the
step, 37-47% waiting), so a median a point from a threshold names one side on one run's word. Where the runs agree,
the label is theirs; where they fall on both sides of a threshold, the reading says so ("data-bound or both: the
loader and the device (device busy 88-93% of the step over 3 runs, ...: the runs straddle 90% busy)") instead of
picking one. One run cannot show a straddle: its reading is its own, and :meth:`Bound.near` says when it lies within
:data:`NEAR` of a threshold, where another run of the same settings may read the other side. The error rates are
simulated in ``tests/test_bound.py`` (docs/statistics.md, "What limits the loop").

The table's other lines read all a rung's runs the same way, one share against one line (:class:`Side`):
:func:`pace`, whether the host sets the pace (under :data:`HOST_PACED_BUSY` busy), and the data claim's 20% wait
(``harness.analysis.views.data_part``); a profile, one run by design, says when it lies near one of its lines
(:func:`near_note`). Their error rates: ``tests/test_cuts.py``, ``tests/test_data_part.py``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from harness.analysis.views.rows import RungRow

HOST_WAITING = 0.2  # a host blocked on its loader at least this share of its step waits on data
DEVICE_BUSY = 0.9  # a device busy at least this share of the host's step is busy the whole step
# one run's share this close to a threshold may read the other side on the next run of the same settings: on an
# H200 the three runs of each phase 2 setting spread up to 8 points busy and 13 waiting (its baseline: 5 and 10)
NEAR = 0.05

DATA = "data-bound"
COMPUTE = "compute-bound"
BOTH = "both: the loader and the device"
HOST = "host-bound"
UNKNOWN = "unknown"
ORDER = (DATA, BOTH, COMPUTE, HOST)  # the order in which an undecided reading names its labels


@dataclass(frozen=True)
class Bound:
    """One reading of a step, or of a rung's runs: its label and the two shares that decided it (the runs' medians).
    Where the runs fall on both sides of a threshold, ``labels`` holds each label they read and ``label`` says
    "A or B"; ``waits`` and ``busy`` are the runs' (lowest, highest) shares where there are two runs or more."""

    label: str
    data_wait_frac: float | None
    device_step_frac: float | None  # None on a CPU, or where CUDA events were not taken
    labels: tuple[str, ...] = ()  # each label the runs read, where they read more than one (undecided)
    runs: int = 1
    waits: tuple[float, float] | None = None
    busy: tuple[float, float] | None = None

    @property
    def undecided(self) -> bool:
        """Whether the runs fall on both sides of a threshold."""
        return len(self.labels) > 1

    @property
    def data_limits(self) -> bool:
        """Whether the loader is (one of) what limits the loop, or may be, where the runs read more than one label."""
        return any(label in (DATA, BOTH) for label in self.labels or (self.label,))

    def numbers(self) -> str:
        """The shares, as words: "device busy 100% of the step, 31% waiting" ("" without a data wait); undecided:
        the runs' ranges and the thresholds they straddle."""
        if self.data_wait_frac is None:
            return ""
        if self.undecided and self.waits is not None:
            wait = f"{_span(*self.waits)} waiting"
            if self.busy is None:
                return f"{wait} over {self.runs} runs: the runs straddle {HOST_WAITING:.0%} waiting"
            lines = [f"{t:.0%} {what}" for t, what, (low, high) in
                     ((DEVICE_BUSY, "busy", self.busy), (HOST_WAITING, "waiting", self.waits))
                     if straddles(low, high, t)]
            return (f"device busy {_span(*self.busy)} of the step over {self.runs} runs, {wait}: the runs straddle "
                    + " and ".join(lines))
        wait = f"{self.data_wait_frac:.0%} waiting"
        if self.device_step_frac is None:
            return wait
        return f"device busy {min(self.device_step_frac, 1.0):.0%} of the step, {wait}"

    def text(self) -> str:
        """The label with its numbers: "both: the loader and the device (device busy 100% ..., 31% waiting)"."""
        return f"{self.label} ({self.numbers()})" if self.numbers() else self.label

    def said(self) -> str:
        """The reading after "the loop is": "limited by both: the loader and the device (...)", "data-bound (...)",
        "data-bound or limited by both: the loader and the device (...: the runs straddle 90% busy)"."""
        words = " or ".join(f"limited by {label}" if label == BOTH else label for label in self.labels or (self.label,))
        return f"{words} ({self.numbers()})" if self.numbers() else words

    def near(self) -> str:
        """For one run whose share lies within :data:`NEAR` of a threshold: what another run may read instead, e.g.
        "device busy 92%, within 5 points of 90%: another run of these settings may read data-bound" ("" when it
        is farther from both thresholds, or read from several runs, which show a straddle themselves)."""
        if self.runs != 1 or self.label == UNKNOWN or self.data_wait_frac is None:
            return ""
        return near_note(lambda device, wait: limited_by(wait, device).label,
                         {"device": self.device_step_frac, "wait": self.data_wait_frac},
                         (("device", DEVICE_BUSY, "device busy {:.0%}"), ("wait", HOST_WAITING, "{:.0%} waiting")))


def near_note(read: Callable[..., str], shares: dict[str, float | None],
              lines: Iterable[tuple[str, float, str]]) -> str:
    """One run's reading near its thresholds: for each (share, line, words) whose share lies within :data:`NEAR` of
    its line and whose reading (``read(**shares)``) changes across it, the share in ``words`` and what another run
    of the same settings may read: "device busy 92%, within 5 points of 90%: another run of these settings may read
    data-bound" ("" where no share is so near). Several runs show a straddle themselves (:func:`of_runs`)."""
    close, others = [], []
    for name, line, words in lines:
        value = shares[name]
        if value is None or abs(value - line) >= NEAR:
            continue
        other = read(**(shares | {name: line - NEAR if value >= line else line}))
        if other != read(**shares):
            close.append(f"{words.format(min(value, 1.0))}, within {NEAR * 100:.0f} points of {line:.0%}")
            others.append(other)
    return f"{' and '.join(close)}: another run of these settings may read {' or '.join(others)}" if close else ""


def straddles(low: float, high: float, line: float) -> bool:
    """Whether runs whose shares range over ``low``-``high`` fall on both sides of ``line`` (a share at the line
    itself belongs to the upper side)."""
    return low < line <= high


def _span(low: float, high: float) -> str:
    """A range of shares as percents, "88-93%" (one decimal where they round alike)."""
    digits = 0 if f"{low:.0%}" != f"{min(high, 1.0):.0%}" else 1
    return f"{low * 100:.{digits}f}-{min(high, 1.0) * 100:.{digits}f}%"


def limited_by(data_wait_frac: float | None, device_step_frac: float | None = None) -> Bound:
    """What limits a step whose host waited ``data_wait_frac`` of it on the loader while the device was busy
    ``device_step_frac`` of it (None: no device of its own, a CPU); see the module docstring."""
    if data_wait_frac is None:
        return Bound(UNKNOWN, None, device_step_frac)
    waits = data_wait_frac >= HOST_WAITING
    if device_step_frac is None:
        return Bound(DATA if waits else COMPUTE, data_wait_frac, None)
    busy = device_step_frac >= DEVICE_BUSY
    if waits:
        return Bound(BOTH if busy else DATA, data_wait_frac, device_step_frac)
    return Bound(COMPUTE if busy else HOST, data_wait_frac, device_step_frac)


def of_runs(shares: Iterable[tuple[float | None, float | None]]) -> Bound:
    """What limits a rung whose runs' steps had these (``data_wait_frac``, ``device_step_frac``) shares: the label
    its runs agree on, with their medians, or every label they read where they fall on both sides of a threshold
    (see the module docstring). One run: its own reading, :func:`limited_by`. A missing share (None, NaN) drops its
    run; where some runs have a device share, the runs without one are dropped."""
    runs = [(_number(wait), _number(device)) for wait, device in shares if _number(wait) is not None]
    if any(device is not None for _, device in runs):
        runs = [(wait, device) for wait, device in runs if device is not None]
    if len(runs) < 2:
        return limited_by(*runs[0]) if runs else Bound(UNKNOWN, None, None)
    waits, devices = [w for w, _ in runs], [d for _, d in runs if d is not None] or None
    middle = limited_by(statistics.median(waits), statistics.median(devices) if devices else None)
    spans = {"runs": len(runs), "waits": (min(waits), max(waits)),
             "busy": (min(devices), max(devices)) if devices else None}
    read = {limited_by(wait, device).label for wait, device in runs}
    if len(read) == 1:  # the median of runs on one side lies on that side: its label is theirs
        return replace(middle, **spans)
    labels = tuple(label for label in ORDER if label in read)
    return replace(middle, label=" or ".join(labels), labels=labels, **spans)


@dataclass(frozen=True)
class Side:
    """A rung's runs' values of one share against one line: ``over`` True where every run lies at or over it, False
    where every run lies under it, None where they fall on both sides (:func:`straddles`); read as :func:`of_runs`
    reads the two shares."""

    values: tuple[float, ...]
    line: float

    @property
    def over(self) -> bool | None:
        low, high = min(self.values), max(self.values)
        return None if straddles(low, high, self.line) else low >= self.line

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    def spread(self, words: str, unit: str) -> str:
        """The runs' range in ``words`` and the line they straddle: "the device is busy 66-74% of the window over 3
        runs: the runs straddle 70% busy" (``words`` "the device is busy {} of the window", ``unit`` "busy")."""
        return (f"{words.format(_span(min(self.values), max(self.values)))} over {len(self.values)} runs: the runs "
                f"straddle {self.line:.0%} {unit}")

    def near(self, words: str, read: Callable[[bool], str]) -> str:
        """For one run within :data:`NEAR` of the line (:func:`near_note`): "device busy 72%, within 5 points of 70%:
        another run of these settings may read READ(False)" (``read(over)``: the reading on each side; "" else)."""
        if len(self.values) != 1:
            return ""
        return near_note(lambda value: read(value >= self.line), {"value": self.values[0]},
                         (("value", self.line, words),))


def side(values: Iterable[float | None], line: float) -> Side | None:
    """The runs' values (a missing one, None or NaN, dropped) against ``line``; None where none is left."""
    kept = tuple(value for value in map(_number, values) if value is not None)
    return Side(kept, line) if kept else None


HOST_PACED_BUSY = 0.7  # a loop that does not wait, its device busy under this share of the window: the host's pace
HOST_PACE = "the host sets the pace"
REST_PACE = "the rest of the step (host work, logging, validation) sets the pace"


def pace(busy: Iterable[float | None]) -> str:
    """What sets the pace of a loop that does not wait on its loader, from its runs' device shares: the host where
    the device is busy less than :data:`HOST_PACED_BUSY` of the window, else the rest of the step; both, with their
    range, where the runs fall on both sides; one run near the line says what another may read."""
    found = side(busy, HOST_PACED_BUSY)
    if found is None:
        return REST_PACE
    if found.over is None:
        return (f"{found.spread('the device is busy {} of the window', 'busy')}: {HOST_PACE}, or "
                f"{REST_PACE.removesuffix(' sets the pace')} does")
    text = REST_PACE if found.over else f"the device is busy {found.median:.0%} of the window: {HOST_PACE}"
    near = found.near("device busy {:.0%}", lambda over: REST_PACE if over else HOST_PACE)
    return f"{text} (one run: {near})" if near else text


def of_rung(row: RungRow) -> Bound:
    """What limits a sweep's rung, read from all its runs (:func:`of_runs`; from its medians where its parts do not
    hold each run's shares)."""
    parts = row.parts
    if parts is not None and parts.shares:
        return of_runs(parts.shares)
    return limited_by(row.data_wait_frac, parts.device_step_frac if parts else None)


def _number(value) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def baseline_line(found: Bound) -> list[str]:
    """The table's reading line for its baseline on a GPU (none on a CPU, where the data wait column says it)."""
    if found.device_step_frac is None or found.label == UNKNOWN:
        return []
    return [f"(baseline): the loop is {found.said()}."]
