"""The warm launcher on a GPU machine, with faked driver libraries (compiled here with the system's C compiler): a
CUDA driver that is mapped but never initialised (MONAI's import maps it through CuPy) leaves the launcher free to
fork and to preload MONAI; an initialised one makes it refuse, saying why; NVML initialised in the launcher is shut
down before a fork, and kept closed while the launcher imports MONAI (its first initialisation leaves a thread)."""

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

# NVML as the H200 image's driver (580) behaves: its first initialisation starts a thread named cuda..., which its
# shutdown leaves running; a device of compute capability 9.0
THREADED_NVML = """
#define _GNU_SOURCE
#include <pthread.h>
#include <unistd.h>
static int inits = 0, started = 0;
static void *idle(void *arg) { for (;;) pause(); return 0; }
int nvmlInitWithFlags(unsigned int flags) {
  if (!started) { pthread_t t; pthread_create(&t, 0, idle, 0); pthread_setname_np(t, "cuda00001c00008"); started = 1; }
  inits++; return 0;
}
int nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
int nvmlShutdown(void) { if (!inits) return 1; inits--; return 0; }
int nvmlDeviceGetCount_v2(unsigned int *count) { if (!inits) return 1; *count = 1; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void **handle) { *handle = (void *)1; return 0; }
int nvmlDeviceGetCudaComputeCapability(void *handle, int *major, int *minor) { *major = 9; *minor = 0; return 0; }
"""


def _library(folder: Path, name: str, source: str) -> Path:
    (folder / f"{name}.c").write_text(source)
    out = folder / name
    subprocess.run(["gcc", "-shared", "-fPIC", "-pthread", "-o", str(out), str(folder / f"{name}.c")], check=True,
                   timeout=60)
    return out


@pytest.fixture
def fake_cuda(tmp_path) -> Path:
    return _library(tmp_path, "libcuda.so.1", FAKE_CUDA)


def _python(code: str, tmp_path: Path, **more_env: str) -> list[str]:
    env = dict(os.environ, PYTHONPATH=f"{REPO}:{tmp_path}", JE_ARROW_MALLOC_CONF="background_thread:false",
               **more_env)
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_a_mapped_driver_and_nvml_kept_closed_let_the_launcher_fork_and_preload_monai(fake_cuda, tmp_path):
    (tmp_path / "maps_driver.py").write_text(f"import ctypes\nDRIVER = ctypes.CDLL({str(fake_cuda)!r})\n")
    (tmp_path / "nvml").mkdir()  # apart from the faked CUDA driver, which torch's import would map from there
    _library(tmp_path / "nvml", "libnvidia-ml.so.1", THREADED_NVML)  # found by pynvml through LD_LIBRARY_PATH
    lines = _python("""
        import sys
        import pynvml, torch
        from harness.run.parent import driver, zygote
        torch.version.cuda = "13.0"  # a CUDA build of torch: MONAI's TF32 check asks NVML only there
        zygote.preload_fork_safe(["maps_driver", "monai"], probe=True)  # as on a GPU: probed in a fork first
        tf32 = sys.modules["monai.utils.tf32"]
        print(driver.cuda_state(), "monai" in sys.modules, zygote.LEFT_TO_RUNS, repr(zygote.unsafe_to_fork()))
        print("monai" in zygote.preloaded().split(","))
        print(zygote.NVML_CLOSED_FOR, tf32.has_ampere_or_later.cache_info().currsize, pynvml.nvmlInit.__name__)
        sys.modules["maps_driver"].DRIVER.cuInit(0)  # a library that initialises the driver: no fork from here on
        print(zygote.unsafe_to_fork())
        print(tf32.has_ampere_or_later())  # a run that asks NVML itself: opened, answered (9.0), its thread left
        print(zygote.unsafe_to_fork())
    """, tmp_path, LD_LIBRARY_PATH=str(tmp_path / "nvml"))
    said, (state, preloaded, closed, initialised, ampere, thread) = lines[:-6], lines[-6:]
    assert state == "mapped True [] ''" and preloaded == "True"
    # NVML kept closed while MONAI was imported (the launcher says so): its TF32 check cached nothing, pynvml is
    # itself again
    assert closed == "['monai.utils.tf32'] 0 nvmlInit"
    assert "NVML kept closed while monai.utils.tf32 was imported here (a run that asks NVML opens it)" in said
    assert initialised == ("the CUDA driver is initialised in the launcher (it counts 1 devices) "
                           "(the driver loaded by importing maps_driver)")
    assert ampere == "True" and thread.startswith("2 threads in the launcher: cuda00001c00008(")
    assert thread.endswith("(a thread of the CUDA driver's: an import initialised NVML or CUDA here)")


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
