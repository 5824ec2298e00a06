"""Run one resolved config in a fresh child process with a timeout; always return a record.

The parent never trains: it starts ``python -m harness.run.child``, watches its progress file and the
clock, and turns whatever happens (a result, a crash, a hang) into a RunRecord. Between polls it sleeps,
and at each poll it samples the child's memory and its GPU from outside (``harness.run.monitor.Sampler``),
so that the measured process itself runs no sampling thread: the parent shares the CPU with the child,
and anything it does costs the child what it takes. While it waits, its threads are in ``SCHED_BATCH``
(``yielding``): a batch thread that wakes up does not preempt a running one, so a poll waits for a gap in
the child's work (a thread at a barrier, a loader wait) or for the next scheduler tick, instead of taking
a CPU from one of the child's threads while the others wait for it at their next barrier.

No orphan survives the parent, however the parent ends:
  * the child runs in a process group of its own (its loader workers join it), and the parent kills
    the whole group when the child is done, times out, or the parent is interrupted (Ctrl-C,
    SIGTERM from a CI cancel or SLURM, SIGHUP from a dropped ssh: see ``terminate_on_signals``);
    with ``devices`` >= 2 the child is torch's launcher (``harness.run.launch``), which starts each rank in
    a session of its own, so the parent kills the process group of every process in the child's tree;
  * if the parent is killed outright (SIGKILL), the kernel kills the child (``PR_SET_PDEATHSIG``,
    set in the child), the child's loader workers die with the child the same way, and the child
    also carries its own deadline (``SIGALRM`` at ``timeout_s`` plus a grace period) in case the
    parent-death signal is unavailable (not Linux);
  * job folders of parents that are gone are removed at the next start (``clean_stale_jobs``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import shutil
import time
from dataclasses import fields
from pathlib import Path
from typing import Callable

from harness import config as config_mod
from harness.run import launch, monitor
from harness.run import outcome as outcome_mod
from harness.run.outcome import OK, SKIPPED, Outcome
from harness.run.summary import Summary
from harness.store import RunRecord, new_id, utc_timestamp
from harness.workload import applicability

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
POLL_S = 0.5  # the longest sleep between polls: how late a timeout or the window's edges may be seen
JOB_PREFIX = "harness-job-"
KILL_WAIT_S = 10.0  # how long to wait for a killed group's processes to be gone (GPU memory back)
RESULT_GRACE_S = 10.0  # how long a child that wrote its result may take to exit (NCCL, loader teardown)

ProgressFn = Callable[[dict, float], None]  # (progress info, seconds since start)


def new_run_id() -> str:
    return new_id()


def base_record(cfg: config_mod.RunConfig, env: dict, env_key: str, status: str, error: str = "",
                summary: Summary | None = None, run_id: str = "", **labels) -> RunRecord:
    """The record of ``cfg``: environment and identity, the metrics of ``summary`` (empty without one), and
    ``labels`` (a sweep's fields). Constructed in one call: a field name the record lacks raises TypeError."""
    env_fields = {f.name for f in fields(RunRecord)}
    return RunRecord(
        run_id=run_id or new_run_id(),
        status=status,
        error=error,
        timestamp=utc_timestamp(),
        workload=cfg.workload.name,
        size=cfg.size,
        device=cfg.device,
        config_hash=config_mod.config_hash(cfg),
        config_json=json.dumps(config_mod.record_dict(cfg), sort_keys=True),
        env_key=env_key,
        unit=cfg.workload.unit,
        mode=cfg.measure.mode,
        **{k: v for k, v in env.items() if k in env_fields},
        **(summary.record_fields() if summary is not None else {}),
        **labels,
    )


def execute(cfg: config_mod.RunConfig, env: dict, env_key: str, on_progress: ProgressFn | None = None,
            skip_reason: str | None = None, **labels) -> RunRecord:
    """Measure ``cfg`` (resolved) in a child process; the record's status says how it ended. A run that cannot act
    here is recorded as skipped without starting anything: ``skip_reason`` is the caller's answer of
    ``applicability.skip_reason`` when it asked already (asked here when None, so that it is asked once a run).
    ``labels``: fields of the record the run does not measure (a sweep's), set when the record is made."""
    reason = applicability.skip_reason(cfg) if skip_reason is None else skip_reason
    if reason:
        return base_record(cfg, env, env_key, SKIPPED, reason, **labels)
    clean_stale_jobs()
    with tempfile.TemporaryDirectory(prefix=JOB_PREFIX) as tmp:
        job = Path(tmp)
        (job / "parent.pid").write_text(str(os.getpid()))
        (job / "config.json").write_text(json.dumps(config_mod.to_dict(cfg)))
        (job / "env.json").write_text(json.dumps(env, default=str))
        outcome, summary = _run_child(job, cfg.timeout_s, on_progress, cfg.measure.sample_interval_s,
                                      launch.command(job) if cfg.devices > 1 else None)
        run_id = _keep_profile(summary, job, cfg.results_dir)
    return base_record(cfg, env, env_key, outcome.status, outcome.error, summary, run_id, **labels)


def _keep_profile(summary: Summary | None, job: Path, results_dir: str) -> str:
    """The run's id; a profile's trace moved from the job folder into the results folder under that id."""
    from harness.profiles import store_trace

    run_id = new_run_id()
    if summary is not None and summary.profile_json:
        summary.profile_json, summary.profile_trace = store_trace(summary.profile_json, job, results_dir, run_id)
    return run_id


def _run_child(job: Path, timeout_s: float, on_progress: ProgressFn | None,
               sample_interval_s: float = 0.5, argv: list[str] | None = None) -> tuple[Outcome, Summary | None]:
    """Start the child, watch it to its end, and read what it left: its outcome, and the summary of a run that
    measured, with what the parent sampled added (None for a run that did not)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env["HARNESS_PARENT_PID"] = str(os.getpid())
    env["HARNESS_TIMEOUT_S"] = str(timeout_s)
    log_path = job / "child.log"
    start = time.monotonic()
    with open(log_path, "wb") as log:
        # A session of its own, so that a timeout can kill the child and its loader workers together.
        proc = subprocess.Popen(
            argv or [sys.executable, "-m", "harness.run.child", str(job)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True,
        )
        _LIVE.add(proc)
        watch = _Watch(monitor.Sampler(proc.pid, ranks=argv is not None), sample_interval_s)
        try:
            timed_out = _wait(proc, job, start, timeout_s, on_progress, watch)
        finally:
            _kill_group(proc)
            _LIVE.discard(proc)
    if watch.sampler.measuring:
        watch.sampler.window_lost()
    result = _read_result(job / "result.json")
    if result is not None:  # a child that wrote its result and then hung on exit still measured
        status, error = result.pop("status"), result.pop("error", "")
        result.pop("profiling", None)  # written before its profile, which did not finish: the measurement stands
        if status == OK and "peak_main_rss_bytes" in result:  # a measurement: add what the parent sampled
            result.update(monitor.metrics(watch.sampler.samples, result, gpu_named=watch.gpu_named))
        return Outcome(status, error), Summary.from_dict(result) if result else None
    if timed_out:
        return outcome_mod.timed_out(timeout_s, _tail(log_path)), None
    return outcome_mod.died(proc.returncode, _tail(log_path)), None


class _Watch:
    """What the parent follows of a running child: its progress markers and the sampler they steer."""

    def __init__(self, sampler: monitor.Sampler, interval_s: float):
        self.sampler = sampler
        self.interval_s = max(0.01, float(interval_s))
        self.next_sample = 0.0
        self.gpu_named = False
        self.info: dict | None = None
        self._stamp = None

    def read_progress(self, path: Path) -> dict | None:
        """The child's latest marker, parsed again only when the file has changed (markers are rare)."""
        try:
            st = path.stat()
        except OSError:
            return self.info
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp != self._stamp:
            try:
                info = json.loads(path.read_text())
            except (json.JSONDecodeError, OSError):
                return self.info
            self._stamp = stamp
            self._follow(info)
        return self.info

    def _follow(self, info: dict) -> None:
        self.info = info
        phase = info.get("phase")
        if info.get("gpu") and not self.gpu_named:
            self.gpu_named = True
            for identity in info.get("gpus") or [info["gpu"]]:  # every rank's GPU in a multi-device run
                handle = monitor.nvml_handle_for(identity)  # pynvml only: the parent never initialises CUDA
                if handle is not None:
                    self.sampler.attach_gpu(handle)
        was, now = self.sampler.measuring, phase == "measure"  # GPU samples only between "measure" and "measured"
        if now and not was:
            self.sampler.window_opened()
            self.next_sample = 0.0  # one sample as soon as the window is seen open
        elif was and not now:
            self.sampler.window_closed()

    def sample_if_due(self, now: float) -> None:
        if now >= self.next_sample:
            self.sampler.sample_once()  # never raises
            self.next_sample = now + self.interval_s

    def sleep_s(self, now: float) -> float:
        return max(0.01, min(POLL_S, self.next_sample - now))


def _threads() -> set[int]:
    try:
        return {int(tid) for tid in os.listdir("/proc/self/task")}
    except OSError:  # not Linux
        return set()


@contextlib.contextmanager
def yielding():
    """This process's threads in ``SCHED_BATCH`` for the duration (Linux; elsewhere nothing changes): a batch
    thread's wake-up never preempts a running thread. Threads in another policy than the default (a user's
    ``chrt``) are left as they are; on the way out, the threads switched, and any started meanwhile (they
    inherit the policy), go back to the default. Going back needs no privilege: the nice value stays."""
    if not hasattr(os, "SCHED_BATCH"):
        yield
        return
    before = _threads()
    switched = set()
    for tid in before:
        try:
            if os.sched_getscheduler(tid) == os.SCHED_OTHER:
                os.sched_setscheduler(tid, os.SCHED_BATCH, os.sched_param(0))
                switched.add(tid)
        except OSError:  # a thread gone meanwhile, or a policy this system refuses: it stays as it was
            pass
    try:
        yield
    finally:
        for tid in switched | (_threads() - before):
            try:
                if os.sched_getscheduler(tid) == os.SCHED_BATCH:
                    os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
            except OSError:
                pass


def _wait(proc: subprocess.Popen, job: Path, start: float, timeout_s: float, on_progress: ProgressFn | None,
          watch: _Watch | None = None) -> bool:
    progress_path = job / "progress.json"
    watch = watch or _Watch(monitor.Sampler(proc.pid), POLL_S)
    with yielding():  # the child (started before) keeps the default policy
        while proc.poll() is None:
            now = time.monotonic()
            elapsed = now - start
            if elapsed > timeout_s:
                return True
            if result_grace_over(job / "result.json"):  # its result is written: a hang in teardown is not waited for
                return False
            info = watch.read_progress(progress_path)
            watch.sample_if_due(now)
            if on_progress and info is not None:
                on_progress(info, elapsed)
            time.sleep(watch.sleep_s(time.monotonic()))
    return False


def result_grace_over(path: Path, grace_s: float | None = None, now: float | None = None) -> bool:
    """Whether the child wrote its final result more than ``grace_s`` ago and is still running: then it hangs in
    teardown (an NCCL process group, loader workers), and is killed rather than waited for until ``timeout_s``.
    A result written before its profile (``profiling``) is not final: the profile has its own time. One ``stat``
    a poll until a result is that old."""
    try:
        written = path.stat().st_mtime
    except OSError:
        return False
    if (time.time() if now is None else now) - written <= (RESULT_GRACE_S if grace_s is None else grace_s):
        return False
    result = _read_result(path)
    return result is not None and not result.get("profiling")


def _read_result(path: Path) -> dict | None:
    try:
        result = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):  # none, or one cut short by a kill
        return None
    return result if isinstance(result, dict) and "status" in result else None


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill the child's process group, and the groups of every process in its tree (torch's launcher starts
    each rank in a session of its own), and wait until they are all gone, not only the child: a loader worker
    or a rank still alive would hold memory (and GPU memory) into the next rung."""
    members = _group_members(proc.pid)
    tree = _tree(proc.pid)
    groups = {proc.pid} | {g for g in (_pgid(p.pid) for p in tree) if g and g != os.getpgrp()}
    for group in groups:
        try:
            os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    members += [p for p in tree if p not in members]
    proc.wait()
    deadline = time.monotonic() + KILL_WAIT_S
    while members and time.monotonic() < deadline:
        members = [p for p in members if _alive(p)]
        if members:
            time.sleep(0.05)


def _group_members(pgid: int) -> list:
    import psutil

    found = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.pid != pgid and os.getpgid(p.pid) == pgid:
                found.append(p)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return found


def _tree(pid: int) -> list:
    import psutil

    try:
        return monitor.descendants(psutil.Process(pid))
    except psutil.Error:
        return []


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


def _alive(p) -> bool:
    import psutil

    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


# ------------------------------------------------------------------------------------------
# The parent's end: signals, and what earlier parents left behind

_LIVE: set[subprocess.Popen] = set()


class Terminated(BaseException):
    """The parent got SIGTERM or SIGHUP. A BaseException, like KeyboardInterrupt, so that no
    ``except Exception`` on the way (a sweep's per-rung handler, Hydra's job runner) swallows it."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_terminated(signum, frame) -> None:
    raise Terminated(signum)


def terminate_on_signals() -> dict:
    """SIGTERM and SIGHUP end the parent the way Ctrl-C does: by an exception, so every ``finally``
    on the way kills its child's group. Call from the main thread; returns the handlers it replaced
    (give them to ``restore_signals``)."""
    previous = {}
    for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if sig is not None:
            previous[sig] = signal.signal(sig, _raise_terminated)
    return previous


def restore_signals(previous: dict) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def kill_live_children() -> None:
    for proc in list(_LIVE):
        _kill_group(proc)
        _LIVE.discard(proc)


def clean_stale_jobs(tmp_root: str | None = None) -> int:
    """Remove job folders whose parent process is gone (a parent killed with SIGKILL leaves one)."""
    removed = 0
    for job in Path(tmp_root or tempfile.gettempdir()).glob(JOB_PREFIX + "*"):
        try:
            pid = int((job / "parent.pid").read_text())
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


def _tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""
