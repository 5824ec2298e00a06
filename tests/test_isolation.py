"""Each run executes in a fresh child; every way it can end becomes a stored record."""

import json
import os
import sys
import time

import pytest

from harness import config as config_mod
from harness.run.child import channel
from harness.run.parent import isolate, launcher, runner
from harness.run.parent import env as env_mod
from harness.run.parent import watch as child_watch
from harness.run import monitor
from harness.store import load_runs
from tests.conftest import tiny_config, tiny_model_config


def _run(results, **overrides):
    # the tiny model: these tests are about the process around a run, which a built-in only makes slower
    cfg = tiny_model_config(results_dir=str(results), **overrides)
    env, key = env_mod.environment(cfg.device)
    return runner.run_and_store(cfg, env, key)


FAULTS = [
    ("oom", "oom", "can't allocate memory"),
    ("nan", "nan", "loss became nan"),
    ("crash", "error", "killed by signal SIGKILL"),
]


@pytest.mark.parametrize("fault,status,message", FAULTS)
def test_each_fault_leaves_a_record_with_its_status(results, fault, status, message):
    record = _run(results, debug__fault=fault, debug__fault_step=1)
    assert record.status == status
    assert message in record.error
    stored = load_runs(results)
    assert list(stored["status"]) == [status] and stored["samples_per_s"].isna().all()


def test_each_fault_of_a_forked_run_leaves_a_record_with_its_status(results):
    with launcher.warm():  # one zygote forks the three runs, each ending its own way
        for fault, status, message in FAULTS:
            record = _run(results, debug__fault=fault, debug__fault_step=1)
            assert (record.status, record.launched_by) == (status, "fork") and message in record.error
        assert _run(results).status == "ok"  # and the zygote forks the next run as before


def test_a_hang_ends_as_timeout_and_the_child_is_killed(results):
    record = _run(results, debug__fault="hang", timeout_s=6)
    assert record.status == "timeout"
    assert "timeout_s=6" in record.error


def test_a_knob_that_cannot_apply_is_skipped_with_its_reason(results):
    record = _run(results, tf32=True)
    assert record.status == "skipped"
    assert "tf32=true needs a CUDA GPU" in record.error


@pytest.mark.parametrize("workload", [
    "unet3d",  # a 3D one (voxels); resnet50 (2D, images), basic_unet3d and mednext in the slow tier
    pytest.param("resnet50", marks=pytest.mark.slow),
    # basic_unet3d and mednext in the slow tier (10-15 s a run): their builders, losses, FLOPs, checkpointed units and
    # optimizers are checked in test_workloads (test_builtins_build_what_they_built_before), a 3D run here on the UNet
    pytest.param("basic_unet3d", marks=pytest.mark.slow), pytest.param("mednext", marks=pytest.mark.slow)])
def test_every_workload_runs_at_smoke_size(results, workload, request):
    if workload == "unet3d":  # the default workload: the session's one measured `run` of it, as the store holds it
        from harness.store import records_from_frame

        record = records_from_frame(load_runs(request.getfixturevalue("measured_run").results))[0]
    else:
        cfg = tiny_config(workload=workload, results_dir=str(results))
        record = runner.run_and_store(cfg, *env_mod.environment(cfg.device))
    assert record.status == "ok", record.error
    assert record.samples_per_s > 0 and record.flops_per_sample > 0
    assert len(record.step_ms) == 3 and record.warmup_steps == 1
    assert record.unit == ("images" if workload == "resnet50" else "voxels")
    assert record.torch_version and record.cpu_count and record.config_hash


def _child_run(tmp_path, on_progress=None, env=None, **overrides):
    """One real measuring child, as ``execute`` starts it, returning everything the child and parent measured."""
    cfg = tiny_model_config(**overrides)
    job = tmp_path / "job"
    job.mkdir()
    (job / "parent.pid").write_text(str(os.getpid()))
    (job / "config.json").write_text(json.dumps(config_mod.to_dict(cfg)))
    (job / "env.json").write_text("{}")
    outcome, summary, _ = isolate.run_child(job, cfg.timeout_s, on_progress, cfg.measure.sample_interval_s, env=env)
    assert outcome.status == "ok", outcome.error
    return summary.to_dict()


def test_the_measuring_process_runs_no_other_python_thread(tmp_path):
    # no sampler thread in the measured process: the parent samples it from outside
    started = time.time()
    metrics = _child_run(tmp_path, data__num_workers=0)
    assert metrics["python_threads_in_window"] == 1
    # the child's window, placed in time (UNIX seconds), lies inside the parent's wait for it
    assert started < metrics["window_start_unix"] < metrics["window_start_unix"] + metrics["measured_s"] < time.time()
    assert metrics["peak_main_rss_bytes"] > 50e6 and metrics["peak_host_rss_bytes"] >= metrics["peak_main_rss_bytes"]
    assert metrics["worker_rss_bytes"] == [] and metrics["peak_worker_rss_bytes"] is None
    assert metrics["gpu_util_pct"] is None and metrics["gpu_sample_note"] == ""


def test_a_run_whose_job_folder_is_too_deep_for_a_socket_keeps_its_scratch_outside_and_removes_it(tmp_path,
                                                                                                  short_tmp):
    """A job folder too deep for a loader worker's socket: the run's scratch (the workers' sockets, the metrics log)
    is where Python puts it, in the run's (short) TMPDIR, and the run removes it at its end."""
    deep = tmp_path / ("j" * 80)
    deep.mkdir()
    metrics = _child_run(deep, env={"TMPDIR": str(short_tmp)}, data__num_workers=1, log_every_n_steps=1)
    assert len(metrics["worker_rss_bytes"]) == 1  # the worker handed its batches over
    assert sorted(p.name for p in short_tmp.iterdir() if not p.name.startswith("torchinductor_")) == []


# the same on a CPU (the parent takes no sample inside the window there; the workers' peaks come from the kernel),
# with every check here: test_a_cpu_runs_parent_does_not_wake_inside_the_window_and_the_memory_peaks_stay
@pytest.mark.slow
def test_the_parent_samples_the_loader_workers_memory(tmp_path):
    # 300 ms per step keeps the worker alive for >= 1.2 s, a dozen of the parent's 0.1 s samples, on any machine
    metrics = _child_run(tmp_path, data__num_workers=1, data__persistent_workers=True, debug__slowdown_ms=300.0,
                         measure__sample_interval_s=0.1)
    assert len(metrics["worker_rss_bytes"]) >= 1 and metrics["peak_worker_rss_bytes"] > 10e6
    # the host peak holds the main process and its worker together; it cannot always exceed the main process's
    # exact peak from the kernel (that peak may come while the model is built, before any worker starts), but it
    # is never below either
    assert metrics["peak_host_rss_bytes"] >= max(metrics["peak_main_rss_bytes"], metrics["peak_worker_rss_bytes"])
    # what the harness itself spent in the window: the parent's CPU, sampling ten times a second, a small share
    assert metrics["parent_cpu_pct"] is not None and 0.0 <= metrics["parent_cpu_pct"] < 25.0


def test_the_parent_keeps_gpu_samples_only_between_the_window_markers(tmp_path, monkeypatch):
    from tests.test_monitor import FakeNvml

    nvml = FakeNvml()
    monkeypatch.setattr(monitor, "nvml_handle_for", lambda identity: monitor.GpuHandle(identity["uuid"], how="uuid"))
    watch = child_watch.Watch(monitor.Sampler(os.getpid(), nvml=nvml), 0.5)
    path = tmp_path / "progress.json"
    for phase, extra in [("build", {}), ("warmup", {"gpu": {"uuid": "GPU-1"}}), ("measure", {}), ("measured", {})]:
        path.write_text(json.dumps({"phase": phase, **extra}))
        assert watch.read_progress(path)["phase"] == phase
        watch.sample_if_due(now=1e9 if phase == "measure" else 0.0)  # the window's first poll samples at once
    assert watch.gpu_named and watch.sampler.gpu.handle == "GPU-1" and not watch.sampler.measuring
    assert watch.sampler.samples.gpu_util_pct == [87.0]  # one sample, the one inside the window


def test_a_result_written_long_enough_ago_ends_the_wait_unless_a_profile_is_pending(tmp_path):
    path = tmp_path / "result.json"
    assert not child_watch.result_grace_over(path)  # no result yet
    path.write_text(json.dumps({"status": "ok", "error": ""}))
    written = path.stat().st_mtime
    assert not child_watch.result_grace_over(path, grace_s=10.0, now=written + 5.0)  # teardown still has time
    assert child_watch.result_grace_over(path, grace_s=10.0, now=written + 11.0)
    path.write_text(json.dumps({"status": "ok", "error": "", "profiling": True}))  # the profile runs after it
    assert not child_watch.result_grace_over(path, grace_s=10.0, now=path.stat().st_mtime + 60.0)
    path.write_text('{"status": "ok", "err')  # not a result (a write cut short): waited for
    assert not child_watch.result_grace_over(path, grace_s=10.0, now=path.stat().st_mtime + 60.0)


def test_a_child_that_hangs_after_writing_its_result_is_killed_after_the_grace(tmp_path, monkeypatch):
    monkeypatch.setattr(child_watch, "RESULT_GRACE_S", 1.0)
    job = tmp_path / "job"
    job.mkdir()
    # a child that writes its result and then hangs, as a process group's or a loader's teardown can
    hang = ("import json, pathlib, sys, time\n"
            "p = pathlib.Path(sys.argv[1]) / 'result.json'\n"
            "p.write_text(json.dumps({'status': 'error', 'error': 'measured, then hung'}))\n"
            "time.sleep(600)\n")
    start = time.monotonic()
    outcome, summary, _ = isolate.run_child(job, 120.0, None, 0.5, argv=[sys.executable, "-c", hang, str(job)])
    took = time.monotonic() - start
    assert (outcome.status, outcome.error, summary) == ("error", "measured, then hung", None)
    assert took < 8.0  # the grace (1 s here) and a poll, not the default grace (10 s) nor the 120 s timeout


def _policy(tid: int = 0) -> int:
    return os.sched_getscheduler(tid)


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="Linux scheduling policies")
def test_the_waiting_parent_is_a_batch_task_that_never_preempts_the_child_and_is_restored_after(tmp_path):
    import threading

    seen = []

    class Child:  # a child that runs for three polls
        pid = os.getpid()

        def poll(self):
            seen.append(_policy())
            return 0 if len(seen) >= 3 else None

    if _policy() != os.SCHED_OTHER:
        pytest.skip("the test process itself runs under a policy its user chose (left alone by design)")
    started, ready, done = [], threading.Event(), threading.Event()

    def worker():
        started.append(threading.get_native_id())
        ready.set()
        done.wait(30)

    with child_watch.yielding():
        # a thread started while waiting inherits the batch policy, and is restored on the way out as well
        t = threading.Thread(target=worker)
        t.start()
        assert ready.wait(30) and _policy(started[0]) == os.SCHED_BATCH
    assert _policy() == os.SCHED_OTHER and _policy(started[0]) == os.SCHED_OTHER
    done.set()
    t.join()
    watch = child_watch.Watch(monitor.Sampler(None), 0.01)
    assert child_watch.wait(Child(), tmp_path, time.monotonic(), 60.0, None, watch) is False
    assert seen == [os.SCHED_BATCH] * 3 and _policy() == os.SCHED_OTHER  # the next child starts with the default


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="Linux scheduling policies")
def test_a_policy_the_user_chose_for_the_parent_is_left_alone():
    if _policy() != os.SCHED_OTHER:
        pytest.skip("the test process itself runs under a policy its user chose")
    os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    try:
        with child_watch.yielding():
            pass
        assert _policy() == os.SCHED_BATCH
    finally:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))


def test_the_progress_display_runs_no_thread_and_redraws_at_most_twice_a_second(monkeypatch):
    import io
    import threading

    from rich.console import Console

    from harness.commands import progress as progress_mod

    now = [1000.0]  # a clock of the test's own: a slow machine cannot stretch the half second below
    monkeypatch.setattr(progress_mod.time, "monotonic", lambda: now[0])
    out = io.StringIO()
    before = threading.active_count()
    with progress_mod.RunProgress(Console(file=out, force_terminal=True, width=80), "unet3d") as display:
        assert threading.active_count() == before  # rich's Status would wake a refresh thread 12.5 times a second
        display.update({"phase": "build"}, 0.1)
        drawn = out.getvalue()
        assert "building the model" in drawn
        for _ in range(49):  # a parent polling at 100 Hz for half a second
            now[0] += 0.01
            display.update({"phase": "warmup", "steps": 3}, 0.2)
        assert out.getvalue() == drawn  # nothing redrawn within 1 / REFRESH_HZ of the last draw
        display._drawn -= 1.0 / progress_mod.REFRESH_HZ
        display.update({"phase": "warmup", "steps": 3}, 0.7)
        assert "warm-up, 3 steps" in out.getvalue()[len(drawn):]


def _counting_watch(monkeypatch) -> list:
    """The parent's watches of the runs started from here, kept (their wake-up counts)."""
    watches = []

    class Counting(child_watch.Watch):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            watches.append(self)

    monkeypatch.setattr(child_watch, "Watch", Counting)
    return watches


# 4 measured steps of >= 300 ms each: a window of at least 1.2 s, however fast the machine, that a parent sampling
# every 50 ms would wake inside some twenty times
SLOW_WINDOW = dict(data__num_workers=1, data__persistent_workers=True, debug__slowdown_ms=300.0, measure__steps=4,
                   measure__sample_interval_s=0.05)


def test_a_cpu_runs_parent_does_not_wake_inside_the_window_and_the_memory_peaks_stay(tmp_path, monkeypatch):
    watches = _counting_watch(monkeypatch)
    shown = []
    metrics = _child_run(tmp_path, on_progress=lambda info, elapsed: shown.append(dict(info)), **SLOW_WINDOW)
    watch = watches[0]
    assert watch.window_wakeups == 0 and watch.sampler.samples.parent_cpu_pct is not None  # both edges seen
    # the display said once that it pauses, at the window's opening, and said nothing more until it closed
    paused = [i for i, info in enumerate(shown) if info.get("paused")]
    assert len(paused) == 1 and shown[paused[0]]["phase"] == "measure"
    assert all(info["phase"] != "measure" for info in shown[paused[0] + 1:])
    # nothing lost from the record: the worker's and the host's peaks come from the kernel (read by the child)
    assert len(metrics["worker_rss_bytes"]) == 1 and metrics["peak_worker_rss_bytes"] > 10e6
    # the host peak is the main process's and its live workers' kernel peaks together; a worker's peak the parent
    # sampled may exceed what the kernel gave at the close by a page or so (seen once: 0.5 MB of 2.08 GB)
    assert metrics["peak_host_rss_bytes"] >= 0.99 * (metrics["peak_main_rss_bytes"] + metrics["peak_worker_rss_bytes"])
    assert metrics["peak_host_rss_bytes"] >= max(metrics["peak_main_rss_bytes"], metrics["peak_worker_rss_bytes"])
    assert metrics["peak_main_rss_bytes"] > 50e6
    # what the harness itself spent in the window: the parent's CPU, a small share
    assert 0.0 <= metrics["parent_cpu_pct"] < 25.0


@pytest.mark.slow  # a whole scenario in fresh processes: the default tier keeps its cheaper siblings
def test_without_a_progress_channel_the_parent_polls_through_the_window(tmp_path, monkeypatch):
    """The count above is a real count: the parent of old (polling the progress file) wakes inside the window."""
    watches = _counting_watch(monkeypatch)
    monkeypatch.setattr(channel.Markers, "open", classmethod(lambda cls: None))
    _child_run(tmp_path, **SLOW_WINDOW)
    assert watches[0].window_wakeups > 0
