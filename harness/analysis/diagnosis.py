"""Data-bound or compute-bound? The verdict from three measurements of the same settings:
the loader alone (batches/s, no model), the model alone (one batch kept on the device, as nnU-Net's
dummy-data benchmark trainer does) and the full training step. Plain Python, no torch.

Where the full step was profiled (``profile.enabled=true``), its breakdown says more: a step the rates call
compute-bound (or balanced) during which the device idles most of the time is launch-bound, the host's kernel
launches setting the pace (``harness.analysis.profile.bound_by``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.analysis.profile import bound_by, bound_reason

DATA_BOUND_BELOW = 0.8  # loader rate / model rate under which the loader is the bottleneck
COMPUTE_BOUND_ABOVE = 1.25  # ... over which the model is


@dataclass
class Diagnosis:
    verdict: str  # data-bound, compute-bound, balanced, unknown
    loader_batches_per_s: float | None
    model_batches_per_s: float | None
    full_batches_per_s: float | None
    data_wait_frac: float | None
    text: str
    advice: list[str] = field(default_factory=list)
    profile: str = ""  # what the full step's profile says bounds it, with its numbers ("" without a profile)


def _rate(record) -> float | None:
    if record is None or record.get("status") != "ok" or not record.get("samples_per_s"):
        return None
    return float(record["samples_per_s"]) / float(record["batch_size"])


def diagnose(loader: dict, model: dict, full: dict, device: str, num_workers: int, disk_uncached: bool) -> Diagnosis:
    """Each argument is a record as a dict (with ``batch_size`` added); see the module docstring."""
    found = _from_rates(loader, model, full, device, num_workers, disk_uncached)
    return _with_profile(found, full.get("profile_json") if full.get("status") == "ok" else "")


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
        found.text = "launch-bound: " + found.text.split(": ", 1)[1]
        found.advice = ["fewer, larger launches: compile=reduce-overhead (CUDA graphs) or compile=default, or a "
                        "larger batch_size", *found.advice]
    return found


def _from_rates(loader: dict, model: dict, full: dict, device: str, num_workers: int,
                disk_uncached: bool) -> Diagnosis:
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
    if ratio < DATA_BOUND_BELOW:
        advice = [f"more loader workers (now {num_workers}): python -m harness sweep +ladder=workers <same settings>",
                  "lighter augmentation: data.augment=light, or data.rotate=false / data.elastic=false"]
        if disk_uncached:
            advice.append("decode once instead of every item: data.cache=ram")
        return Diagnosis("data-bound", L, M, F, wait, f"data-bound: {numbers}; {waits}.", advice + _cpu_note(device))
    if ratio > COMPUTE_BOUND_ABOVE:
        advice = ["make the step cheaper: python -m harness sweep +ladder=precision <same settings>",
                  "then channels_last=true and compile=default (or +ladder=phase2 / phase4)"]
        return Diagnosis("compute-bound", L, M, F, wait, f"compute-bound: {numbers}; {waits}.", advice)
    return Diagnosis("balanced", L, M, F, wait,
                     f"balanced: {numbers}; {waits}. Both sides limit: speed up either and the other follows.",
                     ["loader workers overlap the two: python -m harness sweep +ladder=workers <same settings>"]
                     + _cpu_note(device))


def _cpu_note(device: str) -> list[str]:
    if device == "cuda":
        return []
    return ["on a CPU the loader's workers and the model share the same cores: more workers can slow the model"]
