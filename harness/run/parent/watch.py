"""A started child run followed to its end, in the parent (``harness.run.parent.isolate`` starts it through
``harness.run.parent.launcher``): watched until something happens (a marker on its progress channel, its end, the
deadline, its next sample), stopped with its whole process group, and what it left read back (its outcome, its
summary with what the parent sampled added, where its wall time went). Outside the measured window the parent
samples the child's memory and its GPU from outside (``harness.run.monitor.Sampler``); inside the window of a CPU
run it does not wake at all, and while it waits its threads are in ``SCHED_BATCH`` (``yielding``). Why, and how no
orphan survives: ``harness.run.parent.isolate``."""

from __future__ import annotations

import contextlib
import json
import os
import select
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from harness import fileio
from harness.run import monitor
from harness.run.child import channel
from harness.run.child import outcome as outcome_mod
from harness.run.child.outcome import OK, Outcome
from harness.run.child.summary import Summary
from harness.run.parent import phases, processes
from harness.run.parent.lifetime import LIVE, Held, Terminated

LOG = "child.log"  # in the job folder: the child's output, whose tail a run that died or timed out keeps
POLL_S = 0.5  # the longest wait between looks where nothing can wake the parent (no pidfd, no progress channel)
RESULT_GRACE_S = 10.0  # how long a child that wrote its result may take to exit (NCCL, loader teardown)

ProgressFn = Callable[[dict, float], None]  # (progress info, seconds since start)


@dataclass(frozen=True)
class Started:
    """A child just started (``harness.run.parent.isolate.run_child``): its process handle, its progress channel
    (None: torch's launcher, which hands none to the ranks), when it started (monotonic and wall clock), the warm
    launcher's session it may have forked from (None: none is running), and whether it is torch's launcher of ranks."""

    proc: Any
    markers: channel.Markers | None
    start: float
    spawned: float
    session: Any
    ranks: bool


def follow(child: Started, job: Path, timeout_s: float, on_progress: ProgressFn | None,
           sample_interval_s: float = 0.5, held: Held | None = None) -> tuple[Outcome, Summary | None, dict]:
    """Watch a started child to its end, and read what it left: its outcome, the summary of a run that measured
    with what the parent sampled added (None for a run that did not), and where its wall time went (record fields:
    ``harness.run.parent.phases``). ``held``: held from the child's end on (the caller releases it once the record
    is stored). An interrupt while the child runs kills it and propagates; if the child had written its result
    (then it was profiling or tearing down), the interrupt carries that outcome (``kept``, ``profiling``)."""
    proc = child.proc
    store_imports = _store_imports()
    watch = Watch(monitor.Sampler(proc.pid, ranks=child.ranks), sample_interval_s)
    timed_out, interrupted = _watched(proc, job, child.start, timeout_s, on_progress, watch, child.markers, held)
    gone = time.time()
    if store_imports is not None:
        store_imports.join()
    gap = child.session.run_ended(child.spawned, gone) if child.session is not None else None
    if watch.sampler.measuring:
        watch.sampler.window_lost()
    result = read_result(job / "result.json")
    if interrupted is not None and result is None:
        raise interrupted
    timing = phases.record_fields(result.pop("phase_marks", {}) if result is not None else {}, child.spawned, gone,
                                  gap, getattr(proc, "how", "exec"), getattr(proc, "preloaded", ""),
                                  (result or {}).get("first_step_s"), getattr(proc, "waited_s", None))
    if result is None:
        tail = fileio.tail(job / LOG, 3000)
        return (outcome_mod.timed_out(timeout_s, tail) if timed_out else outcome_mod.died(proc.returncode, tail),
                None, timing)
    kept, profiling = _kept(result, watch, timing)  # a child that wrote its result and then hung on exit measured
    if interrupted is not None:
        interrupted.kept, interrupted.profiling = kept, profiling
        raise interrupted
    return kept


def _watched(proc, job: Path, start: float, timeout_s: float, on_progress: ProgressFn | None, watch: Watch,
             markers: channel.Markers | None, held: Held | None) -> tuple[bool, BaseException | None]:
    """(whether the deadline passed, the interrupt that came meanwhile or None): the child waited for, then its
    whole process group killed and its channel closed, whatever happened."""
    try:
        return wait(proc, job, start, timeout_s, on_progress, watch, markers), None
    except (KeyboardInterrupt, Terminated) as exc:
        return False, exc
    finally:
        if held is not None:
            held.hold()
        processes.kill_group(proc)
        LIVE.discard(proc)
        if markers is not None:
            markers.close()
        proc.close()


def _kept(result: dict, watch: Watch, timing: dict) -> tuple[tuple[Outcome, Summary | None, dict], bool]:
    """(outcome, summary, timing) of a child that wrote its result, and whether it wrote it before its profile
    (which did not finish); a measurement gets what the parent sampled added."""
    status, error = result.pop("status"), result.pop("error", "")
    profiling = bool(result.pop("profiling", None))
    if status == OK and "peak_main_rss_bytes" in result:
        result.update(monitor.metrics(watch.sampler.samples, result, gpu_named=watch.gpu_named))
    return (Outcome(status, error), Summary.from_dict(result) if result else None, timing), profiling


class Watch:
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


def wait(proc, job: Path, start: float, timeout_s: float, on_progress: ProgressFn | None,
          watch: Watch | None = None, markers: channel.Markers | None = None) -> bool:
    """Follow the child until it ends (False) or its deadline passes (True), blocking in between on whatever can
    wake the parent: a marker, the child's end, the deadline, the next sample. Without a channel (``markers``
    None) the progress file is read at every look, and without a pidfd the parent looks every ``POLL_S``."""
    progress_path = job / "progress.json"
    watch = watch or Watch(monitor.Sampler(proc.pid), POLL_S)
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


def _take(watch: Watch, info: dict, markers: channel.Markers, on_progress: ProgressFn | None, elapsed: float) -> None:
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


def _teardown_hangs(watch: Watch, job: Path, by_marker: bool, now: float) -> bool:
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
    result = read_result(path)
    return result is not None and not result.get("profiling")


def read_result(path: Path) -> dict | None:
    try:
        result = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):  # none, or one cut short by a kill
        return None
    return result if isinstance(result, dict) and "status" in result else None
