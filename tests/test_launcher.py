"""The warm launcher: runs forked from one zygote per sweep are still fresh processes (their own PID, session and
state), the zygote forks only with one thread and no CUDA, anything unsafe falls back to a fresh interpreter with
one line, and a run's wall time is split into its phases."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from harness import config as config_mod
from harness.commands import hydra_edge
from harness.run.parent import launcher, phases, runner
from harness.run.parent import env as env_mod
from harness.run.parent import zygote as zygote_mod
from harness.workload import shared_data
from tests.conftest import REPO

PROBE = ("workload=custom", "workload.model._target_=tests.fork_probe.probe_net", "workload.input_shape=[1,8,8,8]",
         "workload.target=segmentation", "workload.num_classes=2", "measure.steps=2", "measure.warmup_steps=1",
         "device=cpu", "size=smoke")


def _probe_config(results) -> config_mod.RunConfig:
    settings = hydra_edge.plain_settings(hydra_edge.compose_settings([*PROBE, f"results_dir={results}"]))
    return config_mod.resolve(config_mod.from_dict(settings), cuda_available=False)


def _probe_runs(results, tmp_path, monkeypatch, runs: int = 2, on_progress=None):
    out = tmp_path / "probe.jsonl"
    monkeypatch.setenv("FORK_PROBE_OUT", str(out))
    cfg = _probe_config(results)
    env, key = env_mod.environment(cfg.device)
    with launcher.warm() as session:
        records = [runner.run_and_store(cfg, env, key, on_progress and (lambda i, e: on_progress(session, i)))
                   for _ in range(runs)]
    by_pid: dict[int, dict] = {}
    for line in out.read_text().splitlines():  # the first the builder saw in each run
        by_pid.setdefault(json.loads(line)["pid"], json.loads(line))
    return records, list(by_pid.values())


@pytest.fixture(scope="module")
def probe_runs(tmp_path_factory) -> SimpleNamespace:
    """THREE probe runs forked from one warm launcher, and what was seen of its zygote while each built and warmed up
    (its threads, the forks it said, its environment): read by the tests of forked runs and of a run's phases."""
    tmp_path = tmp_path_factory.mktemp("probe-runs")
    zygote_threads, environs, forks = [], [], []

    def look(session, info):  # while a run builds and warms up, the zygote waits for it: as it is before a fork
        if session.zygote is not None:
            zygote_threads.append(len(os.listdir(f"/proc/{session.zygote.proc.pid}/task")))
            forks[:] = session.zygote.forks
            environs.append(Path(f"/proc/{session.zygote.proc.pid}/environ").read_bytes().split(b"\0"))

    with pytest.MonkeyPatch.context() as patch:
        records, seen = _probe_runs(tmp_path / "results", tmp_path, patch, runs=3, on_progress=look)
    return SimpleNamespace(records=records, seen=seen, zygote_threads=zygote_threads, environs=environs, forks=forks)


def test_forked_runs_are_fresh_processes_of_their_own_that_see_nothing_of_each_other(probe_runs):
    records, seen, forks = probe_runs.records, probe_runs.seen, probe_runs.forks
    zygote_threads, environs = probe_runs.zygote_threads, probe_runs.environs
    # before each fork the zygote had exactly one thread and no CUDA (it says so with each run it forks)
    assert forks == [{"threads": 1, "cuda_initialized": False, "cuda_driver": ""}] * 3
    assert [r.status for r in records] == ["ok"] * 3, records[0].error
    assert [r.launched_by for r in records] == ["fork"] * 3
    firsts = seen
    pids = {s["pid"] for s in firsts}
    assert len(pids) == 3 and os.getpid() not in pids
    for s in firsts:
        assert s["sid"] == s["pid"] == s["pgid"]  # a session and process group of its own, as a fresh child
        assert s["ppid"] != os.getpid()  # the zygote's child, not the parent's
    # what one run set (a module attribute, torch's thread count, numpy's global RNG) is not seen by the next
    assert [s["runs_seen"] for s in firsts] == [0, 0, 0]
    assert [s["gc_enabled"] for s in firsts] == [True] * 3  # the collector on, as a fresh process's (the zygote's off)
    # the launcher's imports collected and frozen before the fork: a run's collections walk only what it made, and
    # leave the launcher's pages shared (a walk over torch's objects copied ~100 MiB into each run)
    assert all(s["gc_frozen"] > 50_000 for s in firsts), [s["gc_frozen"] for s in firsts]
    assert all(s["gc_tracked"] < s["gc_frozen"] / 5 for s in firsts), [s["gc_tracked"] for s in firsts]
    assert [s["threads"] for s in firsts] == [torch.get_num_threads()] * 3
    leaked = np.random.RandomState(12345).random_sample()  # what the next run would draw after the last one's seed
    assert leaked not in [s["rng"] for s in firsts]
    assert firsts[1]["rng"] == firsts[2]["rng"]  # forked from the same zygote (once it has learnt the workload)
    assert zygote_threads and set(zygote_threads) == {1}
    # torch asks NVML, not the CUDA driver, whether there is a GPU: a check there leaves the zygote fork-safe
    assert environs and all(b"PYTORCH_NVML_BASED_CUDA_CHECK=1" in e for e in environs)


def test_the_zygote_refuses_to_fork_with_a_thread_or_cuda_and_stops_the_blas_pools():
    code = textwrap.dedent("""
        import threading, time, torch, numpy
        from harness.run.parent import zygote
        zygote.preload(zygote.PRELOAD)
        print(repr(zygote.unsafe_to_fork()))  # numpy's OpenBLAS pool stopped: one thread
        torch.cuda.is_initialized = lambda: True
        print(repr(zygote.unsafe_to_fork()))
        torch.cuda.is_initialized = lambda: False
        real = zygote.driver.cuda_state
        zygote.driver.cuda_state = lambda: "mapped"  # mapped, never initialised: no reason not to fork
        print(repr(zygote.unsafe_to_fork()))
        def driver_loader():  # a module whose import loads the CUDA driver and initialises it, as a library may
            zygote.driver.cuda_state = lambda: "the CUDA driver is initialised in the launcher (it counts 1 devices)"
            zygote._driver_loaded = lambda: True
        real_import = zygote.importlib.import_module
        zygote.importlib.import_module = lambda name: driver_loader() if name == "driver_loader" else real_import(name)
        zygote.preload(["json", "driver_loader", "csv"])
        print(repr(zygote.unsafe_to_fork()))
        zygote.driver.cuda_state = real
        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
        print(repr(zygote.unsafe_to_fork()))
    """)
    env = dict(os.environ, PYTHONPATH=str(REPO), JE_ARROW_MALLOC_CONF="background_thread:false")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    safe, cuda, driver, culprit, thread = out.stdout.splitlines()
    assert safe == "''"
    assert "CUDA is initialised in the launcher" in cuda and driver == "''"
    assert "initialised in the launcher (it counts 1 devices) (the driver loaded by importing driver_loader)" \
        in culprit  # the first import that loaded it, named
    assert "2 threads in the launcher" in thread


def test_on_a_gpu_the_launcher_leaves_imports_that_make_it_unsafe_to_fork_to_the_runs(tmp_path):
    # three modules a sweep's first run imported; the second starts a thread when imported (as a library that starts
    # a pool at import time may): a probe finds it, the launcher imports only the first and stays forkable
    (tmp_path / "fine_a.py").write_text("")
    (tmp_path / "driver_b.py").write_text("import threading, time\n"
                                          "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n")
    (tmp_path / "fine_c.py").write_text("")
    code = textwrap.dedent("""
        import sys
        from harness.run.parent import zygote
        print(zygote.preload_fork_safe(["fine_a", "driver_b", "fine_c"], probe=True))
        print(sorted(m for m in ("fine_a", "driver_b", "fine_c") if m in sys.modules), zygote.LEFT_TO_RUNS)
        print(repr(zygote.unsafe_to_fork()))
        zygote.preload_fork_safe(["driver_b"], probe=False)  # without a probe (a CPU sweep): imported as before
        print(repr(zygote.unsafe_to_fork()))
    """)
    env = dict(os.environ, PYTHONPATH=f"{REPO}:{tmp_path}", JE_ARROW_MALLOC_CONF="background_thread:false")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    failed, imported, safe, unsafe = out.stdout.splitlines()[-4:]
    assert failed == "[]" and imported == "['fine_a'] ['driver_b']" and safe == "''"
    assert "2 threads in the launcher" in unsafe
    assert "not preloaded from driver_b on" in out.stdout


@pytest.mark.slow  # minutes of the default tier's 8; the same path runs in faster tests
def test_a_zygote_that_cannot_fork_safely_hands_the_runs_to_fresh_interpreters_saying_so_once(
        results, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FORK_PROBE_THREAD", "1")  # the zygote, importing the first run's model module, starts a thread
    monkeypatch.setattr(launcher, "_said", set())
    records, seen = _probe_runs(results, tmp_path, monkeypatch, runs=3)
    assert [r.status for r in records] == ["ok"] * 3
    assert [r.launched_by for r in records] == ["exec", "exec", "exec"]  # refused before the first fork
    err = capsys.readouterr().err
    assert err.count("warm launcher off") == 1 and "threads in the launcher" in err
    assert [s["runs_seen"] for s in seen] == [0, 0, 0]


@pytest.mark.slow  # a whole scenario in fresh processes: the default tier keeps its cheaper siblings
def test_a_zygote_that_fails_to_start_hands_the_runs_to_fresh_interpreters(results, tmp_path, monkeypatch, capsys):
    real = launcher.subprocess.Popen

    def broken(args, **kwargs):  # the zygote's command fails at once, as an import error would make it
        if "harness.run.parent.zygote" in args:
            args = [sys.executable, "-c", "import sys; print('ImportError: no module named torch'); sys.exit(1)"]
        return real(args, **kwargs)

    monkeypatch.setattr(launcher.subprocess, "Popen", broken)
    monkeypatch.setattr(launcher, "_said", set())
    records, _ = _probe_runs(results, tmp_path, monkeypatch, runs=2)
    assert [r.launched_by for r in records] == ["exec", "exec"] and records[0].status == "ok"
    err = capsys.readouterr().err
    assert err.count("warm launcher off: the launcher did not start (ImportError: no module named torch)") == 1


@pytest.mark.slow  # a whole scenario in fresh processes: the default tier keeps its cheaper siblings
def test_exec_launch_is_chosen_with_one_line(results, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(launcher.LAUNCH_ENV, "exec")
    monkeypatch.setattr(launcher, "_said", set())
    records, _ = _probe_runs(results, tmp_path, monkeypatch, runs=2)
    assert [r.launched_by for r in records] == ["exec", "exec"] and records[1].status == "ok"
    assert capsys.readouterr().err.count(f"warm launcher off: {launcher.LAUNCH_ENV}=exec") == 1


def test_a_runs_wall_time_is_split_into_its_phases(probe_runs):
    records = probe_runs.records
    for r in records:
        parts = [r.phase_launch_s, r.phase_model_s, r.phase_data_s, r.phase_warmup_s, r.measured_s, r.phase_teardown_s]
        assert all(p is not None and p >= 0 for p in parts) and r.phase_wall_s > 0
        # the phases follow one another: together they are the run's wall time, but for the window's edges
        assert 0.8 * r.phase_wall_s <= sum(parts) <= r.phase_wall_s * 1.001
        assert r.phase_warmup_s >= r.first_step_s * 0.999
        model_parts = [r.phase_imports_s, r.phase_context_s, r.phase_flops_s, r.phase_build_s, r.phase_to_device_s]
        assert all(p is not None and p >= 0 for p in model_parts) and sum(model_parts) <= r.phase_model_s * 1.001
        assert r.phase_first_step_s == r.first_step_s
        assert r.phase_warmup_rest_s == pytest.approx(r.phase_warmup_s - r.first_step_s)
    assert records[0].phase_gap_s is not None and records[1].phase_gap_s >= 0
    # the first run may wait for the launcher's imports; the later ones find it ready, and are the steady runs
    assert records[0].phase_launcher_wait_s >= 0 and records[0].phase_launcher_wait_s <= records[0].phase_launch_s
    assert [r.phase_launcher_wait_s <= phases.READY_WAIT_S for r in records[1:]] == [True, True]
    line = phases.duty_cycle(records, 100.0)
    assert line.startswith("duty cycle ") and "3 runs measured" in line and "launch" in line and "window" in line
    beyond = [phases.beyond_window_s(r) for r in phases.steady(records)]
    assert len(beyond) >= 2 and f"beyond its window (mean of {len(beyond)}; " in line


def test_phases_of_a_run_that_failed_early_are_left_empty():
    fields = phases.record_fields({"start": 10.0, "build": 11.0}, spawned=9.5, gone=12.0, gap_s=None, how="fork")
    assert fields["phase_launch_s"] == 1.5 and fields["phase_model_s"] is None and fields["phase_wall_s"] == 2.5
    assert fields["phase_teardown_s"] is None and fields["phase_gap_s"] is None and fields["launched_by"] == "fork"


def test_the_duty_cycle_is_the_windows_share_of_the_wall_time():
    class R:
        measured_s, phase_launch_s, phase_gap_s = 3.0, 0.5, 1.0

    line = phases.duty_cycle([R(), R()], 24.0)
    assert line.startswith("duty cycle 25%: 2 runs measured 6.0 s in 24.0 s")
    assert "launch 0.5" in line and "between runs 1.0" in line and "ready launcher" not in line  # no wait recorded


def test_a_steady_runs_cost_beyond_its_window_counts_only_runs_forked_from_a_ready_launcher():
    def run(how="fork", wait=0.0, wall=10.0, window=3.0, gap=1.0):
        return SimpleNamespace(launched_by=how, phase_launcher_wait_s=wait, phase_wall_s=wall, measured_s=window,
                               phase_gap_s=gap, phase_launch_s=(wait or 0.0) + 0.1)

    first = run(wait=6.0, wall=16.0)  # waited for the launcher's imports
    runs = [first, run(), run(wall=12.0), run(how="exec", wait=None, wall=14.0), run(wait=None), run(window=None)]
    assert phases.steady(runs) == runs[1:3] and [phases.beyond_window_s(r) for r in runs[1:3]] == [8.0, 10.0]
    line = phases.duty_cycle(runs, 80.0)
    assert line.endswith("; a run forked from a ready launcher: 9.0 s beyond its window (mean of 2; 8.0-10.0)")
    assert phases.steady_cost([first]) == "" and phases.steady_cost(runs[1:2]).endswith("(mean of 1)")
    # a setting's first run pays its first step's one-time costs again: the runs of settings already run, apart
    hashed = [SimpleNamespace(**vars(run(wall=w)), config_hash=h) for w, h in ((20.0, "a"), (12.0, "b"), (8.0, "a"),
                                                                             (6.0, "b"))]
    assert phases.steady_cost(hashed) == ("a run forked from a ready launcher: 9.5 s beyond its window (mean of 4; "
                                          "4.0-18.0); 5.0 s once its settings had run (mean of 2)")
    fields = phases.record_fields({}, spawned=1.0, gone=2.0, gap_s=None, how="exec", waited_s=3.0)
    assert fields["phase_launcher_wait_s"] is None  # a fresh interpreter waits for no launcher


@pytest.mark.parametrize("dataset", ["volumes", "images"])
def test_shared_synthetic_data_is_byte_identical_to_what_a_run_makes(tmp_path, monkeypatch, dataset):
    from harness.workload import data

    def build():
        if dataset == "volumes":
            d = data.RandomCropVolumes([16, 16, 16], length=4, num_volumes=3, seed=7)
            return d.images + d.labels
        d = data.RandomCropImages([32, 32], length=4, num_images=5, num_classes=10, seed=7, transform=None)
        return [d.images, d.labels]

    mapped = []
    real = shared_data._mapped
    monkeypatch.setattr(shared_data, "_mapped", lambda path: mapped.append(path) or real(path))
    monkeypatch.delenv(shared_data.ENV, raising=False)
    own = build()
    monkeypatch.setenv(shared_data.ENV, str(tmp_path))
    first = build()  # the first run makes it and keeps it
    assert mapped == []
    shared = build()  # the next maps it, and makes nothing
    assert len(mapped) == len(own)
    assert len(list(tmp_path.glob(f"crop-{dataset}-*/done"))) == 1
    for a, b, c in zip(own, first, shared):
        assert a.dtype == b.dtype == c.dtype and a.shape == b.shape == c.shape
        assert a.numpy().tobytes() == b.numpy().tobytes() == c.numpy().tobytes()
    shared[0][..., 0] += 1  # a run may write to its arrays (copy-on-write), never to the file
    assert build()[0].numpy().tobytes() == own[0].numpy().tobytes()


def test_the_duty_cycle_benchmark_accounts_for_every_second_of_the_wall_time():
    import importlib.util

    path = REPO / "benchmarks" / "duty_cycle.py"
    spec = importlib.util.spec_from_file_location("duty_cycle_benchmark", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)

    class R:
        phase_launch_s, phase_model_s, phase_data_s, phase_warmup_s = 0.1, 1.0, 0.2, 2.0
        measured_s, phase_teardown_s, phase_gap_s = 3.0, 0.2, 0.5

    rows = dict(bench.split([R(), R()], 20.0))
    assert rows["measured window"] == 6.0 and rows["the command itself (start, preflight, table)"] == 6.0
    assert sum(rows.values()) == pytest.approx(20.0)
    text = bench.report([R(), R()], 20.0, "warm launcher")
    assert "duty cycle 30%" in text and "measured window" in text
    R.phase_imports_s, R.phase_first_step_s = 0.5, 1.5
    text = bench.report([R(), R()], 20.0, "warm launcher")
    assert "    imports" in text and "first step" in text and "FLOP count" not in text  # a part no run had: no line


def test_a_record_written_before_the_phase_columns_reads_back_with_them_empty(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from harness.store import RunRecord, load_records, write_record

    path = write_record(RunRecord(run_id="old", status="ok", timestamp="2026-01-01T00:00:00+0000",
                                  phase_launch_s=1.0, launched_by="fork"), tmp_path)
    table = pq.read_table(path)
    new = [n for n in table.column_names if n.startswith("phase_") or n == "launched_by"]
    assert len(new) == 17
    pq.write_table(pa.table({n: table[n] for n in table.column_names if n not in new}), path)
    (old,) = load_records(tmp_path)
    assert old.run_id == "old" and old.phase_launch_s is None and old.phase_gap_s is None and old.launched_by == ""


@pytest.mark.slow  # minutes of the default tier's 8; the same path runs in faster tests
def test_code_edited_or_an_environment_changed_during_a_sweep_starts_a_new_zygote(results, tmp_path, monkeypatch):
    """The zygote holds the code it imported and the environment it started with: a source file changed on disk
    since, or a variable changed in the parent, makes a new one start."""
    monkeypatch.setenv("FORK_PROBE_OUT", str(tmp_path / "probe.jsonl"))
    cfg = _probe_config(results)
    env, key = env_mod.environment(cfg.device)
    probe = REPO / "tests" / "fork_probe.py"
    with launcher.warm() as session:
        first = [runner.run_and_store(cfg, env, key) for _ in range(2)]  # the second forked once it had learnt
        before = session.zygote.proc.pid
        stamp = probe.stat().st_mtime_ns + 10**9
        os.utime(probe, ns=(stamp, stamp))  # as an editor saving it
        last = runner.run_and_store(cfg, env, key)
        assert session.zygote.proc.pid != before and last.launched_by == "fork" and last.status == "ok"
        before = session.zygote.proc.pid
        monkeypatch.setenv("OMP_SCHEDULE", "static")  # a variable a library reads when it is loaded
        after_env = runner.run_and_store(cfg, env, key)
        assert session.zygote.proc.pid != before and after_env.launched_by == "fork"
    assert [r.launched_by for r in first] == ["fork", "fork"]


def test_a_sweep_served_from_the_store_imports_neither_torch_nor_scipy(results):
    """A sweep of a built-in workload whose every rung is in the store starts nothing and imports no torch (its
    environment key, and whether this machine has CUDA, are known without it), and with one round and no
    calibration it computes no band, so it loads no scipy either (the statistics load it at their first value)."""
    from harness.store import RunRecord, write_record
    from harness.config import ladder as ladder_mod
    from harness.sweeps import rungs

    # one round, as the earlier sweep had (the default, repeats=auto, would measure more rounds to decide)
    args = ("+ladder=phase2", "measure.steps=2", "measure.warmup_steps=1", "sweep.repeats=1", f"results_dir={results}")
    settings = hydra_edge.plain_settings(hydra_edge.compose_settings(list(args[1:])))
    ladder = ladder_mod.load("phase2")
    ctx = rungs.SweepContext(sweep_id="earlier", ladder=ladder, settings=settings,
                             user_keys=frozenset({"measure.steps", "measure.warmup_steps", "results_dir"}))
    for rung in ladder.rungs:  # an earlier sweep's records of these very settings, here and now
        cfg = rungs.rung_config(ctx, rung.index, runner.Machine(cuda_available=False))
        env, key = env_mod.environment(cfg.device)
        write_record(RunRecord(run_id=f"earlier-{rung.index}", status="ok", timestamp="2026-01-01T00:00:00+0000",
                               sweep_id="earlier", ladder="phase2", rung=rung.index, workload="unet3d", device="cpu",
                               config_hash=config_mod.config_hash(cfg), env_key=key, samples_per_s=10.0 + rung.index,
                               step_ms=[100.0] * 5, step_ms_p50=100.0, data_wait_frac=0.0, measured_s=0.5, cpu_count=2,
                               cpu_model="x"), results)
    code = ("import sys; from harness import cli; from harness.run.parent import launcher; "
            "launcher.Zygote = None; "  # starting the warm launcher would fail here: a replayed sweep starts none
            "rc = cli.main(sys.argv[1:]); "
            "print('loaded:', sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'scipy'})); sys.exit(rc)")
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"}
    out = subprocess.run([sys.executable, "-c", code, "sweep", *args], cwd=REPO, capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count(": ok (cached)") == 4 and out.stdout.splitlines()[-1] == "loaded: []"
    assert "[no band: no variance known]" in out.stdout  # the table was drawn, without a band


def test_the_launcher_imports_the_first_runs_model_module_and_builds_nothing(tmp_path, monkeypatch):
    """Before its first fork the zygote imports the modules of the first run's model, loss and dataset targets, so
    that no run pays its libraries' imports; it calls nothing, so no run's code leaves state every fork would see."""
    out = tmp_path / "probe.jsonl"
    monkeypatch.setenv("FORK_PROBE_OUT", str(out))
    monkeypatch.delitem(sys.modules, "tests.fork_probe", raising=False)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"workload": {"model": {"_target_": "tests.fork_probe.probe_net"},
                                               "loss": {"_target_": "no_such_package.Loss"}}}))
    assert zygote_mod.warm_workload(config) == ["no_such_package"]  # the run reports its own import error
    assert "tests.fork_probe" in sys.modules and sys.modules["tests.fork_probe"].RUNS_SEEN == 0
    assert not out.exists()  # the builder was never called


def test_the_launcher_imports_a_workloads_own_training_modules_too(tmp_path, monkeypatch):
    """A LightningModule workload names no model: its module (which imports Lightning, seconds on a 2-core CPU) is
    imported before the first fork as a model's is, and so are a step's and a collate's."""
    monkeypatch.setenv("FORK_PROBE_OUT", str(tmp_path / "probe.jsonl"))
    monkeypatch.delitem(sys.modules, "tests.fork_probe", raising=False)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"workload": {"lightning_module": {"_target_": "tests.fork_probe.probe_net"},
                                               "step": {"_target_": "no_such_step.step", "_partial_": True},
                                               "collate": {"_target_": "no_such_collate.collate"}}}))
    assert zygote_mod.warm_workload(config) == ["no_such_step", "no_such_collate"]
    assert "tests.fork_probe" in sys.modules and sys.modules["tests.fork_probe"].RUNS_SEEN == 0


def test_the_launcher_preloads_torch_dynamo_for_every_run_that_builds_an_optimizer(tmp_path):
    """torch's optimizers import torch._dynamo when built (a second or two on a 2-core CPU): the launcher imports it
    for a run that builds one, a reference workload's or a user's model's; not for a loader run."""
    gpt = {"model": {"_target_": "harness_models.gpt.gpt"}, "optimizer": {"_target_": "torch.optim.AdamW"}}
    user = {"model": {"_target_": "tests.fork_probe.probe_net"}}
    configs = {"loader": {"workload": gpt, "measure": {"mode": "loader"}},  # first: the others import it
               "user": {"workload": user, "measure": {"mode": "train"}},
               "reference": {"workload": gpt, "measure": {"mode": "train"}}}
    for name, config in configs.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(config))
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from harness.run.parent import zygote
        for name in {list(configs)}:
            zygote.warm_workload(Path({str(tmp_path)!r}) / (name + ".json"))
            print(name, "torch._dynamo" in sys.modules)
    """)
    premise = ("import sys, torch; torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))]); "
               "print('torch._dynamo' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": str(REPO), "FORK_PROBE_OUT": str(tmp_path / "probe.jsonl")}
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd=REPO, env=env) for code in (script, premise)]  # two fresh interpreters at once
    outs = [proc.communicate(timeout=300) for proc in procs]
    assert outs[0][0].split() == ["loader", "False", "user", "True", "reference", "True"], outs[0][1]
    assert outs[1][0].split() == ["True"], outs[1][1]  # what a fresh process building the optimizer imports


def test_on_a_gpu_torchs_optimizer_imports_are_preloaded_even_where_the_workloads_library_is_left_to_the_runs(
        tmp_path):
    """On an H200 MONAI's import left the launcher unsafe to fork, and torch._dynamo, probed after it, was left to
    every run too (seconds of each run's model phase): torch's own imports are probed apart, before the workload's
    modules, and the reason a module is left to the runs is said."""
    config = tmp_path / "reference.json"
    config.write_text(json.dumps({"device": "cuda", "measure": {"mode": "train"},
                                  "workload": {"model": {"_target_": "harness_models.gpt.gpt"}}}))
    script = textwrap.dedent(f"""
        import sys, threading, time
        from pathlib import Path
        from harness.run.parent import zygote
        real = zygote.importlib.import_module
        def starts_a_thread(name, *args, **kwargs):  # as a library that starts a pool when imported, on the GPU image
            if name == "harness_models.gpt":
                threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
            return real(name, *args, **kwargs)
        zygote.importlib.import_module = starts_a_thread
        zygote.warm_workload(Path({str(config)!r}), probe=True)
        print("torch._dynamo" in sys.modules, "harness_models.gpt" in sys.modules, zygote.LEFT_TO_RUNS)
        none = f"none: probed {{zygote.PROBED}}, threads {{zygote._threads()}}"
        print(zygote.LEFT_WHY.get("harness_models.gpt", none))
        print(repr(zygote.unsafe_to_fork()))
    """)
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "JE_ARROW_MALLOC_CONF": "background_thread:false"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    preloaded, why, safe = out.stdout.splitlines()[-3:]
    assert preloaded == "True False ['harness_models.gpt']", out.stdout  # all it said, should this fail again
    assert why.startswith("2 threads in the launcher: ") and safe == "''"
    assert f"not preloaded from harness_models.gpt on: its import leaves the launcher unsafe to fork ({why})" \
        in out.stdout


def test_runs_started_under_fresh_are_fresh_interpreters_and_the_session_stays():
    with launcher.warm() as session:
        with launcher.fresh():
            assert launcher.active() is None  # launcher.start makes a PlainChild here
        assert launcher.active() is session
    assert launcher.active() is None
