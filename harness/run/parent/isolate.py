"""Run one resolved config in a child process with a timeout; always return a record.

The parent never trains: it starts the child (``harness.run.parent.launcher``: forked from the sweep's warm launcher, or
``python -m harness.run.child``), follows its progress markers and the clock, and turns whatever happens (a
result, a crash, a hang) into a RunRecord. It blocks until something happens: a marker on the child's progress
channel, the child's end (a pidfd, or the launcher's word), the deadline, or its next sample. Outside the measured
window it samples the child's memory and its GPU from outside (``harness.run.monitor.Sampler``), so that the
measured process itself runs no sampling thread. Inside the window of a CPU run it does not wake at all: on a
small CPU any wake-up of the parent takes a core from one of the child's threads while the others wait for it at
their next barrier, so the window has the CPUs (the memory peaks come from the kernel's high-water marks, read by
the child, and the progress display is paused). On CUDA it samples the GPU through the window, as its metrics need.
While it waits its threads are in ``SCHED_BATCH`` (``yielding``): a batch thread that wakes up does not preempt a
running one.

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

import contextlib
import json
import os
import select
import tempfile
import shutil
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable

from harness import config as config_mod
from harness import lifeline
from harness.run.child import channel
from harness.run.parent import launch, launcher, phases, processes, rendezvous
from harness.run.parent.lifetime import LIVE, Held, Terminated
from harness.run import monitor
from harness.run.child import outcome as outcome_mod
from harness.run.child.outcome import OK, SKIPPED, Outcome
from harness.run.child.summary import Summary
from harness.records.make import make_record, new_run_id
from harness.store import RunRecord
from harness.workload import applicability
from harness.workload.memory_limit import workspace_env
from harness.profiles import store_trace

REPO_ROOT = launcher.REPO_ROOT
POLL_S = 0.5  # the longest wait between looks where nothing can wake the parent (no pidfd, no progress channel)
JOB_PREFIX = launcher.JOB_PREFIX
RESULT_GRACE_S = 10.0  # how long a child that wrote its result may take to exit (NCCL, loader teardown)

ProgressFn = Callable[[dict, float], None]  # (progress info, seconds since start)


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
    if reason:
        record = make_record(cfg, env, env_key, SKIPPED, reason, **labels)
        if store is not None:
            store(record)
        return record
    clean_stale_jobs()
    held = Held()
    try:
        record, interrupted = _measure(cfg, env, env_key, on_progress, held, labels)
        if store is not None:
            store(record)
    except BaseException:
        held.release(act=False)  # an interrupt or an error is on its way already
        raise
    held.release()
    if interrupted is not None:
        during = ", during its profile (not taken)" if interrupted.profiling else ""
        KEPT_AT_INTERRUPT.append(f"run {record.run_id} had written its measurement ({record.status}) when the "
                                 f"interrupt came{during}: it is stored")
        raise interrupted
    return record


KEPT_AT_INTERRUPT: list[str] = []  # what an interrupt found finished and stored (the command says it)


def _measure(cfg: config_mod.RunConfig, env: dict, env_key: str, on_progress: ProgressFn | None, held: Held,
             labels: dict) -> tuple[RunRecord, BaseException | None]:
    """The run's record, and the interrupt that came after its child had written its result (None: none came)."""
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
            outcome, summary, timing = _run_child(job, cfg.timeout_s, on_progress, cfg.measure.sample_interval_s,
                                                  launch.command(job) if multi else None, held,
                                                  workspace_env(cfg.memory.limit_gb, cfg.device, os.environ))
        except (KeyboardInterrupt, Terminated) as exc:
            if getattr(exc, "kept", None) is None:
                raise
            (outcome, summary, timing), interrupted = exc.kept, exc
        run_id = _keep_profile(summary, job, cfg.results_dir)
    record = make_record(cfg, env, env_key, outcome.status, outcome.error, summary, run_id, **timing, **labels)
    return record, interrupted


def _keep_profile(summary: Summary | None, job: Path, results_dir: str) -> str:
    """The run's id; a profile's trace moved from the job folder into the results folder under that id."""
    run_id = new_run_id()
    if summary is not None and summary.profile_json:
        summary.profile_json, summary.profile_trace = store_trace(summary.profile_json, job, results_dir, run_id)
    return run_id


def _run_child(job: Path, timeout_s: float, on_progress: ProgressFn | None, sample_interval_s: float = 0.5,
               argv: list[str] | None = None, held: Held | None = None,
               env: dict[str, str] | None = None) -> tuple[Outcome, Summary | None, dict]:
    """Start the child, watch it to its end, and read what it left: its outcome, the summary of a run that measured
    with what the parent sampled added (None for a run that did not), and where its wall time went (record fields:
    ``harness.run.parent.phases``). ``held``: held from the child's end on (the caller releases it once the record
    is stored); ``env``: what the run's environment adds (a capped run's cuDNN workspace cap). An interrupt while the
    child runs kills it and propagates; if the child had written its result
    (then it was profiling or tearing down), the interrupt carries that outcome (``kept``, ``profiling``)."""
    markers = channel.Markers.open() if argv is None else None  # torch's launcher does not hand a channel to the ranks
    log_path = job / "child.log"
    start, spawned = time.monotonic(), time.time()
    session = launcher.active()
    try:
        proc = launcher.start(job, {**launcher.run_env(timeout_s), **(env or {})}, log_path,
                              markers.child_fd if markers else None, argv)
    except BaseException:
        if markers is not None:
            markers.close()
        raise
    LIVE.add(proc)
    if markers is not None:
        markers.started()
    store_imports = _store_imports()
    watch = _Watch(monitor.Sampler(proc.pid, ranks=argv is not None), sample_interval_s)
    interrupted = None
    try:
        timed_out = _wait(proc, job, start, timeout_s, on_progress, watch, markers)
    except (KeyboardInterrupt, Terminated) as exc:
        interrupted, timed_out = exc, False
    finally:
        if held is not None:
            held.hold()
        processes.kill_group(proc)
        LIVE.discard(proc)
        if markers is not None:
            markers.close()
        proc.close()
    gone = time.time()
    if store_imports is not None:
        store_imports.join()
    gap = session.run_ended(spawned, gone) if session is not None else None
    if watch.sampler.measuring:
        watch.sampler.window_lost()
    result = _read_result(job / "result.json")
    if interrupted is not None and result is None:
        raise interrupted
    marks = result.pop("phase_marks", {}) if result is not None else {}
    timing = phases.record_fields(marks, spawned, gone, gap, getattr(proc, "how", "exec"),
                                   getattr(proc, "preloaded", ""), (result or {}).get("first_step_s"))
    if result is not None:  # a child that wrote its result and then hung on exit still measured
        status, error = result.pop("status"), result.pop("error", "")
        profiling = bool(result.pop("profiling", None))  # written before its profile, which did not finish
        if status == OK and "peak_main_rss_bytes" in result:  # a measurement: add what the parent sampled
            result.update(monitor.metrics(watch.sampler.samples, result, gpu_named=watch.gpu_named))
        kept = Outcome(status, error), Summary.from_dict(result) if result else None, timing
        if interrupted is not None:
            interrupted.kept, interrupted.profiling = kept, profiling
            raise interrupted
        return kept
    if timed_out:
        return outcome_mod.timed_out(timeout_s, _tail(log_path)), None, timing
    return outcome_mod.died(proc.returncode, _tail(log_path)), None, timing


class _Watch:
    """What the parent follows of a running child: its progress markers and the sampler they steer."""

    def __init__(self, sampler: monitor.Sampler, interval_s: float):
        self.sampler = sampler
        self.interval_s = max(0.01, float(interval_s))
        self.next_sample = 0.0
        self.gpu_named = False
        self.info: dict | None = None
        self.window_wakeups = 0  # times the parent woke while a window was open (not counting its closing marker)
        self.result_at: float | None = None  # when the child's "result" marker came (monotonic): its final result
        self._stamp = None

    @property
    def quiet(self) -> bool:
        """A CPU run's window is open: the parent neither samples nor redraws until the window closes."""
        return self.sampler.measuring and not self.gpu_named

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


def _store_imports() -> threading.Thread | None:
    """The record's write converts it with pyarrow, whose first conversion imports pandas (to check for its types): a
    third of a second of a single ``run``'s wall time on a small CPU, after its child has ended. Made here, in a
    thread, while the child starts (a fresh interpreter importing torch and the workload for seconds, on one core):
    the write then finds it loaded. None where it is loaded already (a sweep's reads of the store load it)."""
    if "pandas" in sys.modules:
        return None
    import pyarrow as pa

    def convert() -> None:
        try:
            pa.array([0.0])
        except Exception:  # the write will say what is wrong, if anything is
            pass

    thread = threading.Thread(target=convert, name="harness-store-imports", daemon=True)
    thread.start()  # before the wait's yielding(): SCHED_BATCH, it never preempts the child
    return thread


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


def _wait(proc, job: Path, start: float, timeout_s: float, on_progress: ProgressFn | None,
          watch: _Watch | None = None, markers: channel.Markers | None = None) -> bool:
    """Follow the child until it ends (False) or its deadline passes (True), blocking in between on whatever can
    wake the parent: a marker, the child's end, the deadline, the next sample. Without a channel (``markers``
    None) the progress file is read at every look, and without a pidfd the parent looks every ``POLL_S``."""
    progress_path = job / "progress.json"
    watch = watch or _Watch(monitor.Sampler(proc.pid), POLL_S)
    deadline = start + timeout_s
    slept_in_window = False
    with yielding():  # the child (started before) keeps the default policy
        while proc.poll() is None:
            now = time.monotonic()
            if now > deadline:
                return True
            if markers is not None:
                for info in markers.read():
                    _take(watch, info, markers, on_progress, now - start)
            else:
                watch.read_progress(progress_path)
            if _teardown_hangs(watch, job, markers is not None, now):  # a result written: its teardown gets a grace
                return False
            if slept_in_window and watch.sampler.measuring:
                watch.window_wakeups += 1
            if watch.quiet and markers is not None:  # (without a channel nothing would wake it at the close)
                timeout = deadline - now
            else:
                watch.sample_if_due(now)
                if on_progress and watch.info is not None:
                    on_progress(watch.info, now - start)
                timeout = min(deadline - now, watch.sleep_s(time.monotonic()))
            if watch.result_at is not None:
                timeout = min(timeout, watch.result_at + RESULT_GRACE_S - now)
            slept_in_window = watch.sampler.measuring
            _block([markers.fd if markers else None, getattr(proc, "exit_fd", None)], timeout)
    return False


def _take(watch: _Watch, info: dict, markers: channel.Markers, on_progress: ProgressFn | None, elapsed: float) -> None:
    """One marker from the channel. At the window's opening of a CPU run the display says it pauses, and only then
    is the child told that the parent has taken the marker: the parent's work for it is done before the window."""
    watch._follow(info)
    if info.get("phase") == "result":  # the final result is written: what is left is the process's teardown
        watch.result_at = time.monotonic()
    if info.get("phase") != "measure":
        return
    if watch.quiet and on_progress is not None:
        on_progress(dict(info, paused=True), elapsed)
    markers.ack()


def _teardown_hangs(watch: _Watch, job: Path, by_marker: bool, now: float) -> bool:
    """Whether the child wrote its final result more than ``RESULT_GRACE_S`` ago and is still running (then it hangs
    in teardown: an NCCL process group, loader workers): told by its "result" marker, or, without a channel, by the
    result file itself."""
    if by_marker:
        return watch.result_at is not None and now - watch.result_at > RESULT_GRACE_S
    return result_grace_over(job / "result.json")


def _block(fds: list[int | None], timeout_s: float) -> None:
    """Wait until one of ``fds`` is readable or ``timeout_s`` has passed (at most ``POLL_S`` without a pidfd)."""
    waitable = [fd for fd in fds if fd is not None]
    if fds[-1] is None:  # nothing tells the child's end: look again soon
        timeout_s = min(timeout_s, POLL_S)
    timeout_s = min(max(0.0, timeout_s), 1e6)  # select takes no infinity
    if waitable:
        select.select(waitable, [], [], timeout_s)
    else:
        time.sleep(timeout_s)


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


def _tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""
