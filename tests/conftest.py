"""Shared helpers: tiny resolved configs for in-process knob tests, a results folder, and measured stores that several
tests read (session-scoped: measured once per test run, copied by a test that adds to them)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness import config as config_mod

REPO = Path(__file__).resolve().parent.parent
TINY = {"measure.steps": 3, "measure.warmup_steps": 1}
# A model so small (a 1x1 Conv1d over 8 values, AdamW) that a measured run costs its process's start and little else:
# for tests of what the harness does around a run (records, cache, faults, processes, tables), not of a model.
TINY_MODEL = {"workload": "custom", "workload.model._target_": "torch.nn.Conv1d", "workload.model.in_channels": 1,
              "workload.model.out_channels": 2, "workload.model.kernel_size": 1, "workload.input_shape": [1, 8],
              "workload.target": "segmentation"}
# The same on the command line: Hydra wants a + before a constructor argument the workload's file does not name.
TINY_MODEL_ARGS = ("workload=custom", "workload.model._target_=torch.nn.Conv1d", "+workload.model.in_channels=1",
                   "+workload.model.out_channels=2", "+workload.model.kernel_size=1", "workload.input_shape=[1,8]",
                   "workload.target=segmentation")
TINY_STEPS_ARGS = ("measure.steps=2", "measure.warmup_steps=1")
# a sweep's one round and one record a rung however busy the machine (the default, sweep.repeats=auto, measures
# until decided, and a busy run is measured again): record counts that do not hang on the machine's load
ONE_ROUND = ("sweep.repeats=1", "sweep.remeasure_busy=false")


def pytest_configure(config) -> None:
    """A test run stopped by SIGTERM (a CI's time limit, ``kill``) stops as one stopped with Ctrl-C, and passes the
    signal on to its own children first: xdist's workers (each stopping the same way), the harness commands a test
    started (each ending its launcher and runs as a user's ``kill`` would). Nothing a test started outlives it."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _stop_children_then_interrupt)
    if not hasattr(config, "workerinput"):  # once, in the process that starts xdist's workers
        _bytecode()


def _bytecode() -> None:
    """The harness's modules compiled to bytecode once, before any test starts a ``python -m harness``: where
    ``PYTHONDONTWRITEBYTECODE`` is set (some containers set it) no interpreter writes it, and each of the hundreds of
    commands the tests start (their launchers and runs too) would compile some 200 modules from source again. An
    interpreter reads bytecode it did not write; a usual start writes it at the first import anyway."""
    import compileall

    for package in ("harness", "harness_models", "examples"):
        if (REPO / package).is_dir():
            compileall.compile_dir(REPO / package, quiet=1)


def _stop_children_then_interrupt(signum, frame) -> None:
    import psutil

    for child in psutil.Process().children():
        with contextlib.suppress(psutil.Error):
            child.send_signal(signal.SIGTERM)
    raise KeyboardInterrupt


def tiny_config(**overrides) -> config_mod.RunConfig:
    """A resolved CPU config at the smoke size, with a few steps; keys use __ for dots."""
    cfg = config_mod.RunConfig()
    for key, value in {**TINY, **{k.replace("__", "."): v for k, v in overrides.items()}}.items():
        config_mod.set_key(cfg, key, value)
    return config_mod.resolve(cfg, cuda_available=False)


def tiny_model_config(**overrides) -> config_mod.RunConfig:
    """``tiny_config`` of the tiny model (``TINY_MODEL``); ``overrides`` on top."""
    return tiny_config(**{k.replace(".", "__"): v for k, v in TINY_MODEL.items()}, **overrides)


def harness_cli(*args: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run ``python -m harness ARGS`` as a user would, capturing its output."""
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd or REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


def in_process(capfd, *args: str) -> subprocess.CompletedProcess:
    """``python -m harness ARGS`` in this process (the command line's own: cli.main), with all that it and its
    children wrote on stdout and stderr (``capfd``), as ``harness_cli`` returns it: for refusals, which start no run
    (a fresh interpreter costs a second or more a command)."""
    from harness import cli

    code = cli.main(list(args))
    out, err = capfd.readouterr()
    return subprocess.CompletedProcess(list(args), code, out, err)


# pyproject.toml runs the tests on pytest-xdist's workers (-n auto): one per CPU this process may use, at most
# MAX_WORKERS (each worker holds torch and starts measured runs of its own). The default tier's tests do not depend on
# the machine's load (checked beside a busy loop), so a neighbouring worker is just another busy neighbour. A tier
# that selects the slow or the GPU tests runs in one process: the GPU tests share the one device and some time it,
# and some slow tests assert a verdict, which the harness rightly refuses on a machine another worker keeps busy.
MAX_WORKERS = 4


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: where xdist is missing, conftest still loads
def pytest_xdist_auto_num_workers(config):
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # pytest-xdist's own reading of it
    if re.search(r"(?<!not )\b(gpu|slow)\b", config.option.markexpr or ""):
        return 0
    return max(1, min(MAX_WORKERS, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else
                      os.cpu_count() or 1))


# The slow and GPU tiers run for minutes a test (full sweeps, torch.compile): the per-test timeout of pyproject.toml is
# the default tier's. A test's own timeout marker wins.
LONG_TIMEOUT_S = 3600


def pytest_collection_modifyitems(config, items):
    if not config.pluginmanager.hasplugin("timeout"):  # pytest-timeout is in the `test` extra; without it, no limit
        return
    for item in items:
        long = item.get_closest_marker("slow") or item.get_closest_marker("gpu")
        if long and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(LONG_TIMEOUT_S))


@pytest.fixture
def short_tmp():
    """A private temporary folder with a short path, so that a job folder inside it leaves room for a socket's path
    (pytest's own temporary folders under xdist are too deep for one: a run's scratch then stays where it was)."""
    folder = Path(tempfile.mkdtemp(prefix="harness-test-", dir="/tmp" if os.path.isdir("/tmp") else None))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def _own_cache_folder(tmp_path_factory):
    """The harness remembers code fingerprints under $XDG_CACHE_HOME: the tests' temporary trees go to a folder of
    the test run's own, never the user's cache."""
    saved = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg-cache"))
    yield
    if saved is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = saved


@pytest.fixture
def results(tmp_path) -> Path:
    return tmp_path / "results"


def copy_store(source: Path, to: Path) -> Path:
    """A copy of a shared store that a test may add to (the shared one stays as measured)."""
    shutil.copytree(source, to)
    return to


@dataclass(frozen=True)
class Measured:
    """A store measured once for the session, what its command printed, and the command's arguments (results_dir
    apart): a test that adds to the store runs them again on a copy."""

    results: Path
    stdout: str
    args: tuple[str, ...]


def _measure_once(tmp_path_factory, name: str, *args: str) -> Measured:
    folder = shared_folder(tmp_path_factory, name)

    def measure() -> str:
        out = harness_cli(*args, f"results_dir={folder / 'results'}")
        assert out.returncode == 0, out.stdout + out.stderr
        return out.stdout

    return Measured(folder / "results", once_per_run(tmp_path_factory, name, measure), args)


def shared_folder(tmp_path_factory, name: str) -> Path:
    """A folder of this name that every xdist worker of the test run sees (under the run's temporary root)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's root, above each worker's own
    folder = root / f"shared-{name}"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def once_per_run(tmp_path_factory, name: str, produce):
    """``produce()`` (a JSON value) once for the whole test run, whichever xdist worker asks first; the others wait
    for it and read it back. A fixture of session or module scope is made once per worker that runs a test needing
    it: two workers making the same one at once on a 2-core machine took twice as long each."""
    from filelock import FileLock

    answer = shared_folder(tmp_path_factory, name) / "answer.json"
    with FileLock(f"{answer}.lock"):
        if not answer.exists():
            answer.write_text(json.dumps(produce()))
    return json.loads(answer.read_text())


@pytest.fixture(scope="session")
def measured_sweep(tmp_path_factory) -> Measured:
    """ONE tiny measured sweep: ladder phase2 (4 rungs: baseline, bf16, batch 8, 4 loader workers) on the tiny model,
    2 steps a rung. Tests read it; a test that adds to it works on ``copy_store(measured_sweep.results, ...)``."""
    return _measure_once(tmp_path_factory, "measured-sweep", "sweep", "+ladder=phase2", *TINY_MODEL_ARGS,
                         *TINY_STEPS_ARGS, *ONE_ROUND)


@pytest.fixture(scope="session")
def measured_run(tmp_path_factory) -> Measured:
    """ONE measured `run` of the default workload (the README's first command, the 3D UNet at the CPU size, 3 steps):
    its record and what it printed, read by the tests of a run's summary and of its record."""
    return _measure_once(tmp_path_factory, "measured-run", "run", "workload=unet3d", "measure.steps=3",
                         "measure.warmup_steps=1")


def user_module(tmp_path: Path, monkeypatch, name: str, source: str):
    """A module of a user's, ``name`` with ``source``, importable for one test (gone from sys.modules after it);
    yields the module."""
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    yield importlib.import_module(name)
    sys.modules.pop(name, None)
