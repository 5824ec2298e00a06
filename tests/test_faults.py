"""The fault suite: every way the real world breaks a benchmark store, end to end on the CPU.

Each scenario asserts: the outcome is recorded or refused with a clear message, no finished result
is lost, no process is left behind (checked by PID), and the work can go on.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import psutil
import pytest

from harness import cli, config as config_mod, store
from harness.run.parent import env as env_mod, isolate, launcher
from harness.config.identity import env_key
from harness.store import RunRecord, load_runs, write_record
from tests.conftest import REPO, TINY_MODEL_ARGS

TINY_RUN = (*TINY_MODEL_ARGS, "measure.steps=3", "measure.warmup_steps=1")  # the process is tested, not the model


def _record(run_id: str, **kw) -> RunRecord:
    fields = dict(workload="unet3d", size="smoke", device="cpu", cpu_model="test CPU", cpu_count=2, samples_per_s=10.0)
    return RunRecord(run_id=run_id, status="ok", timestamp="2026-01-01T00:00:00+0000", **{**fields, **kw})


# ------------------------------------------------------------------------------------------
# 1. the parent killed: no orphan, no stale job folder


def _default_signals() -> None:
    """In the parent-to-be: SIGINT and SIGHUP at their defaults, as in a terminal. A test run started in the
    background (``cmd &`` without job control ignores SIGINT; ``nohup`` ignores SIGHUP) would otherwise hand
    the ignoring on, and Python keeps an ignored SIGINT ignored: the parent would never see the test's signal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _start_parent(results: Path, *args: str, tmp: Path | None = None) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO), **({"TMPDIR": str(tmp)} if tmp else {}))
    return subprocess.Popen([sys.executable, "-m", "harness", "run", f"results_dir={results}", *args], cwd=REPO,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_default_signals)


def _start_sweep(results: Path, *args: str, tmp: Path | None = None) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO), **({"TMPDIR": str(tmp)} if tmp else {}))
    return subprocess.Popen([sys.executable, "-m", "harness", "sweep", "+ladder=precision", f"results_dir={results}",
                             *args], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_default_signals)


def _measuring_processes(parent_pid: int, want_workers: int, deadline_s: float = 240, ranks: int = 1,
                         forked: bool = False) -> list[psutil.Process]:
    """The measuring child (or the launcher and its ``ranks``; ``forked``: the warm launcher and the run it forked)
    and the loader workers, once they are all up (waits as long as the machine needs): every process under the
    parent then."""
    end = time.monotonic() + deadline_s
    command = "harness.run.parent.zygote" if forked else "harness.run.child"
    while time.monotonic() < end:
        try:
            kids = psutil.Process(parent_pid).children(recursive=True)
        except psutil.NoSuchProcess:
            break
        measuring = {k.pid for k in kids if command in " ".join(_cmdline(k))}
        workers = [k for k in kids if k.pid in measuring and _parent_pid(k) in measuring]  # forked: same command line
        if forked:  # the zygote (under the command, or its `run`) forks the run; the run's children are its workers
            zygotes = {k.pid for k in kids if k.pid in measuring and _parent_pid(k) not in measuring}
            runs = {k.pid for k in kids if _parent_pid(k) in zygotes}
            found = len(runs) >= ranks and sum(_parent_pid(k) in runs for k in kids) >= want_workers
        else:
            found = len(measuring) - len(workers) >= ranks and len(workers) >= want_workers
        if found:
            return kids
        time.sleep(0.2)
    raise AssertionError("the measuring process never started")


def _parent_pid(p: psutil.Process) -> int | None:
    try:
        return p.ppid()
    except psutil.Error:
        return None


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def _gone(procs: list[psutil.Process], within_s: float = 30) -> list[int]:
    end = time.monotonic() + within_s
    alive = procs
    while alive and time.monotonic() < end:
        alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.1)
    return [p.pid for p in alive]


@pytest.mark.parametrize("sig", [pytest.param(signal.SIGKILL, marks=pytest.mark.slow), signal.SIGTERM,
                                 pytest.param(signal.SIGHUP, marks=pytest.mark.slow),
                                 pytest.param(signal.SIGINT, marks=pytest.mark.slow)])
def test_a_parent_ended_by_any_signal_leaves_no_process_behind(results, short_tmp, sig):
    tmp = short_tmp  # the command's temporary folder: nothing of the run may stay in it
    parent = _start_parent(results, "debug.fault=hang", "debug.fault_step=1", "timeout_s=300",
                           "data.num_workers=1", *TINY_RUN, tmp=tmp)
    try:
        procs = _measuring_processes(parent.pid, want_workers=1, forked=True)  # a single run forks from its launcher
        os.kill(parent.pid, sig)
        out, err = parent.communicate(timeout=60)
        assert _gone(procs) == [], f"left running after {sig.name}: {[p.pid for p in procs]}"
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)
    if sig != signal.SIGKILL:  # the parent had a chance to say what happened, in one line, no traceback
        assert parent.returncode == 128 + sig
        assert f"interrupted ({sig.name})" in err and "Traceback" not in err
        _assert_nothing_left_in(tmp)


def _assert_nothing_left_in(tmp: Path) -> None:
    """The killed run's scratch went with its job folder: its loader worker's socket folder (``pymp-*``, which a
    killed worker cannot remove) among it. torch.compile's cache may stay: it is kept from one run to the next."""
    assert sorted(p.name for p in tmp.iterdir() if not p.name.startswith("torchinductor_")) == []


@pytest.mark.parametrize("deep", [False, True])
def test_a_runs_scratch_is_in_its_job_folder_unless_a_socket_could_not_be_made_there(tmp_path, short_tmp, deep):
    """A loader worker hands its batches over through a Unix socket in the scratch folder: in a job folder too deep
    for a socket's path (a long TMPDIR) the worker would fail and the run hang, so the scratch stays where it was."""
    job = tmp_path / ("j" * 80) if deep else short_tmp / "harness-job-12345678"
    job.mkdir()
    code = ("import multiprocessing.util as u, pathlib, sys; from harness.run.child.main import _scratch_in; "
            "_scratch_in(pathlib.Path(sys.argv[1])); from multiprocessing.connection import Listener; "
            "listener = Listener(family='AF_UNIX'); print(u.get_temp_dir()); print(listener.address)")
    out = subprocess.run([sys.executable, "-c", code, str(job)], capture_output=True, text=True, cwd=REPO,
                         env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert out.returncode == 0, out.stderr  # a socket was made in the scratch folder, wherever it is
    scratch, address = map(Path, out.stdout.split())
    assert address.parent == scratch and (scratch.parent == job) == (not deep)
    assert not scratch.exists()  # removed when the process ended


@pytest.mark.parametrize("sig", [pytest.param(signal.SIGKILL, marks=pytest.mark.slow), signal.SIGTERM,
                                 pytest.param(signal.SIGINT, marks=pytest.mark.slow)])
def test_a_sweep_ended_by_any_signal_leaves_no_forked_run_nor_its_launcher_behind(results, short_tmp, sig):
    tmp = short_tmp
    parent = _start_sweep(results, "debug.fault=hang", "debug.fault_step=1", "timeout_s=300", "data.num_workers=1",
                          *TINY_RUN, tmp=tmp)
    try:
        procs = _measuring_processes(parent.pid, want_workers=1, forked=True)  # the launcher, the run, its worker
        assert len(procs) >= 3
        os.kill(parent.pid, sig)
        out, err = parent.communicate(timeout=60)
        assert _gone(procs) == [], f"left running after {sig.name}: {[p.pid for p in procs]}"
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)
    if sig != signal.SIGKILL:
        assert parent.returncode == 128 + sig
        assert f"interrupted ({sig.name})" in err and "Traceback" not in err
        _assert_nothing_left_in(tmp)


@pytest.mark.slow  # minutes of the default tier's 8; the same path runs in faster tests
def test_a_forked_run_that_hangs_times_out_and_the_sweep_goes_on(results):
    parent = _start_sweep(results, "debug.fault=hang", "debug.fault_step=1", "timeout_s=12", *TINY_RUN)
    out, err = parent.communicate(timeout=600)
    assert parent.returncode == 0, out + err
    frame = load_runs(results)
    assert list(frame["status"]) == ["timeout"] * 3 and set(frame["launched_by"]) == {"fork"}
    assert frame["error"].str.contains("timeout_s=12").all()
    assert "warm launcher off" not in err
    assert not [p for p in psutil.process_iter() if "harness.run.parent.zygote" in " ".join(_cmdline(p))
                and _environ(p).get("HARNESS_PARENT_PID") == str(parent.pid)]


def _environ(p: psutil.Process) -> dict:
    try:
        return p.environ()
    except psutil.Error:
        return {}


def test_job_folders_of_dead_parents_are_removed_and_live_ones_kept(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale, live, foreign = (tmp_path / f"{isolate.JOB_PREFIX}{n}" for n in ("stale", "live", "foreign"))
    for folder in (stale, live, foreign):
        folder.mkdir()
    (stale / "parent.pid").write_text(str(dead.pid))
    (live / "parent.pid").write_text(str(os.getppid()))
    assert isolate.clean_stale_jobs(str(tmp_path)) == 1
    assert not stale.exists() and live.exists() and foreign.exists()


def test_a_result_written_before_a_hang_is_kept(tmp_path):
    """A child that wrote its result and then hung (say, on worker shutdown) still measured."""
    job = tmp_path / "job"
    job.mkdir()
    (job / "result.json").write_text('{"status": "ok", "error": "", "samples_per_s": 3.5}')
    script = "import time; time.sleep(600)"
    (job / "config.json").write_text("{}")
    real = launcher.subprocess.Popen

    def sleeper(args, **kw):
        return real([sys.executable, "-c", script], **kw)

    launcher.subprocess.Popen = sleeper
    try:
        outcome, summary, _ = isolate.run_child(job, timeout_s=1.0, on_progress=None)
    finally:
        launcher.subprocess.Popen = real
    assert outcome.status == "ok" and summary.samples_per_s == 3.5


# ------------------------------------------------------------------------------------------
# 2. one bad file never blocks the store


def _store_with_bad_files(results: Path) -> None:
    write_record(_record("good-1", sweep_id="s", ladder="l", rung=0, change=""), results)
    write_record(_record("good-2", sweep_id="s", ladder="l", rung=1, change="precision=bf16-mixed"), results)
    runs = results / "runs"
    (runs / ".tmp-killed-writer.parquet").write_bytes(b"PAR1 half a file")
    good = (runs / "good-1.parquet").read_bytes()
    (runs / "truncated.parquet").write_bytes(good[: len(good) // 2])


def test_temp_files_and_a_truncated_record_are_skipped_and_named(results):
    _store_with_bad_files(results)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        frame = load_runs(results)
    assert sorted(frame["run_id"]) == ["good-1", "good-2"]
    messages = [str(w.message) for w in seen if issubclass(w.category, store.UnreadableRecord)]
    assert len(messages) == 1 and "truncated.parquet" in messages[0]


def test_table_still_prints_with_one_line_naming_the_bad_file(results, capsys):
    _store_with_bad_files(results)
    assert cli.main(["table", "--results", str(results), "--sweep", "s"]) == 0
    out, err = capsys.readouterr()
    assert "precision=bf16-mixed" in out
    assert "warning: skipped unreadable record" in err and "truncated.parquet" in err and "Traceback" not in err


def test_check_exits_2_not_1_on_input_problems(results, capsys):
    assert cli.main(["check", "--baseline", "nope", "--results", str(results / "missing")]) == 2
    write_record(_record("only", sweep_id="s", ladder="l", rung=0, change=""), results)
    (results / "baselines").mkdir()
    (results / "baselines" / "broken.parquet").write_bytes(b"not parquet")
    assert cli.main(["check", "--baseline", "broken", "--results", str(results), "--sweep", "s"]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_a_typo_in_the_results_folder_is_named_not_called_empty(tmp_path, capsys):
    assert cli.main(["table", "--results", str(tmp_path / "typo")]) == 2
    assert "no such results folder" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------
# 3. a full or read-only results folder loses nothing


def test_a_results_folder_that_cannot_take_records_is_refused_before_measuring(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    assert cli.main(["run", f"results_dir={blocker}", *TINY_RUN]) == 2
    out = capsys.readouterr()
    text = " ".join((out.out + out.err).split())  # the console wraps long lines
    assert "cannot take records: Not a directory" in text and str(blocker) in text


def test_a_write_that_fails_after_measuring_keeps_the_record_elsewhere(results, tmp_path, monkeypatch, capsys):
    fallback = tmp_path / "fallback"
    monkeypatch.setenv("HARNESS_FALLBACK_DIR", str(fallback))
    real = store.write_record

    def disk_full(record, results_dir):
        if Path(results_dir) == results:
            raise OSError(28, "No space left on device")
        return real(record, results_dir)

    monkeypatch.setattr(store.write, "write_record", disk_full)  # what store_record calls
    assert cli.main(["run", f"results_dir={results}", *TINY_RUN]) == 3  # a record not in results_dir: exit 3
    out = capsys.readouterr()
    text = " ".join((out.out + out.err).split())
    saved = load_runs(fallback)
    assert list(saved["status"]) == ["ok"] and saved["samples_per_s"].iloc[0] > 0
    assert "No space left on device" in text and str(fallback) in text
    last = out.err.strip().splitlines()[-1]  # the last word of the command: what to do, exactly
    assert last.startswith("error: 1 record(s) did not reach the results folder (exit 3)")
    put_back = last.split("put them back: ")[1]
    assert put_back == f"python -m harness store import {saved_file(fallback)} --results {results}"
    monkeypatch.setattr(store.write, "write_record", real)
    assert cli.main(shlex.split(put_back)[3:]) == 0  # as printed, less `python -m harness`
    assert list(load_runs(results)["run_id"]) == list(saved["run_id"])


def saved_file(folder: Path) -> str:
    (only,) = (folder / "runs").glob("*.parquet")
    return str(only)


def test_when_no_folder_takes_the_record_it_is_printed_whole(monkeypatch, capsys):
    monkeypatch.setattr(store.write, "write_record",
                        lambda record, folder: (_ for _ in ()).throw(OSError(30, "Read-only")))
    lines = []
    assert store.store_record(_record("r-1", samples_per_s=42.5), "/x", log=lines.append) is None
    assert '"samples_per_s": 42.5' in lines[0] and "r-1" in lines[0]


# ------------------------------------------------------------------------------------------
# 4-5. ids that cannot collide; files a team can read


def test_ids_made_in_the_same_instant_never_collide():
    ids = [store.new_id("phase2-") for _ in range(20000)]
    assert len(set(ids)) == len(ids) and all(i.startswith("phase2-") for i in ids)


@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o002, 0o664)])
def test_records_get_the_mode_the_umask_allows(results, umask, mode):
    old = os.umask(umask)
    try:
        path = write_record(_record("r"), results)
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == mode


# ------------------------------------------------------------------------------------------
# 6. no stale cache: the threads, and a config_hash that means the settings (the code: test_fingerprint.py)


def test_thread_settings_are_part_of_the_environment_key(monkeypatch):
    env = {"cpu_model": "x", "cpu_count": 2, "torch_version": "2.9", "threads": env_mod.thread_settings()}
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    pinned = dict(env, threads=env_mod.thread_settings())
    assert "OMP_NUM_THREADS=1" in pinned["threads"]
    assert env_key(env, "cpu") != env_key(pinned, "cpu")


def test_config_hash_is_typed():
    assert config_mod.config_hash(config_mod.from_dict({"model": {"width": 1}})) == \
        config_mod.config_hash(config_mod.from_dict({"model": {"width": 1.0}}))


def test_settings_that_do_not_act_are_not_hashed():
    synthetic = config_mod.config_hash(config_mod.from_dict({"data": {"num_items": 16}}))
    assert config_mod.config_hash(config_mod.from_dict({"data": {"num_items": 99}})) == synthetic
    disk = config_mod.config_hash(config_mod.from_dict({"data": {"source": "disk", "num_items": 16}}))
    assert config_mod.config_hash(config_mod.from_dict({"data": {"source": "disk", "num_items": 99}})) != disk


def test_adding_a_setting_with_a_neutral_default_keeps_every_hash():
    @dataclasses.dataclass
    class Later(config_mod.RunConfig):
        new_knob: int = 0  # a setting added in a later version; 0 keeps the old behaviour

    old = config_mod.config_hash(config_mod.RunConfig(batch_size=4))
    assert config_mod.config_hash(Later(batch_size=4)) == old
    assert config_mod.config_hash(Later(batch_size=4, new_knob=1)) != old


# ------------------------------------------------------------------------------------------
# 9. bad input: one line, the bad value named, exit 2, nothing run


@pytest.mark.parametrize("args,expected", [
    (("sweep", "+ladder=precision", "batch_size=abc"),
     "batch_size='abc' is not valid: batch_size takes a whole number"),
    (("sweep", "+ladder=precision", "sweep.repeats=abc"), "sweep.repeats=abc"),
    (("sweep", "+ladder=precision", "sweep.repeats=0"), "sweep.repeats=0 must be at least 1"),
    (("run", "batch_size=abc"), "batch_size='abc' is not valid: batch_size takes a whole number"),
    (("run", "data=nope"), "data=nope is not a choice; valid choices: disk, synthetic"),
    (("report", "--out", "/no/such/dir/x.html"), "'/no/such/dir' does not exist"),
])
def test_bad_input_is_one_line_and_exit_2(results, capsys, args, expected):
    assert cli.main([*args, f"results_dir={results}"] if args[0] in ("run", "sweep") else list(args)) == 2
    out = capsys.readouterr()
    text = " ".join((out.out + out.err).split())
    assert expected in text and "Traceback" not in text
    assert not (results / "runs").exists()


def test_a_broken_ladder_file_is_named_and_the_others_still_list(tmp_path, monkeypatch, capsys):
    from harness.config import ladder as ladder_mod

    for path in ladder_mod.LADDER_DIR.glob("*.yaml"):
        (tmp_path / path.name).write_text(path.read_text())
    (tmp_path / "broken.yaml").write_text("rungs:\n  - set: {precision: [bf16\n")
    (tmp_path / "typo.yaml").write_text("rungs:\n  - set: {data.num_worker: 2}\n")
    monkeypatch.setattr(ladder_mod, "LADDER_DIR", tmp_path)
    assert cli.main(["sweep"]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'broken.yaml'} line 3" in err and "not valid YAML" in err
    assert "data.num_worker" in err and str(tmp_path / "typo.yaml") in err
    assert "phase2 " in err and "Traceback" not in err
