"""Entry point of the isolated measuring process: ``python -m harness.run.child JOB_DIR``.

Reads ``JOB_DIR/config.json`` (a resolved RunConfig), trains and measures, and writes
``JOB_DIR/result.json`` with a status. A crash that kills this process leaves no result: the
parent then records ``error`` itself, so no outcome is ever lost.

Started by torch's launcher (``devices`` >= 2, ``harness.run.launch``) it is one rank: it joins the process
group, trains on its own device and share of the data, and gathers every rank's measurement to rank 0, which
alone writes progress markers and ``result.json``. A rank that fails writes ``result.rank<R>.json`` and exits 1,
so that the launcher stops its peers (they would wait for its gradients for ever) and reports the cause.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path


def classify(exc: BaseException) -> str:
    """Status for an exception from the training run."""
    import torch

    from harness.workload.knobs import KnobNotApplicable
    from harness.run.measure import NonFiniteLoss, is_compile_failure

    if isinstance(exc, KnobNotApplicable):
        return "skipped"
    if isinstance(exc, NonFiniteLoss):
        return "nan"
    if isinstance(exc, torch.OutOfMemoryError):
        return "oom"
    # Out of memory does not always surface as torch.OutOfMemoryError: cuBLAS and cuDNN report a failed
    # workspace allocation with their own status codes, and compile wraps the original error in its own
    # exception type, so the text of the whole exception chain is read.
    text = " ".join(str(e) for e in _chain(exc))
    if "out of memory" in text.lower() or any(marker in text for marker in OOM_MARKERS):
        return "oom"
    if is_compile_failure(exc):  # the knob cannot take this model: never the eager baseline under its label
        return "skipped"
    return "error"


def skip_reason(exc: BaseException, compile_mode: str) -> str:
    """The reason a skipped run gives: the knob's own, or which compile mode failed on the model and how."""
    from harness.run.measure import is_compile_failure

    if is_compile_failure(exc) and not isinstance(exc, _knob_not_applicable()):
        first = next((line for line in str(exc).strip().splitlines() if line.strip()), type(exc).__name__)
        return f"compile={compile_mode} failed on this model ({type(exc).__name__}): {first[:300]}"
    return str(exc)


def _knob_not_applicable() -> type:
    from harness.workload.knobs import KnobNotApplicable

    return KnobNotApplicable


# Messages that mean the device (or host) allocator could not satisfy a request.
OOM_MARKERS = ("CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED", "cudaErrorMemoryAllocation",
               "can't allocate memory")


def _chain(exc: BaseException):
    """The exception, then its causes and contexts (each once)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def main(job_dir: str) -> int:
    from harness.run import ranks
    from harness.run.lifeline import guard_child
    from harness.run.ranks import Rank

    guard_child()
    job = Path(job_dir)
    from harness import config as config_mod
    from harness.run.measure import model_flops_per_sample, summarize, train_and_measure, write_json

    cfg = config_mod.from_dict(json.loads((job / "config.json").read_text()))
    gpu_name = json.loads((job / "env.json").read_text()).get("gpu_name", "")
    workload = cfg.workload
    rank = Rank()

    def progress(phase: str, **info) -> None:
        if rank.rank == 0:
            write_json(job / "progress.json", {"phase": phase, "time": time.time(), **info})

    progress("build")
    try:
        rank = ranks.join(cfg.device)
        cfg.batch_size = config_mod.per_device_batch(cfg)  # this rank's batch (strong scaling: its share)
        flops = model_flops_per_sample(cfg, workload)
        m, extras = train_and_measure(cfg, workload, progress, rank)
        summary = summarize(cfg, workload, m, extras, flops, gpu_name)
        summaries = rank.gather(summary)
        if rank.distributed:
            summary = ranks.combine(summaries, rank.backend, int(os.environ.get("OMP_NUM_THREADS", "0")) or None)
        result = {"status": "ok", "error": "", **summary}
    except BaseException as exc:  # every outcome becomes a record
        status = classify(exc)
        tail = "".join(traceback.format_exception(exc))[-4000:]
        result = {"status": status, "error": skip_reason(exc, cfg.compile) if status == "skipped" else tail}
        if rank.distributed:  # the launcher stops the peers and writes the run's result from this
            write_json(job / f"result.rank{rank.rank}.json", result)
            return 1
    if rank.rank == 0:
        write_json(job / "result.json", result)
    ranks.leave(rank)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
