"""Run one resolved config in a child process with a timeout; always return a record.

The parent never trains: it starts the child (``harness.run.parent.launcher``: forked from the sweep's warm launcher,
or ``python -m harness.run.child``), follows its progress markers and the clock, and turns whatever happens (a
result, a crash, a hang) into a RunRecord, made in one place (``harness.records.make``) whether the run measured or
was skipped. Following the child is ``harness.run.parent.watch``'s: it blocks until something happens: a marker on
the child's progress channel, the child's end (a pidfd, or the launcher's word), the deadline, or its next sample.
Outside the measured window it samples the child's memory and its GPU from outside (``harness.run.monitor.Sampler``),
so that the measured process itself runs no sampling thread. Inside the window of a CPU run it does not wake at all:
on a small CPU any wake-up of the parent takes a core from one of the child's threads while the others wait for it at
their next barrier, so the window has the CPUs (the memory peaks come from the kernel's high-water marks, read by the
child, and the progress display is paused). On CUDA it samples the GPU through the window, as its metrics need. While
it waits its threads are in ``SCHED_BATCH`` (``yielding``): a batch thread that wakes up does not preempt a running
one.

No orphan survives the parent, however the parent ends:
  * the child runs in a process group of its own (its loader workers join it), and the parent kills
    the whole group when the child is done, times out, or the parent is interrupted (Ctrl-C,
    SIGTERM from a CI cancel or SLURM, SIGHUP from a dropped ssh: see ``harness.run.parent.lifetime``);
    with ``devices`` >= 2 the child is torch's launcher (``harness.run.parent.launch``), which starts each rank in
    a session of its own, so the parent kills the process group of every process in the child's tree;
  * if the parent is killed outright (SIGKILL), the kernel kills the child (``PR_SET_PDEATHSIG``,
    set in the child; a forked run dies with the warm launcher, which dies with the parent), the child's
    loader workers die with the child the same way, and the child also carries its own deadline
    (``SIGALRM`` at ``timeout_s`` plus a grace period) in case the parent-death signal is unavailable (not Linux);
  * job folders of parents that are gone are removed at the next start (``clean_stale_jobs``).
"""

from __future__ import annotations

import json
import os
import tempfile
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from harness import config as config_mod
from harness import lifeline
from harness.run.parent import launch, launcher, rendezvous, watch
from harness.run.parent.lifetime import LIVE, Held, Terminated
from harness.run.parent.watch import ProgressFn
from harness.run.child import channel
from harness.run.child.outcome import SKIPPED, Outcome
from harness.run.child.summary import Summary
from harness.records.make import make_record, new_run_id
from harness.store import RunRecord
from harness.workload import applicability
from harness.workload.memory_limit import workspace_env
from harness.profiles import store_trace

JOB_PREFIX = launcher.JOB_PREFIX


def execute(cfg: config_mod.RunConfig, env: dict, env_key: str, on_progress: ProgressFn | None = None,
            skip_reason: str | None = None, store: Callable[[RunRecord], object] | None = None,
            **labels) -> RunRecord:
    """:func:`execute_asked`, with ``applicability.skip_reason`` asked here when ``skip_reason`` is None."""
    reason = applicability.skip_reason(cfg) if skip_reason is None else skip_reason
    return execute_asked(cfg, env, env_key, reason, on_progress, store, **labels)


def execute_asked(cfg: config_mod.RunConfig, env: dict, env_key: str, reason: str,
                  on_progress: ProgressFn | None = None, store: Callable[[RunRecord], object] | None = None,
                  **labels) -> RunRecord:
    """Measure ``cfg`` (resolved) in a child process; the record's status says how it ended. A run that cannot act
    here is recorded as skipped without starting anything: ``reason`` is the caller's answer of
    ``applicability.skip_reason`` ("" when it can act). ``store``: called with the record before any interrupt can
    end the command (from the run's end on, SIGINT, SIGTERM and SIGHUP wait until it returns); an interrupt while
    the child profiles or tears down, after it wrote its measurement, stores that measurement and then ends the
    command. ``labels``: fields of the record the run does not measure (a sweep's), set when the record is made."""
    held = Held()
    try:
        ended = _Ended(Outcome(SKIPPED, reason)) if reason else _measure(cfg, env, on_progress, held)
        record = make_record(cfg, env, env_key, ended.outcome.status, ended.outcome.error, ended.summary,
                             ended.run_id, **ended.timing, **labels)
        if store is not None:
            store(record)
    except BaseException:
        held.release(act=False)  # an interrupt or an error is on its way already
        raise
    held.release()
    if ended.interrupted is not None:
        during = ", during its profile (not taken)" if ended.interrupted.profiling else ""
        KEPT_AT_INTERRUPT.append(f"run {record.run_id} had written its measurement ({record.status}) when the "
                                 f"interrupt came{during}: it is stored")
        raise ended.interrupted
    return record


KEPT_AT_INTERRUPT: list[str] = []  # what an interrupt found finished and stored (the command says it)


@dataclass(frozen=True)
class _Ended:
    """How a run ended, what its record is made of: its outcome, its summary (None for a run that did not measure),
    its id ("": a new one), where its wall time went, and the interrupt that came after its child had written its
    result (None: none came)."""

    outcome: Outcome
    summary: Summary | None = None
    run_id: str = ""
    timing: dict = field(default_factory=dict)
    interrupted: BaseException | None = None


def _measure(cfg: config_mod.RunConfig, env: dict, on_progress: ProgressFn | None, held: Held) -> _Ended:
    """The run measured in a child of its own (``harness.run.parent.watch``), in a job folder that holds its
    settings and environment (and its rendezvous across nodes); a profile's trace kept in the results folder under
    the run's id."""
    clean_stale_jobs()
    interrupted = None
    with tempfile.TemporaryDirectory(prefix=JOB_PREFIX) as tmp:
        job = Path(tmp)
        (job / lifeline.OWNER_FILE).write_text(str(os.getpid()))
        (job / "config.json").write_text(json.dumps(config_mod.to_dict(cfg)))
        (job / "env.json").write_text(json.dumps(env, default=str))
        meet = rendezvous.of(cfg, os.environ)
        if meet is not None:
            (job / launch.RENDEZVOUS).write_text(json.dumps(asdict(meet)))
        multi = cfg.devices > 1 or meet is not None
        try:
            outcome, summary, timing = run_child(job, cfg.timeout_s, on_progress, cfg.measure.sample_interval_s,
                                                 launch.command(job) if multi else None, held,
                                                 workspace_env(cfg.memory.limit_gb, cfg.device, os.environ))
        except (KeyboardInterrupt, Terminated) as exc:
            if getattr(exc, "kept", None) is None:
                raise
            (outcome, summary, timing), interrupted = exc.kept, exc
        run_id = new_run_id()
        if summary is not None and summary.profile_json:
            summary.profile_json, summary.profile_trace = store_trace(summary.profile_json, job, cfg.results_dir,
                                                                      run_id)
    return _Ended(outcome, summary, run_id, timing, interrupted)


def run_child(job: Path, timeout_s: float, on_progress: ProgressFn | None, sample_interval_s: float = 0.5,
              argv: list[str] | None = None, held: Held | None = None,
              env: dict[str, str] | None = None) -> tuple[Outcome, Summary | None, dict]:
    """Start the child (``launcher``: forked from the warm launcher, or ``argv``: torch's launcher of ranks), watch
    it to its end and read what it left (``watch.follow``): its outcome, the summary of a run that measured (None
    for one that did not), and where its wall time went. ``env``: what the run's environment adds (a capped run's
    cuDNN workspace cap); ``held``: held from the child's end on (the caller releases it once the record is
    stored)."""
    markers = channel.Markers.open() if argv is None else None  # torch's launcher does not hand a channel to the ranks
    start, spawned, session = time.monotonic(), time.time(), launcher.active()
    try:
        proc = launcher.start(job, {**launcher.run_env(timeout_s), **(env or {})}, job / watch.LOG,
                              markers.child_fd if markers else None, argv)
    except BaseException:
        if markers is not None:
            markers.close()
        raise
    LIVE.add(proc)
    if markers is not None:
        markers.started()
    child = watch.Started(proc, markers, start, spawned, session, ranks=argv is not None)
    return watch.follow(child, job, timeout_s, on_progress, sample_interval_s, held)


# ------------------------------------------------------------------------------------------
# What earlier parents left behind

def clean_stale_jobs(tmp_root: str | None = None) -> int:
    """Remove job folders whose parent process is gone (a parent killed with SIGKILL leaves one), and the metrics
    folders of measuring processes that are gone (a run killed before its end leaves one)."""
    removed = 0
    root = Path(tmp_root or tempfile.gettempdir())
    for job in [*root.glob(JOB_PREFIX + "*"), *root.glob(lifeline.METRICS_PREFIX + "*")]:
        try:
            pid = int((job / lifeline.OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue  # not ours, or still being set up
        if pid != os.getpid() and not _pid_alive(pid):
            shutil.rmtree(job, ignore_errors=True)
            removed += 1
    return removed


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

