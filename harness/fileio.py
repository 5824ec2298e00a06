"""Small files written whole or not at all: progress markers, results, manifests, ladders.

``write_text_atomic`` writes a dot-prefixed temp file of its own (``mkstemp``: two writers of the same file,
two campaign jobs preparing one dataset say, never share a temp name), optionally fsyncs it, and renames it
over the target, so a reader sees the old text or the new one, never a half. A failure removes the temp file
and raises. The parquet store has its own durable writer (``harness.store``): this is for text.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

CACHE_ENV = "HARNESS_CACHE_DIR"  # the harness's cache folder, kept between commands (FLOP counts, torch's facts, ...)


def cache_dir() -> Path:
    """The harness's cache folder: ``HARNESS_CACHE_DIR``, else ``$XDG_CACHE_HOME/harness``, else
    ``~/.cache/harness``. Raises RuntimeError where there is no home folder."""
    root = os.environ.get(CACHE_ENV)
    return Path(root) if root else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "harness"


def write_text_atomic(path: str | os.PathLike, text: str, durable: bool = False) -> Path:
    """Replace ``path``'s content with ``text`` atomically; ``durable``: fsync the file and its folder too, so a
    machine that crashes after the call returns still has it."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~umask())  # mkstemp makes 0600; the file gets the mode the umask allows, as open() does
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if durable:
        fsync_dir(path.parent)
    return path


def read_kept(name: str, code: str) -> dict:
    """What an earlier process kept in the cache folder's file ``name`` under ``code`` (a digest of the code and the
    versions that computed it): {} when there is none, it cannot be read, or other code kept it. A reader checks
    each entry's form before it uses it."""
    try:
        kept = json.loads((cache_dir() / name).read_text())
    except (OSError, ValueError, RuntimeError):  # RuntimeError: no home folder
        return {}
    entries = kept.get("entries") if isinstance(kept, dict) and kept.get("code") == code else None
    return entries if isinstance(entries, dict) else {}


def keep(name: str, code: str, entries: dict, most: int) -> dict:
    """The newest ``most`` of ``entries``, written to the cache folder's file ``name`` under ``code`` (a cache only:
    a write that fails is left to the next process) and returned."""
    entries = dict(list(entries.items())[-most:])
    try:
        cache_dir().mkdir(parents=True, exist_ok=True)
        write_text_atomic(cache_dir() / name, json.dumps({"code": code, "entries": entries}))
    except (OSError, RuntimeError):
        pass
    return entries


def umask() -> int:
    """The process's umask (read by setting and restoring it)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (POSIX); a no-op where folders cannot be opened."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # not every system opens folders
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def tail(path: str | os.PathLike, chars: int) -> str:
    """The last ``chars`` characters of a text file (a log), "" where it cannot be read."""
    try:
        return Path(path).read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def last_line(path: str | os.PathLike, chars: int = 600) -> str:
    """The last non-empty line among a log's last ``chars`` characters ("" where there is none)."""
    lines = tail(path, chars).strip().splitlines()
    return lines[-1] if lines else ""
