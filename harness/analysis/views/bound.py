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
"""

from __future__ import annotations

from dataclasses import dataclass

HOST_WAITING = 0.2  # a host blocked on its loader at least this share of its step waits on data
DEVICE_BUSY = 0.9  # a device busy at least this share of the host's step is busy the whole step

DATA = "data-bound"
COMPUTE = "compute-bound"
BOTH = "both: the loader and the device"
HOST = "host-bound"
UNKNOWN = "unknown"


@dataclass(frozen=True)
class Bound:
    """One reading of a step: its label and the two shares that decided it."""

    label: str
    data_wait_frac: float | None
    device_step_frac: float | None  # None on a CPU, or where CUDA events were not taken

    @property
    def data_limits(self) -> bool:
        """Whether the loader is (one of) what limits the loop."""
        return self.label in (DATA, BOTH)

    def numbers(self) -> str:
        """The shares, as words: "device busy 100% of the step, 31% waiting" ("" without a data wait)."""
        if self.data_wait_frac is None:
            return ""
        wait = f"{self.data_wait_frac:.0%} waiting"
        if self.device_step_frac is None:
            return wait
        return f"device busy {min(self.device_step_frac, 1.0):.0%} of the step, {wait}"

    def text(self) -> str:
        """The label with its numbers: "both: the loader and the device (device busy 100% ..., 31% waiting)"."""
        return f"{self.label} ({self.numbers()})" if self.numbers() else self.label


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


def baseline_line(data_wait_frac: float | None, device_step_frac: float | None) -> list[str]:
    """The table's reading line for its baseline on a GPU (none on a CPU, where the data wait column says it)."""
    found = limited_by(data_wait_frac, device_step_frac)
    if device_step_frac is None or found.label == UNKNOWN:
        return []
    said = f"limited by {found.text()}" if found.label == BOTH else found.text()
    return [f"(baseline): the loop is {said}."]
