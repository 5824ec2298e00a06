"""The environment a run was measured in: hardware, software versions, code version.

``env_key`` hashes what makes two measurements comparable (hardware and the software stack); a
cached result is reused only under the same key.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import socket
import subprocess
from pathlib import Path

HARDWARE_FIELDS = ("device", "gpu_name", "gpu_count", "cpu_model", "cpu_count")
SOFTWARE_FIELDS = ("torch_version", "cuda_version", "cudnn_version", "monai_version", "torchvision_version", "python_version", "harness_version")


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return ""


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_state(repo: Path | None = None) -> tuple[str, bool | None]:
    repo = repo or Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, timeout=5)
        if commit.returncode != 0:
            return "", None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo, capture_output=True, text=True, timeout=5)
        return commit.stdout.strip(), bool(dirty.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return "", None


def collect(device: str) -> dict:
    """Environment fields of a RunRecord for runs on ``device`` ("cpu" or "cuda")."""
    import torch

    env = {
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda or "",
        "cudnn_version": str(torch.backends.cudnn.version() or "") if torch.backends.cudnn.is_available() else "",
        "monai_version": _version("monai"),
        "torchvision_version": _version("torchvision"),
        "python_version": platform.python_version(),
        "harness_version": _version("harness"),
        "gpu_name": "",
        "gpu_count": 0,
        "gpu_driver": "",
        "gpu_mem_total_bytes": None,
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "hostname": socket.gethostname(),
    }
    if device == "cuda":
        env["gpu_count"] = torch.cuda.device_count()
        env["gpu_name"] = torch.cuda.get_device_name(0)
        env["gpu_mem_total_bytes"] = float(torch.cuda.get_device_properties(0).total_memory)
        try:
            import pynvml

            pynvml.nvmlInit()
            env["gpu_driver"] = str(pynvml.nvmlSystemGetDriverVersion())
        except Exception:
            env["gpu_driver"] = ""
    env["git_commit"], env["git_dirty"] = git_state()
    return env


def env_key(env: dict, device: str) -> str:
    fields = {"device": device, **{k: env.get(k) for k in HARDWARE_FIELDS + SOFTWARE_FIELDS if k != "device"}}
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:16]
