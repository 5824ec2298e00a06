"""Data-bound or compute-bound? The verdict from three measurements of the same settings:
the loader alone (batches/s, no model), the model alone (one batch kept on the device, as nnU-Net's
dummy-data benchmark trainer does) and the full training step. Plain Python, no torch.

Where the full step was profiled (``profile.enabled=true``), its breakdown says more: a step the rates call
compute-bound (or balanced) during which the device idles most of the time is launch-bound, the host's kernel
launches setting the pace (``harness.analysis.views.profile.bound_by``).
The full step loads a batch and runs the model on it, so it cannot outpace either part measured alone: when it
does, by more than one run's noise, the three runs disagree, and the diagnosis says so before its verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from harness import shell
from harness.analysis.stats.busy import busy_reason
from harness.analysis.views import bound
from harness.analysis.views.profile import bound_by, bound_reason

LADDER = "diagnose"  # the ladder its three records are stored under: one run each, repeats are not its to take
DATA_BOUND_BELOW = 0.8  # loader rate / model rate under which the loader is the bottleneck
COMPUTE_BOUND_ABOVE = 1.25  # ... over which the model is
BOUND_SLACK = 1.10  # a full step this much faster than a part alone cannot be noise of one run
BALANCED_TAIL = " Both sides limit: speed up either and the other follows."  # balanced's, and no other verdict's


@dataclass
class Diagnosis:
    # data-bound, compute-bound, balanced, both: the loader and the device, launch-bound, unknown, busy (no verdict:
    # a part was measured while other processes took the machine)
    verdict: str
    loader_batches_per_s: float | None
    model_batches_per_s: float | None
    full_batches_per_s: float | None
    data_wait_frac: float | None
    text: str
    advice: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # measurements that contradict each other
    profile: str = ""  # what the full step's profile says bounds it, with its numbers ("" without a profile)


@dataclass(frozen=True)
class DataKnobs:
    """What can make the measured data cheaper: only knobs that act on the data these settings load."""

    lighter: tuple[str, ...] = ()  # augmentation overrides that act on this pipeline (data.augment=light, ...)
    own_dataset: bool = False  # the workload's own dataset (workload.dataset): the harness's data knobs cannot act


def _rate(record) -> float | None:
    if record is None or record.get("status") != "ok" or not record.get("samples_per_s"):
        return None
    return float(record["samples_per_s"]) / float(record["batch_size"])


def _plain_command(*words: str) -> str:
    return shell.command(*words)


def diagnose(loader: dict, model: dict, full: dict, device: str, num_workers: int, disk_uncached: bool,
             data: DataKnobs = DataKnobs(), command: Callable[..., str] = _plain_command,
             again: str = "") -> Diagnosis:
    """Each record a dict (with ``batch_size`` added); see the module docstring. ``command(COMMAND, WORD, ...)``
    is the complete command line that runs COMMAND with these settings and the words added (the caller's
    overrides, config folders and all); ``again``: the command that measures again with more steps."""
    found = _from_rates(loader, model, full, device, num_workers, disk_uncached, data, command, again)
    if found.verdict != "unknown" and (busy := _busy(found, loader, model, full, again or command("diagnose"))):
        return busy
    found = _with_device(found, full, command) if device == "cuda" else found
    return _with_profile(found, full.get("profile_json") if full.get("status") == "ok" else "")


def _busy(found: Diagnosis, loader: dict, model: dict, full: dict, again: str) -> Diagnosis | None:
    """No verdict where a part was measured on a busy machine (``stats.busy``, the rule of every verdict): its rate
    says more about the other processes than about the loader or the model. None where no part was."""
    busy = [(part, why) for part, record in (("the loader alone", loader), ("the model alone", model),
                                             ("the full step", full)) if (why := busy_reason(record))]
    if not busy:
        return None
    parts = "; ".join(f"{part}: {why}" for part, why in busy)
    return Diagnosis("busy", found.loader_batches_per_s, found.model_batches_per_s, found.full_batches_per_s,
                     found.data_wait_frac, f"no verdict: the machine was busy while it measured ({parts}).",
                     [f"see what else runs: {_plain_command('machine')}", f"then measure again: {again}"],
                     found.notes)


def _with_device(found: Diagnosis, full: dict, command: Callable[..., str]) -> Diagnosis:
    """On a GPU the full step's own reading (:func:`bound.limited_by`): the host's wait on the loader says data-bound
    only where the device idled meanwhile; a device busy the whole step while the host waits is both."""
    frac = full.get("device_step_frac") if full.get("status") == "ok" else None
    if found.verdict == "unknown" or frac is None or found.data_wait_frac is None:
        return found
    reading = bound.limited_by(found.data_wait_frac, float(frac))
    if reading.label in (found.verdict, bound.HOST, bound.UNKNOWN):
        return _near(found, reading)
    if reading.label != bound.BOTH:
        found.notes.append(f"the full step's own reading differs from the rates': {reading.text()}")
        return _near(found, reading)
    rates = _rates(found)
    found.text = (f"{reading.label}: in the full step, {reading.numbers()}; the rates alone said {found.verdict}: "
                  f"{rates}")
    found.verdict = reading.label
    found.advice = [f"both limit: a faster loader alone or a cheaper step alone shows little end to end; change "
                    f"both, e.g. more loader workers ({command('sweep', '+ladder=workers')}) and a cheaper step "
                    f"({command('sweep', '+ladder=precision')}), or climb both at once: {command('climb')}"]
    return _near(found, reading)


def _near(found: Diagnosis, reading: bound.Bound) -> Diagnosis:
    """The full step is one run: where its shares lie near a threshold (:meth:`bound.Bound.near`), the text says
    what another run may read, as a sweep's table reading all its runs would show."""
    if near := reading.near():
        found.text += (f" One run of the full step: {near} (a sweep's table reads the shares of all a rung's runs "
                       "and says where they straddle the line).")
    return found


def _rates(found: Diagnosis) -> str:
    """The text after the verdict, for another verdict to take: balanced's "both sides limit" sentence left out,
    which speaks for balanced alone (both limit otherwise: a faster loader alone shows little)."""
    return found.text.split(": ", 1)[1].replace(BALANCED_TAIL, "")


def _with_profile(found: Diagnosis, profile_json: str | None) -> Diagnosis:
    """The verdict refined by the full step's profile, where there is one that was taken."""
    try:
        reading = bound_reason(profile_json) if profile_json else ""
    except ValueError:
        reading = ""
    if not reading or reading.startswith("unknown"):
        return found
    found.profile = reading
    found.text += f" The full step's profile: {reading}."
    if bound_by(profile_json) == "launch-bound" and found.verdict in ("compute-bound", "balanced"):
        found.verdict = "launch-bound"
        found.text = "launch-bound: " + _rates(found)
        found.advice = ["fewer, larger launches: compile=reduce-overhead (CUDA graphs) or compile=default, or a "
                        "larger batch_size", *found.advice]
    return found


def _from_rates(loader: dict, model: dict, full: dict, device: str, num_workers: int, disk_uncached: bool,
                data: DataKnobs, command: Callable[..., str], again: str) -> Diagnosis:
    """The verdict from the three rates alone."""
    L, M, F = _rate(loader), _rate(model), _rate(full)
    wait = full.get("data_wait_frac") if full.get("status") == "ok" else None
    if L is None or M is None or F is None:
        failed = {k: r.get("status") for k, r in (("loader", loader), ("model", model), ("full step", full))
                  if _rate(r) is None}
        return Diagnosis("unknown", L, M, F, wait, f"no verdict: these measurements did not run ok: {failed}")
    ratio = L / M
    numbers = f"the loader delivers {L:.2f} batches/s, the model could take {M:.2f}; the full step runs at {F:.2f}"
    # What data wait is: host time blocked in next(loader). On CUDA the device may still be busy with queued work
    # meanwhile, so this is not "the GPU waits" (device-side time is the record's device_step_frac).
    waits = f"the training loop is blocked on the loader {100 * (wait or 0):.0f}% of the time"
    notes = impossible_orderings(L, M, F, again)
    workers = f"more loader workers (now {num_workers}): {command('sweep', '+ladder=workers')}"
    serial = _in_step(L, M, wait, num_workers)
    if ratio < DATA_BOUND_BELOW:
        advice = [workers] + _data_advice(data, disk_uncached) + _cpu_note(device)
        return Diagnosis("data-bound", L, M, F, wait, f"data-bound: {numbers}; {waits}.{serial}", advice, notes)
    if ratio > COMPUTE_BOUND_ABOVE:
        advice = [f"make the step cheaper: {command('sweep', '+ladder=precision')}",
                  f"then one knob at a time (compile, channels_last, batch, ...), each kept only when faster beyond "
                  f"noise: {command('climb')}"] + ([workers] if serial else [])
        return Diagnosis("compute-bound", L, M, F, wait, f"compute-bound: {numbers}; {waits}.{serial}", advice,
                         notes)
    return Diagnosis("balanced", L, M, F, wait,
                     f"balanced: {numbers}; {waits}.{serial}{BALANCED_TAIL}",
                     [f"loader workers overlap the two: {command('sweep', '+ladder=workers')}"] + _cpu_note(device),
                     notes)


def _in_step(L: float, M: float, wait: float | None, num_workers: int) -> str:
    """With no loader workers the loader's work runs inside the step, one after the model's: the rates add rather
    than overlap, and workers can take away at most the step's share spent loading ("" with workers)."""
    if num_workers or wait is None or not 0 < wait < 1:
        return ""
    return (f" With no loader workers the two run one after the other in the step (1/{L:.2f} + 1/{M:.2f} s a batch: "
            f"{1 / (1 / L + 1 / M):.2f} batches/s): workers can take away at most the loader's {100 * wait:.0f}% of "
            f"it, {1 / (1 - wait):.2f}x at most.")


def impossible_orderings(loader: float, model: float, full: float, again: str = "") -> list[str]:
    """What the three rates cannot be: a full step faster than a part of it alone (beyond one run's noise)."""
    notes = []
    for part, rate in (("the model alone", model), ("the loader alone", loader)):
        if full > rate * BOUND_SLACK:
            notes.append(f"the full step ({full:.2f} batches/s) ran faster than {part} ({rate:.2f}), which bounds it "
                         "from above: these runs disagree (each ran in its own process; a busy machine, or runs too "
                         "short to warm up, reorder them), so read the verdict with care"
                         + (f"; measure again with more steps: {again}" if again else ""))
    return notes


def _data_advice(data: DataKnobs, disk_uncached: bool) -> list[str]:
    """The data knobs that act on what was measured."""
    advice = []
    if data.lighter:
        advice.append(f"lighter augmentation: {' or '.join(data.lighter)}")
    if disk_uncached:
        advice.append("decode once instead of every item: data.cache=ram")
    if data.own_dataset:
        advice.append("the loader runs your dataset (workload.dataset) for every item: what its __getitem__ does "
                      "is the cost to cut (the harness's data.augment and data.cache do not act on it)")
    return advice


def _cpu_note(device: str) -> list[str]:
    if device == "cuda":
        return []
    return ["on a CPU the loader's workers and the model share the same cores: more workers can slow the model"]
