"""What each gate decided, kept for the history page: one JSON file per check under ``<results>/checks/verdicts``.

Both kinds of check write one: ``check --against REF`` (whose runs are in the store ``<results>/checks``) and
``check --baseline NAME`` (whose runs are the checked sweep's, in ``<results>``). A file holds the check's
JSON output plus when it ran; ``harness.analysis.views.history`` marks every config's verdict with it. A verdict
that cannot be written (a read-only results folder in CI) is a warning, never a changed exit code.

A check's verdict leaves as a :class:`Verdict` handed to its sinks (:func:`hand_out`), the verdict store first: a
tracker's export after the check (``check --export``) is one more sink, and so would be a live page or a second
store.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import time
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from harness.fileio import write_text_atomic

CHECKS = "checks"  # <results>/checks: the store of --against runs, and verdicts/ of every check


def checks_dir(results_dir: str | os.PathLike) -> Path:
    """The store of ``check --against`` runs (``runs/``, ``compacted/``) and the verdicts of every check."""
    return Path(results_dir) / CHECKS


def verdicts_dir(results_dir: str | os.PathLike) -> Path:
    return checks_dir(results_dir) / "verdicts"


def save_verdict(results_dir: str | os.PathLike, check_id: str, document: dict) -> Path:
    """Write ``document`` (a check's JSON output) as ``verdicts/<check_id>.json``, stamped with the time now."""
    stamped = {"timestamp": time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime()), **document}
    name = re.sub(r"[^A-Za-z0-9._-]", "_", check_id)
    verdicts_dir(results_dir).mkdir(parents=True, exist_ok=True)
    return write_text_atomic(verdicts_dir(results_dir) / f"{name}.json", json.dumps(stamped, indent=2))


@dataclass(frozen=True)
class Verdict:
    """What a check decided: its id and its JSON output."""

    check_id: str
    document: dict


class VerdictSink(Protocol):
    def put(self, verdict: Verdict) -> None: ...


@dataclass(frozen=True)
class VerdictStore:
    """The verdicts kept under ``results_dir`` for the history page (:func:`save_verdict`)."""

    results_dir: str | os.PathLike

    def put(self, verdict: Verdict) -> Path:
        return save_verdict(self.results_dir, verdict.check_id, verdict.document)


def hand_out(verdict: Verdict, store: VerdictStore, *more: VerdictSink) -> str:
    """``verdict`` kept in ``store``, then handed to ``more`` under the id it was kept as; a store that refuses it
    costs a warning, not the gate (the other sinks are not handed a verdict that was not kept). That id ("" when
    it was not kept)."""
    try:
        kept = dataclasses.replace(verdict, check_id=store.put(verdict).stem)
    except OSError as exc:
        print(f"warning: the verdict was not kept for the history page ({exc})", file=sys.stderr)
        return ""
    for sink in more:
        sink.put(kept)
    return kept.check_id


def load_verdicts(results_dir: str | os.PathLike) -> tuple[list[dict], list[str]]:
    """Every verdict kept under ``results_dir``, oldest first, and one warning per file that could not be read."""
    folder = verdicts_dir(results_dir)
    found, warnings = [], []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            document = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            warnings.append(f"verdict file {path} is not readable ({exc}); left out")
            continue
        if isinstance(document, dict) and isinstance(document.get("rows"), list):
            found.append(document)
    return sorted(found, key=lambda d: str(d.get("timestamp", ""))), warnings
