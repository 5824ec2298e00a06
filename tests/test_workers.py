"""How many pytest-xdist workers each tier gets (tests/conftest.py): the default tier one per CPU, at most 4; the slow
and GPU tiers none (one process). And a test run stopped by SIGTERM leaves nothing its tests started running."""

import contextlib
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import psutil
import pytest

from tests import conftest


@pytest.mark.parametrize("markexpr, one_process", [
    ("not slow and not gpu", False), ("", False), ("slow", True), ("gpu", True), ("gpu and not slow", True),
    ("slow and not gpu", True), ("not gpu", False)])
def test_the_slow_and_gpu_tiers_run_in_one_process_and_the_default_tier_on_every_cpu(monkeypatch, markexpr,
                                                                                      one_process):
    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    config = SimpleNamespace(option=SimpleNamespace(markexpr=markexpr))
    assert conftest.pytest_xdist_auto_num_workers(config) == (0 if one_process else conftest.MAX_WORKERS)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert conftest.pytest_xdist_auto_num_workers(config) == (0 if one_process else 2)
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "3")
    assert conftest.pytest_xdist_auto_num_workers(config) is None  # pytest-xdist reads it itself


INNER_TEST = '''
import subprocess, sys
from pathlib import Path

def test_a_child_that_outlives_no_one():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    Path("{pid_file}").write_text(str(child.pid))
    child.wait()
'''


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_test_run_stopped_by_sigterm_stops_the_processes_its_tests_started(tmp_path, workers):
    """pytest (its xdist workers too) sent SIGTERM, as a CI's time limit sends it: the process a test started is gone
    with it, not left running."""
    pid_file = tmp_path / "child.pid"
    (tmp_path / "test_inner.py").write_text(INNER_TEST.format(pid_file=pid_file))
    env = dict(os.environ, PYTHONPATH=str(conftest.REPO))
    run = subprocess.Popen([sys.executable, "-m", "pytest", "-c", os.devnull, "--rootdir", str(tmp_path), "-q",
                            "-p", "tests.conftest", "-p", "no:cacheprovider", "-n", workers, str(tmp_path)],
                           cwd=conftest.REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while not pid_file.exists() or not pid_file.read_text():
            assert run.poll() is None and time.monotonic() < deadline, run.stdout.read() if run.poll() else "no child"
            time.sleep(0.1)
        child = psutil.Process(int(pid_file.read_text()))
        run.send_signal(signal.SIGTERM)
        out, _ = run.communicate(timeout=120)
        with contextlib.suppress(psutil.TimeoutExpired):
            child.wait(timeout=60)
        assert not child.is_running(), f"left running after pytest stopped:\n{out}"
        assert run.returncode != 0 and "KeyboardInterrupt" in out, out
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        with contextlib.suppress(NameError, psutil.Error):
            child.kill()
