"""The warm launcher on a GPU machine, with faked driver libraries (compiled here with the system's C compiler): a
CUDA driver that is mapped but never initialised (MONAI's import maps it through CuPy) leaves the launcher free to
fork and to preload MONAI; an initialised one makes it refuse, saying why; NVML initialised in the launcher is shut
down before a fork."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.run.parent import launcher, runner
from harness.run.parent import env as env_mod
from tests.conftest import REPO
from tests.test_launcher import _probe_config

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or not sys.platform.startswith("linux"),
                                reason="needs gcc and Linux to build the faked driver libraries")

FAKE_CUDA = """
static int initialised = 0;
int cuInit(unsigned int flags) { initialised = 1; return 0; }
int cuDeviceGetCount(int *count) { if (!initialised) return 3; *count = 1; return 0; }
"""
FAKE_NVML = """
static int inits = 0;
int nvmlInit_v2(void) { inits++; return 0; }
int nvmlShutdown(void) { if (!inits) return 1; inits--; return 0; }
int nvmlDeviceGetCount_v2(unsigned int *count) { if (!inits) return 1; *count = 1; return 0; }
"""


def _library(folder: Path, name: str, source: str) -> Path:
    (folder / f"{name}.c").write_text(source)
    out = folder / name
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(folder / f"{name}.c")], check=True, timeout=60)
    return out


@pytest.fixture
def fake_cuda(tmp_path) -> Path:
    return _library(tmp_path, "libcuda.so.1", FAKE_CUDA)


def _python(code: str, tmp_path: Path) -> list[str]:
    env = dict(os.environ, PYTHONPATH=f"{REPO}:{tmp_path}", JE_ARROW_MALLOC_CONF="background_thread:false")
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_a_mapped_driver_never_initialised_lets_the_launcher_fork_and_preload_monai(fake_cuda, tmp_path):
    (tmp_path / "maps_driver.py").write_text(f"import ctypes\nDRIVER = ctypes.CDLL({str(fake_cuda)!r})\n")
    lines = _python("""
        import ctypes, sys
        from harness.run.parent import driver, zygote
        zygote.preload_fork_safe(["maps_driver", "monai"], probe=True)  # as on a GPU: probed in a fork first
        print(driver.cuda_state(), "monai" in sys.modules, zygote.LEFT_TO_RUNS, repr(zygote.unsafe_to_fork()))
        print("monai" in zygote.preloaded().split(","))
        sys.modules["maps_driver"].DRIVER.cuInit(0)  # a library that initialises the driver: no fork from here on
        print(zygote.unsafe_to_fork())
    """, tmp_path)
    assert lines[-3] == "mapped True [] ''" and lines[-2] == "True"
    assert lines[-1] == ("the CUDA driver is initialised in the launcher (it counts 1 devices) "
                         "(the driver loaded by importing maps_driver)")


def test_nvml_initialised_in_the_launcher_is_shut_down_before_a_fork(tmp_path):
    nvml = _library(tmp_path, "libnvidia-ml.so.1", FAKE_NVML)
    lines = _python(f"""
        import ctypes
        from harness.run.parent import driver, zygote
        lib = ctypes.CDLL({str(nvml)!r})
        lib.nvmlInit_v2(); lib.nvmlInit_v2()  # torch's NVML-based device count initialises it and never shuts it
        n = ctypes.c_uint(0)
        print(repr(zygote.unsafe_to_fork()), lib.nvmlDeviceGetCount_v2(ctypes.byref(n)), driver.shutdown_nvml())
    """, tmp_path)
    assert lines[-1] == "'' 1 0"  # shut down twice by the check (count: NVML_ERROR_UNINITIALIZED); nothing left


def _runs(results, tmp_path, monkeypatch, fake_cuda, init: bool):
    monkeypatch.setenv("FORK_PROBE_OUT", str(tmp_path / "probe.jsonl"))
    monkeypatch.setenv("FORK_PROBE_DRIVER", str(fake_cuda))
    if init:
        monkeypatch.setenv("FORK_PROBE_DRIVER_INIT", "1")
    monkeypatch.setattr(launcher, "_said", set())
    cfg = _probe_config(results)
    env, key = env_mod.environment(cfg.device)
    with launcher.warm() as session:
        records = [runner.run_and_store(cfg, env, key) for _ in range(2)]
        forks = list(session.zygote.forks) if session.zygote is not None else []
    return records, forks


@pytest.mark.slow  # whole runs; the launcher's check itself is tested above in seconds
def test_runs_fork_from_a_launcher_with_the_driver_mapped_and_say_what_it_preloaded(
        results, tmp_path, monkeypatch, fake_cuda):
    records, forks = _runs(results, tmp_path, monkeypatch, fake_cuda, init=False)
    assert [r.status for r in records] == ["ok", "ok"], records[0].error
    assert [r.launched_by for r in records] == ["fork", "fork"]
    assert all({"monai", "torch"} <= set(r.launcher_preloaded.split(",")) for r in records)
    assert [f["cuda_driver"] for f in forks] == ["mapped", "mapped"]


@pytest.mark.slow  # whole runs; the launcher's check itself is tested above in seconds
def test_runs_start_fresh_when_the_launcher_initialised_the_driver_saying_why(
        results, tmp_path, monkeypatch, fake_cuda, capsys):
    records, _ = _runs(results, tmp_path, monkeypatch, fake_cuda, init=True)
    assert [r.status for r in records] == ["ok", "ok"] and [r.launched_by for r in records] == ["exec", "exec"]
    assert [r.launcher_preloaded for r in records] == ["", ""]
    err = capsys.readouterr().err
    assert err.count("warm launcher off: the CUDA driver is initialised in the launcher (it counts 1 devices)") == 1
