"""The lifetime rule of every measuring command (``harness.run.parent.lifetime``): killed by any signal, nothing it
started survives it (checked by PID), it exits 128+N, and a measurement that finished before the interrupt is stored.

``run`` and ``sweep`` are killed the same way in ``test_faults``; here: ``check --against``, ``noise``, ``climb``,
and a profiled sweep interrupted in its profile. Each run hangs at its first step (``debug.fault=hang``) with one
loader worker, so that the whole tree is up when the signal comes; nothing waits on the clock but the poll."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import config as config_mod, lifeline
from harness.run.parent import isolate
from harness.store import RunRecord, load_runs, write_record
from harness.sweeps import lock
from harness.workload import storage
from tests.conftest import REPO, TINY_MODEL_ARGS, harness_cli, tiny_model_config
from tests.test_faults import _default_signals, _gone, _measuring_processes

HANG = ("debug.fault=hang", "debug.fault_step=1", "timeout_s=300", "data.num_workers=1")
GONE_WITHIN_S = 5  # after the command has ended, every process of its tree is gone by then (the kernel's kill)


def start(args: list[str], cwd: Path, tmp: Path) -> subprocess.Popen:
    """``python -m harness ARGS`` as a user starts it, its temporary folder its own."""
    env = dict(os.environ, PYTHONPATH=str(REPO), TMPDIR=str(tmp))
    return subprocess.Popen([sys.executable, "-m", "harness", *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=_default_signals)


def kill_mid_run(args: list[str], cwd: Path, tmp: Path, sig: int,
                 forked: bool = False) -> tuple[subprocess.Popen, str]:
    """Start the command, wait for its measuring child and loader worker (``forked``: the run its warm launcher
    forked), send ``sig``; assert that no process of its tree outlives it. The command (ended) and its stderr."""
    command = start(args, cwd, tmp)
    try:
        tree = _measuring_processes(command.pid, want_workers=1, forked=forked)
        os.kill(command.pid, sig)
        _, err = command.communicate(timeout=120)
        assert _gone(tree, within_s=GONE_WITHIN_S) == [], f"left after {signal.Signals(sig).name}: {err[-2000:]}"
    finally:
        if command.poll() is None:
            os.killpg(command.pid, signal.SIGKILL)
            command.wait()
    if sig == signal.SIGKILL:
        assert command.returncode == -signal.SIGKILL
    else:
        assert command.returncode == 128 + sig, err
        assert f"interrupted ({signal.Signals(sig).name})" in err and "Traceback" not in err, err
    return command, err


def scratch_repo(tmp: Path) -> Path:
    """A git repository with a stored sweep of one config (the tiny model) in its results folder."""
    root = tmp / "repo"
    root.mkdir()
    for args in (["init", "-q"], ["config", "user.email", "t@example.com"], ["config", "user.name", "t"]):
        subprocess.run(["git", *args], cwd=root, check=True)
    (root / "README").write_text("scratch\n")
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run(["git", "commit", "-qm", "first"], cwd=root, check=True)
    cfg = tiny_model_config()
    write_record(RunRecord(run_id="sweep-0", status="ok", timestamp="2026-01-01T10:00:00+00:00", workload="custom",
                           device="cpu", config_hash="h0", sweep_id="sweep-1", ladder="tiny", rung=0,
                           change="baseline", samples_per_s=10.0, config_json=json.dumps(config_mod.record_dict(cfg)),
                           cpu_model="Test CPU", cpu_count=2), root / "results")
    return root


# ------------------------------------------------------------------------------------------
# every measuring command, killed mid-run


# SIGINT and SIGHUP take the path SIGTERM takes (harness.cli), tested on `run` in test_faults: slow tier here
@pytest.mark.parametrize("sig", [signal.SIGTERM, pytest.param(signal.SIGKILL, marks=pytest.mark.slow),
                                 pytest.param(signal.SIGINT, marks=pytest.mark.slow),
                                 pytest.param(signal.SIGHUP, marks=pytest.mark.slow)])
def test_a_check_against_killed_mid_run_leaves_no_run_behind(tmp_path, sig):
    repo = scratch_repo(tmp_path)
    kill_mid_run(["check", "--against", "HEAD", "--rounds", "2", *HANG], repo, tmp_path, sig, forked=True)
    checks = repo / "results" / "checks"
    assert not checks.is_dir() or load_runs(checks).empty  # the hanging run never finished: nothing of it is stored


@pytest.mark.parametrize("sig", [pytest.param(signal.SIGTERM, marks=pytest.mark.slow),
                                 pytest.param(signal.SIGKILL, marks=pytest.mark.slow)])
def test_noise_killed_mid_run_leaves_no_run_behind(tmp_path, sig):
    # its runs are forked from its warm launcher, as a sweep's (one launcher a command)
    kill_mid_run(["noise", "noise.runs=2", *TINY_MODEL_ARGS, *HANG, f"results_dir={tmp_path / 'results'}"],
                 REPO, tmp_path, sig, forked=True)


@pytest.mark.slow  # a whole scenario in fresh processes: the default tier keeps a sweep ended by a signal (test_faults)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_climb_killed_mid_run_leaves_no_run_behind(tmp_path, sig):
    # a climb's runs are forked from its warm launcher (one launcher a command)
    kill_mid_run(["climb", *TINY_MODEL_ARGS, *HANG, "climb.budget_min=5", f"results_dir={tmp_path / 'results'}"],
                 REPO, tmp_path, sig, forked=True)


# ------------------------------------------------------------------------------------------
# a finished measurement is stored before anything optional runs after it


def profiling_job(tmp: Path, parent: subprocess.Popen, deadline_s: float = 240) -> Path:
    """The job folder whose child wrote its measurement and is profiling now (its result marked ``profiling``)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end and parent.poll() is None:
        for result in tmp.glob("harness-job-*/result.json"):
            try:
                if json.loads(result.read_text()).get("profiling"):
                    return result.parent
            except (OSError, ValueError):
                continue  # being written
        time.sleep(0.1)
    raise AssertionError(f"no run reached its profile: {parent.communicate(timeout=60)[1][-2000:]}")


def test_a_sweep_interrupted_in_a_profile_stores_the_rungs_measurement(tmp_path):
    results = tmp_path / "results"
    sweep = start(["sweep", "+ladder=precision", *TINY_MODEL_ARGS, "measure.steps=2", "measure.warmup_steps=1",
                   "profile.enabled=true", "profile.steps=200", "debug.slowdown_ms=200", "sweep.repeats=1",
                   f"results_dir={results}"], REPO, tmp_path)
    try:
        profiling_job(tmp_path, sweep)
        sweep.send_signal(signal.SIGTERM)
        _, err = sweep.communicate(timeout=120)
    finally:
        if sweep.poll() is None:
            os.killpg(sweep.pid, signal.SIGKILL)
            sweep.wait()
    assert sweep.returncode == 128 + signal.SIGTERM, err
    stored = load_runs(results)
    assert list(stored["status"]) == ["ok"] and list(stored["rung"]) == [0]
    assert stored["samples_per_s"].iloc[0] > 0
    assert "during its profile (not taken): it is stored" in err and stored["run_id"].iloc[0] in err


# ------------------------------------------------------------------------------------------
# what killed runs and concurrent commands leave


def test_a_second_sweep_on_the_same_folder_is_refused_in_one_line_naming_the_first(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    first = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "harness", "sweep"])
    try:
        (results / lock.LOCK_FILE).write_text(f"{first.pid} {socket.gethostname()}\n")
        out = harness_cli("sweep", "+ladder=precision", *TINY_MODEL_ARGS, "measure.steps=2", f"results_dir={results}")
    finally:
        first.kill()
        first.wait()
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [
        f"error: another sweep (PID {first.pid}) is measuring into {results} now: two sweeps on one machine make "
        "each other's runs busy; wait until it ends, or give this one another folder (results_dir=DIR)"]
    assert load_runs(results).empty
    held = lock.acquire(results)  # the first one gone: its lock is stale, and taken over
    assert (results / lock.LOCK_FILE).read_text().split()[0] == str(os.getpid())
    lock.release(held)
    assert not (results / lock.LOCK_FILE).exists()


def _wait_for_exec(pid: int, word: bytes, within_s: float = 60) -> None:
    end = time.monotonic() + within_s
    while time.monotonic() < end and word not in Path(f"/proc/{pid}/cmdline").read_bytes():
        time.sleep(0.05)


def test_a_second_check_against_on_the_same_store_is_refused_in_one_line_naming_the_first(tmp_path, capsys,
                                                                                           monkeypatch):
    from harness import cli

    results = tmp_path / "results"
    results.mkdir()
    monkeypatch.chdir(tmp_path)  # not a repository: the refusal comes before anything looks for one
    first = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "harness", "check"])
    try:
        _wait_for_exec(first.pid, b"harness")  # until then /proc shows the forking test's own command line
        (results / lock.LOCK_FILE).write_text(f"{first.pid} {socket.gethostname()}\ncheck --against\n")
        code = cli.main(["check", "--against", "HEAD", "--results", str(results), "--rounds", "2"])
        with pytest.raises(ValueError, match=rf"^another check --against \(PID {first.pid}\) .*: two measuring "
                                             r"commands on one machine .* \(results_dir=DIR\)$"):
            lock.acquire(results)  # a sweep, while the check measures
    finally:
        first.kill()
        first.wait()
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: another check --against (PID {first.pid}) is measuring into {results} now: two checks on one "
        "machine make each other's runs busy; wait until it ends, or give this one another folder (--results DIR)"]
    assert sorted(p.name for p in results.iterdir()) == [lock.LOCK_FILE]  # nothing planned, nothing written
    held = lock.acquire(results, "check --against")  # the first one gone: taken over, and let go
    assert (results / lock.LOCK_FILE).read_text().splitlines() == [f"{os.getpid()} {socket.gethostname()}",
                                                                   "check --against"]
    lock.release(held)
    assert not (results / lock.LOCK_FILE).exists()


def test_storage_ceiling_folders_of_runs_that_are_gone_are_removed_at_the_next_start(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale, live = tmp_path / f"{lifeline.METRICS_PREFIX}stale", tmp_path / f"{lifeline.METRICS_PREFIX}live"
    for folder, pid in ((stale, dead.pid), (live, os.getpid())):
        folder.mkdir()
        (folder / lifeline.OWNER_FILE).write_text(str(pid))
        (folder / storage.FILE_NAME).write_text("0.0\n")
    isolate.clean_stale_jobs(str(tmp_path))
    assert not stale.exists() and live.exists()
