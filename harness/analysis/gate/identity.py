"""What a stored-baseline check compares a config by, and what changed under it.

A record has two identities (``harness.config.identity``): ``config_hash``, the cache's key, covers the settings
and the user's own model code; ``settings_hash``, the gate's, the settings alone. The check matches a sweep's
configs with the baseline's by the settings, so that an edit of the user's model is a change under the same
config, named as a new torch is ("your code changed: models/convnet.py"), not a config that is new on one side and
missing on the other. Records older than ``settings_hash`` are matched by their config_hash. When nothing matches,
``settings_differ`` names the settings that differ. No torch, no Hydra.
"""

from __future__ import annotations

import json

import pandas as pd

# settings that never make two configs differ for a check (config.NOT_HASHED, and the user's code: named apart)
NOT_COMPARED = ("debug", "sweep", "results_dir", "timeout_s", "measure.sample_interval_s", "profile",
                "workload.source_sha")
LISTED = 4  # settings named in a "nothing comparable" message


def by_settings(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with each record's config_hash replaced by its settings_hash (kept where a record has none)."""
    if "settings_hash" not in frame or not len(frame):
        return frame
    settings = frame["settings_hash"].fillna("").astype(str)
    return frame.assign(config_hash=settings.where(settings != "", frame["config_hash"]))


def code_changes(base: pd.DataFrame, cur: pd.DataFrame) -> list[str]:
    """The code that changed under one config between baseline and current records: the user's own (the files,
    else the fingerprints) and the harness's (its fingerprints)."""
    changes = []
    before, after = _files(base), _files(cur)
    if before != after:
        changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
        changes.append(f"your code changed: {', '.join(changed)}")
    elif _values(base, "user_code_fingerprint") != _values(cur, "user_code_fingerprint"):
        changes.append(f"your code {_joined(base, 'user_code_fingerprint')} -> {_joined(cur, 'user_code_fingerprint')}")
    if _values(base, "code_fingerprint") != _values(cur, "code_fingerprint"):
        changes.append(f"harness code {_joined(base, 'code_fingerprint')} -> {_joined(cur, 'code_fingerprint')}")
    return changes


def _values(frame: pd.DataFrame, column: str) -> list[str]:
    return sorted(set(frame[column].fillna("").astype(str)) - {""}) if column in frame else []


def _joined(frame: pd.DataFrame, column: str) -> str:
    return ",".join(_values(frame, column)) or "-"


def _files(frame: pd.DataFrame) -> dict[str, str]:
    """{file: hash} of the user's code over a side's records (empty where none recorded it)."""
    out: dict[str, str] = {}
    for text in _values(frame, "user_code_files"):
        try:
            out.update(json.loads(text))
        except ValueError:
            continue
    return out


def settings_differ(baseline: pd.DataFrame, current: pd.DataFrame) -> str:
    """The settings whose values differ between every config of ``baseline`` and of ``current``, as
    "measure.steps (baseline 20, current 5)"; "" when their settings agree (the hardware must differ then)."""
    before, after = _settings(baseline), _settings(current)
    differ = [k for k in sorted(before.keys() | after.keys()) if before.get(k, set()) != after.get(k, set())]
    if not differ:
        return ""
    named = [f"{k} (baseline {_shown(before.get(k))}, current {_shown(after.get(k))})" for k in differ[:LISTED]]
    more = f" and {len(differ) - LISTED} more" if len(differ) > LISTED else ""
    return "; ".join(named) + more


def _settings(frame: pd.DataFrame) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for text in set(frame["config_json"].dropna()) if "config_json" in frame else ():
        try:
            values = json.loads(text)
        except ValueError:
            continue
        for key, value in _flat(values, ""):
            if not any(key == n or key.startswith(n + ".") for n in NOT_COMPARED):
                out.setdefault(key, set()).add(json.dumps(value, sort_keys=True))
    return out


def _flat(node, prefix: str):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _flat(v, f"{prefix}.{k}" if prefix else str(k))
    else:
        yield prefix, node


def _shown(values: set[str] | None) -> str:
    return " / ".join(sorted(values)) if values else "unset"
