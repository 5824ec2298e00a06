"""What the parent needs to know of torch, without importing it where the answer does not need it (importing torch
costs seconds, and a sweep whose every rung comes from the store measures nothing).

* Whether CUDA is available: a torch built without CUDA, or a machine without the CUDA driver, cannot have it, and
  both are read without torch (torch's ``version.py``, and whether ``libcuda.so.1`` loads). Otherwise torch says.
* The versions a record keeps (torch, CUDA, cuDNN): the first two are in ``version.py``; cuDNN's is what torch
  loads, so it is asked of torch once and kept in a small file keyed by the installation (torch's files, the
  cuDNN libraries beside it, the library path, the system's library cache): a change to any of them asks again.
"""

from __future__ import annotations

import ast
import ctypes
import hashlib
import importlib.util
import json
import os
import sys
from pathlib import Path

from harness.fileio import cache_dir


def build() -> dict | None:
    """torch's ``version.py`` (``__version__``, ``cuda``, ``hip``, ...) read without importing torch; None when it
    cannot be read (then torch is imported by whoever asks)."""
    try:
        spec = importlib.util.find_spec("torch")
        path = Path(list(spec.submodule_search_locations)[0]) / "version.py"
        tree = ast.parse(path.read_text())
    except (ImportError, AttributeError, IndexError, TypeError, OSError, SyntaxError, ValueError):
        return None
    values = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and getattr(node, "value", None) is not None:
            try:
                values[target.id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    values["path"] = str(path.parent)
    return values if "__version__" in values else None


def cuda_available() -> bool:
    """``torch.cuda.is_available()``, without torch where it must be False (no CUDA build, or no CUDA driver)."""
    facts = build()
    if facts is not None and not facts.get("hip"):
        if not facts.get("cuda") or not _driver_loads():
            return False
    import torch

    return torch.cuda.is_available()


def _driver_loads() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def versions() -> dict[str, str]:
    """The record's ``torch_version``, ``cuda_version`` and ``cudnn_version``, as torch reports them."""
    facts = build()
    # asked again in this process: the answer kept for the same version.py (a reinstalled torch rewrites it) and
    # library path, without the installation's globs (a cached sweep asks once a rung, ~0.4 ms each)
    key = (json.dumps(facts, sort_keys=True, default=str), _version_file_identity(facts),
           os.environ.get("LD_LIBRARY_PATH", ""))
    if facts is not None and _ASKED.get("key") == key:
        return dict(_ASKED["found"])
    found = _versions(facts)
    if facts is not None:
        _ASKED.update(key=key, found=dict(found))
    return found


_ASKED: dict = {}  # the versions last found in this process, and what they were found for


def _version_file_identity(facts: dict | None) -> tuple | None:
    try:
        st = (Path(facts["path"]) / "version.py").stat()
    except (OSError, KeyError, TypeError):
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _versions(facts: dict | None) -> dict[str, str]:
    path = _cache_file(facts) if facts is not None else None
    if path is not None:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            pass
    import torch

    found = {"torch_version": str(torch.__version__), "cuda_version": torch.version.cuda or "",
             "cudnn_version": str(torch.backends.cudnn.version() or "") if torch.backends.cudnn.is_available() else ""}
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(found))
            os.replace(tmp, path)
        except OSError:  # a read-only home: torch is asked each time
            pass
    return found


def _cache_file(facts: dict) -> Path | None:
    """The file that keeps the versions of this installation (named by what decides them)."""
    torch_dir = Path(facts["path"])
    watched = [torch_dir / "version.py", *sorted((torch_dir / "lib").glob("libtorch*.so*")),
               *sorted(torch_dir.parent.glob("nvidia/cudnn/lib/libcudnn*.so*")), Path("/etc/ld.so.cache")]
    digest = hashlib.sha256(json.dumps([sys.executable, os.environ.get("LD_LIBRARY_PATH", ""),
                                        json.dumps(facts, sort_keys=True, default=str)]).encode())
    for path in watched:
        try:
            st = path.stat()
        except OSError:
            continue
        digest.update(f"{path}:{st.st_size}:{st.st_mtime_ns}\0".encode())
    try:
        root = cache_dir()
    except RuntimeError:  # no home folder
        return None
    return root / f"torch-{digest.hexdigest()[:16]}.json"
