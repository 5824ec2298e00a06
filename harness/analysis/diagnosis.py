"""Data-bound or compute-bound? The verdict from three measurements of the same settings:
the loader alone (batches/s, no model), the model alone (one batch kept on the device, as nnU-Net's
dummy-data benchmark trainer does) and the full training step. Plain Python, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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


def _rate(record) -> float | None:
    if record is None or record.get("status") != "ok" or not record.get("samples_per_s"):
        return None
    return float(record["samples_per_s"]) / float(record["batch_size"])


def diagnose(loader: dict, model: dict, full: dict, device: str, num_workers: int, disk_uncached: bool) -> Diagnosis:
    """Each argument is a record as a dict (with ``batch_size`` added); see the module docstring."""
    L, M, F = _rate(loader), _rate(model), _rate(full)
    wait = full.get("data_wait_frac") if full.get("status") == "ok" else None
    if L is None or M is None or F is None:
        failed = {k: r.get("status") for k, r in (("loader", loader), ("model", model), ("full step", full)) if _rate(r) is None}
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
                     ["loader workers overlap the two: python -m harness sweep +ladder=workers <same settings>"] + _cpu_note(device))


def _cpu_note(device: str) -> list[str]:
    if device == "cuda":
        return []
    return ["on a CPU the loader's workers and the model share the same cores: more workers can slow the model"]
