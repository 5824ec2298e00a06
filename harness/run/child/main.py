"""Entry point of the isolated measuring process: ``python -m harness.run.child JOB_DIR``, or forked by the sweep's
warm launcher (``harness.run.parent.zygote``), which then calls :func:`main` itself.

Reads ``JOB_DIR/config.json`` (a resolved RunConfig), trains and measures, and writes
``JOB_DIR/result.json`` with a status. A crash that kills this process leaves no result: the
parent then records ``error`` itself, so no outcome is ever lost.

Progress markers (a phase change, never a step) go to ``JOB_DIR/progress.json`` and, where the parent gave one, down
the progress channel (a socket, ``HARNESS_PROGRESS_FD``) that the parent blocks on: the parent wakes at a marker
instead of polling. At the measured window's opening the child waits (a moment) for the parent's word that it has
seen the marker, so that the parent's own work for it is done before the first measured step. Each marker's time is
kept, and the result carries them (``phase_marks``): where the run's wall time went.

Started by torch's launcher (``devices`` >= 2, ``harness.run.parent.launch``) it is one rank: it joins the process
group, trains on its own device and share of the data, and gathers every rank's measurement to rank 0, which
alone writes progress markers and ``result.json``. A rank that fails writes ``result.rank<R>.json`` and exits 1,
so that the launcher stops its peers (they would wait in the next all-reduce for ever) and reports the cause.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from harness import config as config_mod
from harness.lifeline import guard_child
from harness.profiles import failed_summary
from harness.run import monitor
from harness.run.child import channel
from harness.run.child.outcome import OK, of_exception
from harness.run.child.summary import Summary, per_sample, summarize

SOCKET_PATH_MAX = 107  # the bytes of a Unix socket's path (sun_path's 108, the last a NUL)

if TYPE_CHECKING:
    from harness.config import RunConfig
    from harness.run.child.ranks import Rank


def main(job_dir: str) -> int:
    started = time.time()
    guard_child()  # first: die with the parent even if the imports below are slow
    progress_channel = channel.child_end()
    job = Path(job_dir)
    _scratch_in(job)  # before any loader worker starts
    from harness.run.child import measure, ranks  # torch: after the lifeline, in the start's time (not the build's)

    cfg = config_mod.from_dict(json.loads((job / "config.json").read_text()))
    gpu_name = json.loads((job / "env.json").read_text()).get("gpu_name", "")
    rank = ranks.Rank()
    marks = {"start": started}

    def progress(phase: str, **info) -> None:
        if rank.local_rank == 0:  # each node's first rank: its own parent watches its own job folder
            marks.setdefault(phase, time.time())
            payload = {"phase": phase, "time": time.time(), **info}
            measure.write_json(job / "progress.json", payload)
            if progress_channel is not None:
                channel.tell(progress_channel, payload, wait=phase == "measure")

    def note(phase: str, at: float | None = None) -> None:  # a mark for the record's phases, not told to the parent
        if rank.rank == 0:
            marks.setdefault(phase, time.time() if at is None else at)

    progress.note = note
    progress("build")
    from harness.run.child import startup  # torch's side: after the lifeline, as measure

    # one CUDA device: its context created in a thread while the workload's modules import (joined in _measure)
    context = startup.start_context(cfg.device, int(os.environ.get("WORLD_SIZE", "1") or 1))
    startup.import_workload(cfg.workload)  # MONAI's networks, the user's module: the model phase's first part
    note("imported")
    try:
        rank = ranks.join(cfg.device)
        result = {"status": OK, "error": "", **_measure(cfg, rank, gpu_name, progress, job, context).to_dict()}
    except BaseException as exc:  # every outcome becomes a record
        failed = of_exception(exc, cfg.compile)
        result = {"status": failed.status, "error": failed.error}
        if rank.distributed:  # the launcher stops the peers and writes the run's result from this
            measure.write_json(job / f"result.rank{rank.rank}.json", result)
            return 1
    if rank.local_rank == 0:  # rank 0, and on several nodes each node's first rank (its parent prints the figures)
        marks["result"] = time.time()
        measure.write_json(job / "result.json", {**result, "phase_marks": marks})
        if progress_channel is not None:  # the final result: the parent gives the teardown its grace from here
            channel.tell(progress_channel, {"phase": "result", "time": time.time()}, wait=False)
    ranks.leave(rank)
    return 0


def _scratch_in(job: Path) -> None:
    """The run's scratch folder (multiprocessing's temporary folder), made inside its job folder, which the parent
    removes however the run ends. Each loader worker hands its batches' shared memory over through a socket there,
    and a worker killed with its run (a timeout, an interrupted command) cannot remove it: in the system's temporary
    folder each such run left a ``pymp-*`` folder for good. The metrics log and ``visualize_every_n_steps``' writes
    go there too. In a job folder too deep for a socket's path (a long TMPDIR) a worker could not make its socket
    and the run would hang: the scratch is then where Python puts it. Only for this call, not the run's
    ``tempfile.tempdir``: torch.compile keeps its cache there, from one run to the next."""
    import multiprocessing.util
    import tempfile

    fits = len(os.fsencode(job)) + len("/pymp-12345678/listener-12345678") <= SOCKET_PATH_MAX
    before, tempfile.tempdir = tempfile.tempdir, str(job) if fits else tempfile.tempdir
    try:
        multiprocessing.util.get_temp_dir()  # made now: the workers, forked later, inherit its name
    finally:
        tempfile.tempdir = before


def remove_scratch() -> None:
    """The run's scratch removed at the process's end: a run ends with ``os._exit``, so multiprocessing's own removal
    never runs (in a job folder the parent would remove it anyway; where Python put it, nobody else would)."""
    import multiprocessing.util

    shutil.rmtree(multiprocessing.util.get_temp_dir(), ignore_errors=True)


def _measure(cfg: RunConfig, rank: Rank, gpu_name: str, progress, job: Path, context=None) -> Summary:
    """This rank's measurement, summarised; under DDP, every rank's combined into rank 0's record. ``context``: the
    device's context being created in a thread (``startup.start_context``), joined here before the device is used."""
    from harness.run.child import ranks  # torch: main() imported it, after the lifeline
    from harness.run.child.measure import hardware_flops_per_sample, measured_run, model_flops_per_sample  # torch
    from harness.run.child.startup import finish_context, flops_per_sample

    cfg.batch_size = config_mod.per_device_batch(cfg)  # this rank's batch (strong scaling: its share)
    for phase, at in finish_context(context, rank.device(cfg.device)).items():  # the thread's own start and end
        progress.note(phase, at)
    progress.note("context")  # from "imported": the main thread's wait for the context (and DDP's group joined)
    flops = flops_per_sample(cfg, cfg.workload, lambda: model_flops_per_sample(cfg, cfg.workload))
    hardware = hardware_flops_per_sample(cfg, cfg.workload, flops)  # recomputation: counted only where checkpointed
    progress.note("flops")
    with measured_run(cfg, cfg.workload, progress, rank) as run:
        run.extras.worker_hwm_bytes = monitor.worker_peaks()  # the loader's workers are alive until the block ends
        summary = summarize(run.m, run.extras, per_sample(cfg, flops, gpu_name, hardware),
                            compiled=cfg.compile != "off")
        if rank.distributed:
            import socket

            summaries, hosts = zip(*rank.gather((summary.to_dict(), socket.gethostname())))
            omp = int(os.environ.get("OMP_NUM_THREADS", "0")) or None
            summary = Summary.from_dict(ranks.combine(list(summaries), rank.backend, omp, cfg.devices, list(hosts)))
        if cfg.profile.enabled:
            _profile(run, cfg, rank, summary, job, progress)
    return summary


def _profile(run, cfg: RunConfig, rank: Rank, summary: Summary, job: Path, progress) -> None:
    """``profile.enabled``: a profile of a few more steps, after the measurement, into ``summary.profile_json``
    (its trace into the job folder). The measurement is written first, marked as waiting for its profile, so that
    a profile that hangs or crashes never loses it (the parent keeps the first result, with the note below)."""
    from harness.run.child.measure import write_json  # torch: as ranks in _measure

    summary.profile_json = failed_summary(cfg.device, cfg.profile.steps, PROFILE_UNFINISHED).to_json()
    if rank.rank == 0:
        write_json(job / "result.json", {"status": OK, "error": "", **summary.to_dict(), PROFILING: True})
    progress("profile", steps=cfg.profile.steps)
    summary.profile_json = run.profile(job if rank.rank == 0 else None).to_json()


PROFILING = "profiling"  # in a result written before its profile: the child is still profiling
PROFILE_UNFINISHED = "the profile did not finish: the run ended (its timeout_s, a crash or a kill) while profiling"


def exit_now(code: int) -> None:
    """End the process without the interpreter's teardown (the result is written; the parent kills the group)."""
    remove_scratch()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

