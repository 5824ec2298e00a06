"""Entry point of the isolated measuring process: ``python -m harness.child JOB_DIR``.

Reads ``JOB_DIR/config.json`` (a resolved RunConfig), trains and measures, and writes
``JOB_DIR/result.json`` with a status. A crash that kills this process leaves no result: the
parent then records ``error`` itself, so no outcome is ever lost.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path


def classify(exc: BaseException) -> str:
    """Status for an exception from the training run."""
    import torch

    from harness.knobs import KnobNotApplicable
    from harness.measure import NonFiniteLoss

    if isinstance(exc, KnobNotApplicable):
        return "skipped"
    if isinstance(exc, NonFiniteLoss):
        return "nan"
    if isinstance(exc, torch.OutOfMemoryError):
        return "oom"
    text = str(exc)
    if isinstance(exc, RuntimeError) and ("out of memory" in text.lower() or "can't allocate memory" in text):
        return "oom"
    return "error"


def main(job_dir: str) -> int:
    from harness.lifeline import guard_child

    guard_child()
    job = Path(job_dir)
    from harness import config as config_mod
    from harness.measure import model_flops_per_sample, summarize, train_and_measure, write_json
    from harness.workloads import WORKLOADS

    cfg = config_mod.from_dict(json.loads((job / "config.json").read_text()))
    gpu_name = json.loads((job / "env.json").read_text()).get("gpu_name", "")
    workload = WORKLOADS.get(cfg.workload)

    def progress(phase: str, **info) -> None:
        write_json(job / "progress.json", {"phase": phase, "time": time.time(), **info})

    progress("build")
    try:
        flops = model_flops_per_sample(cfg, workload)
        m, extras = train_and_measure(cfg, workload, progress)
        result = {"status": "ok", "error": "", **summarize(cfg, workload, m, extras, flops, gpu_name)}
    except BaseException as exc:  # every outcome becomes a record
        status = classify(exc)
        tail = "".join(traceback.format_exception(exc))[-4000:]
        result = {"status": status, "error": str(exc) if status == "skipped" else tail}
    write_json(job / "result.json", result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
