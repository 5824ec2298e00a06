"""The warm launcher's probe verdicts, remembered per environment: which of a list of imports is the first that
leaves a process unsafe to fork ("" when none is) and why, so that the next command in the same environment does not
probe again (a probe imports everything once more, in a fork, before the launcher imports it).

A verdict is kept under a key of the interpreter (its path and version), torch's version, the harness's code
fingerprint and the names probed, in ``$XDG_CACHE_HOME/harness/launcher-probes.json`` (else ``~/.cache``). A
launcher that finds itself unsafe to fork after all (a library changed under the same versions) forgets them.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from importlib import metadata
from pathlib import Path

from harness.fileio import write_text_atomic
from harness.run.parent.fingerprint import code_fingerprint

KEPT = 64  # the most verdicts the file keeps (the newest)


def kept_file() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "harness" / "launcher-probes.json"


def key(names: list[str]) -> str:
    """The environment and the names probed, as one digest."""
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = ""
    try:
        code = code_fingerprint()
    except OSError:
        code = ""
    blob = json.dumps([sys.executable, sys.version, torch_version, code, list(names)])
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def recall(names: list[str]) -> tuple[str, str] | None:
    """The culprit remembered for ``names`` here ("" for none) and why it left the probe unsafe to fork, or None
    when no verdict is kept."""
    found = _read().get(key(names))
    if isinstance(found, list) and len(found) == 2 and all(isinstance(x, str) for x in found):
        return found[0], found[1]
    return (found, "") if isinstance(found, str) else None


def remember(names: list[str], culprit: str, why: str = "") -> None:
    kept = {k: v for k, v in _read().items() if isinstance(v, (str, list))}
    kept.pop(key(names), None)
    kept = dict(list(kept.items())[-(KEPT - 1):] + [(key(names), [culprit, why])])
    _write(kept)


def forget() -> None:
    """Every verdict dropped: the next launcher probes again."""
    if kept_file().exists():
        _write({})


def _read() -> dict:
    try:
        kept = json.loads(kept_file().read_text())
    except (OSError, ValueError):
        return {}
    return kept if isinstance(kept, dict) else {}


def _write(kept: dict) -> None:
    try:
        kept_file().parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(kept_file(), json.dumps(kept))
    except OSError:
        pass  # a cache only: the next launcher probes
