"""The GPU driver libraries as the warm launcher sees them before a fork: whether the CUDA driver mapped in it has
been initialised, and NVML shut down if something initialised it there.

A process that has the CUDA driver library mapped (MONAI's import maps it through CuPy, transformers, scikit-image
...) but never called ``cuInit`` forks as safely as one without it: that is what every DataLoader does. Only an
initialised driver makes a fork unusable for CUDA. The mapped library is asked for a device count
(``cuDeviceGetCount``), which initialises nothing: ``CUDA_ERROR_NOT_INITIALIZED`` means mapped, never initialised.

NVML (``nvmlInit``, which torch's NVML-based device count calls and never undoes) is shut down before a fork, so
that a run starts as a fresh process would: with NVML not initialised. Its first initialisation also starts a thread of
the driver's that its shutdown leaves running (``cuda00001c00008``, on an H200 with driver 580), and a launcher with a
second thread must not fork: while the launcher imports on a GPU, pynvml is kept from initialising it
(``nvml_closed``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from collections.abc import Iterator
from pathlib import Path

CUDA_SUCCESS = 0
CUDA_ERROR_NOT_INITIALIZED = 3
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
MAX_NVML_SHUTDOWNS = 64  # nvmlInit counts its calls; each nvmlShutdown undoes one
NVML_ENTRY_POINTS = ("nvmlInit", "nvmlInitWithFlags", "nvmlShutdown")  # pynvml's, as a caller reaches them


def mapped(word: str, prefix: str) -> list[str]:
    """Paths of the shared libraries mapped in this process whose file name starts with ``prefix`` (``word``: a
    cheap filter on the line of ``/proc/self/maps``)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if word in line and ".so" in line}
    except OSError:
        return []
    return sorted(p for p in paths if Path(p).name.startswith(prefix))


def _already_loaded(path: str) -> ctypes.CDLL | None:
    """The library at ``path`` if it is loaded here (``RTLD_NOLOAD``: never loads it), else None."""
    try:
        return ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return None


def cuda_state() -> str:
    """"" when no CUDA driver is mapped here, "mapped" when one is and was never initialised, else why a fork from
    here cannot use CUDA (an initialised driver, or one that cannot be asked)."""
    paths = mapped("libcuda", "libcuda.so")
    if not paths:
        return ""
    for path in paths:
        lib = _already_loaded(path)
        count = getattr(lib, "cuDeviceGetCount", None) if lib is not None else None
        if count is None:
            return f"the CUDA driver {path} is loaded in the launcher and cannot be asked whether it is initialised"
        n = ctypes.c_int(0)
        code = count(ctypes.byref(n))
        if code == CUDA_SUCCESS:
            return f"the CUDA driver is initialised in the launcher (it counts {n.value} devices)"
        if code != CUDA_ERROR_NOT_INITIALIZED:
            return f"the CUDA driver in the launcher was initialised and failed (cuDeviceGetCount returned {code})"
    return "mapped"


def shutdown_nvml() -> int:
    """Shut NVML down here if it is initialised (as often as it was initialised); returns how many shutdowns."""
    done = 0
    for path in mapped("nvidia-ml", "libnvidia-ml.so"):
        lib = _already_loaded(path)
        if lib is None or not hasattr(lib, "nvmlShutdown") or not hasattr(lib, "nvmlDeviceGetCount_v2"):
            continue
        n = ctypes.c_uint(0)
        while done < MAX_NVML_SHUTDOWNS and lib.nvmlDeviceGetCount_v2(ctypes.byref(n)) == NVML_SUCCESS:
            if lib.nvmlShutdown() != NVML_SUCCESS:
                break
            done += 1
    return done


@contextlib.contextmanager
def nvml_closed() -> Iterator[list[str]]:
    """While the launcher imports on a GPU: pynvml's initialisation fails, as on a machine without NVML; yields the
    list of the modules that tried (filled as they do). MONAI's import asks NVML whether a card is Ampere or later,
    to warn about TF32 (``monai.utils.tf32``): NVML's thread then stayed, and every GPU run imported MONAI itself.
    That check caches nothing of a failure (a run that asks again asks NVML); its warning about
    ``NVIDIA_TF32_OVERRIDE`` at import is not given to a run forked from the launcher. pynvml is itself once more."""
    try:
        import pynvml
    except ImportError:
        yield []
        return
    tried: list[str] = []

    def refuse(*_args, **_kwargs):
        caller = sys._getframe(1).f_globals.get("__name__", "?")
        if caller not in tried:
            tried.append(caller)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)

    saved = {name: getattr(pynvml, name) for name in NVML_ENTRY_POINTS if hasattr(pynvml, name)}
    for name in saved:
        setattr(pynvml, name, refuse)
    try:
        yield tried
    finally:
        for name, entry in saved.items():
            setattr(pynvml, name, entry)
