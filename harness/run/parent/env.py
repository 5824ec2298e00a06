"""The environment a run was measured in: hardware, software versions, code version.

``env_key`` hashes what makes two measurements comparable: the hardware, the software stack, the
code that measures (``fingerprint.code_fingerprint``: the code the child runs, so an edit to the measured
loop re-measures instead of serving old numbers; the parent's and the analysis code are left out, they change no
measurement), and the CPU threads a run may use (thread-count variables and CPU affinity). A cached
result is reused only under the same key. The fields are gathered here; the key itself is computed in
``harness.config.identity``, beside ``config_hash``, the other half of what a cached result must match.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
import subprocess
import sys

import harness
from harness.run.monitor.fitness import cpu_bf16, cpu_model
from harness.run.parent.fingerprint import code_fingerprint, git_state
from harness.run.parent import torch_facts
from harness.config.identity import env_key

THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TORCH_NUM_THREADS")


def thread_settings() -> str:
    """What decides how many CPU threads a run uses: the variables set, and the CPUs it may run on."""
    parts = [f"{k}={os.environ[k]}" for k in THREAD_VARS if k in os.environ]
    try:
        cpus = sorted(os.sched_getaffinity(0))
        parts.append(f"affinity={_ranges(cpus)}")
    except AttributeError:  # not on Linux
        pass
    return " ".join(parts)


def _ranges(cpus: list[int]) -> str:
    out, start = [], None
    for i, c in enumerate(cpus):
        if start is None:
            start = c
        if i + 1 == len(cpus) or cpus[i + 1] != c + 1:
            out.append(str(start) if start == c else f"{start}-{c}")
            start = None
    return ",".join(out)


def _version(package: str) -> str:
    """The installed version of ``package`` ("" when it is not installed). Each lookup scans every folder on the
    import path, and a sweep asks for the environment at every rung: the answers are kept until a folder on the
    path changes (installing or removing a package changes its folder's listing, and with it the folder's mtime)."""
    state = _path_state()
    if _VERSIONS["state"] != state:
        _VERSIONS.update(state=state, found={})
    found = _VERSIONS["found"]
    if package not in found:
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = ""
    return found[package]


_VERSIONS: dict = {"state": None, "found": {}}  # the import path's state the versions were read in; the versions


def _path_state() -> tuple:
    """The import path's folders and when each last changed."""
    state = []
    for entry in sys.path:
        try:
            state.append((entry, os.stat(entry or ".").st_mtime_ns))
        except OSError:
            state.append((entry, None))
    return tuple(state)


def topology(device: str, gpu_count: int) -> str:
    """How the ranks of a run would talk, where it can differ between two machines of the same model: the
    interconnect between the GPUs (``nvidia-smi topo -m``'s link kinds), NCCL's version, and every ``NCCL_*`` /
    ``GLOO_SOCKET_IFNAME`` setting. "" where there is nothing to say (one GPU or a CPU, no such setting), so that
    the key of such an environment is as it was before topology was part of it."""
    parts = [f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("NCCL_") or k == "GLOO_SOCKET_IFNAME"]
    if device == "cuda" and gpu_count >= 2:
        import torch

        links = _gpu_links()
        nccl = ".".join(map(str, torch.cuda.nccl.version())) if hasattr(torch.cuda, "nccl") else ""
        parts = [f"links {links}" if links else "links unknown", f"nccl {nccl}"] + parts
    return "; ".join(parts)


def _gpu_links() -> str:
    """The kinds of link between GPU pairs in ``nvidia-smi topo -m`` (``NV18``, ``PIX``, ``SYS``...), sorted."""
    try:
        out = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return ",".join(gpu_link_kinds(out))


def gpu_link_kinds(matrix: str) -> list[str]:
    """The link kinds between distinct GPUs in ``nvidia-smi topo -m``'s matrix (its GPU rows, GPU columns)."""
    rows = [line.split() for line in matrix.splitlines() if line.startswith("GPU")]
    kinds = {cell for row in rows for i, cell in enumerate(row[1:len(rows) + 1]) if cell != "X"}
    return sorted(kinds)


def collect(device: str, git: bool = True) -> dict:
    """Environment fields of a RunRecord for runs on ``device`` ("cpu" or "cuda"). torch is imported for a GPU's
    own fields only (``torch_facts``: a sweep served from the store needs no torch). ``git=False`` leaves out the
    commit and whether the tree is dirty (two git processes), which ``env_key`` does not hash: a cache lookup
    needs only the key."""
    env = {
        **torch_facts.versions(),
        "monai_version": _version("monai"),
        "torchvision_version": _version("torchvision"),
        "python_version": platform.python_version(),
        "harness_version": _version(harness.DISTRIBUTION),
        "gpu_name": "",
        "gpu_count": 0,
        "gpu_driver": "",
        "gpu_mem_total_bytes": None,
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_bf16": cpu_bf16(),
        "hostname": socket.gethostname(),
        "code_fingerprint": code_fingerprint(),
        "threads": thread_settings(),
    }
    if device == "cuda":
        import torch

        env["gpu_count"] = torch.cuda.device_count()
        env["gpu_name"] = torch.cuda.get_device_name(0)
        env["gpu_mem_total_bytes"] = float(torch.cuda.get_device_properties(0).total_memory)
        try:
            import pynvml

            pynvml.nvmlInit()
            env["gpu_driver"] = str(pynvml.nvmlSystemGetDriverVersion())
        except Exception:
            env["gpu_driver"] = ""
    env["topology"] = topology(device, env["gpu_count"])
    if git:
        env["git_commit"], env["git_dirty"] = git_state()
    return env


def environment(device: str, git: bool = True) -> tuple[dict, str]:
    """The environment fields a record of a run on ``device`` carries, and its ``env_key``. ``git=False``: without
    the git state (two git processes), which the key does not hash; ``fingerprint.with_git`` adds it."""
    env = collect(device, git=git)
    return env, env_key(env, device)


def environment_key(device: str) -> str:
    """The ``env_key`` of runs on ``device`` alone, as :func:`environment` gives it, without the git state it does
    not hash (two git processes): what a cache lookup matches on."""
    return env_key(collect(device, git=False), device)
