"""What a stored-baseline check compares a config by, and what changed under it.

A record has two identities (``harness.config.identity``): ``config_hash``, the cache's key, covers the settings
and the user's own model code; ``settings_hash``, the gate's, the settings alone. The check matches a sweep's
configs with the baseline's by the settings, so that an edit of the user's model is a change under the same
config, named as a new torch is ("your code changed: models/convnet.py"), not a config that is new on one side and
missing on the other. A check with records older than ``settings_hash`` on either side matches by config_hash, as
before. When nothing matches,
``settings_differ`` names the settings that differ. No torch, no Hydra.
"""

from __future__ import annotations

import json

import pandas as pd

# settings that never make two configs differ for a check (config.NOT_HASHED); the user's code is named apart
NOT_COMPARED = ("debug", "sweep", "results_dir", "timeout_s", "measure.sample_interval_s", "profile")
CODE = "workload.source_sha"
LISTED = 4  # settings named in a "nothing comparable" message


def by_settings(baseline: pd.DataFrame, current: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Both frames with each record's config_hash replaced by its settings_hash, when every record of both has one;
    else both as they are (a baseline saved before settings_hash: matched by config_hash, as it always was)."""
    if not all(_has_settings(f) for f in (baseline, current)):
        return baseline, current
    return tuple(f.assign(config_hash=f["settings_hash"].astype(str)) for f in (baseline, current))


def _has_settings(frame: pd.DataFrame) -> bool:
    return "settings_hash" in frame and bool(len(frame)) and bool((frame["settings_hash"].fillna("") != "").all())


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
    differ = [k for k in sorted(before.keys() | after.keys()) if before.get(k, set()) != after.get(k, set())
              and not any(k == n or k.startswith(n + ".") for n in NOT_COMPARED)]
    if differ == [CODE]:
        return _code_only(before[CODE], after[CODE])
    differ = [k for k in differ if k != CODE]
    if not differ:
        return ""
    named = [f"{k} (baseline {_shown(before.get(k))}, current {_shown(after.get(k))})" for k in differ[:LISTED]]
    more = f" and {len(differ) - LISTED} more" if len(differ) > LISTED else ""
    return "; ".join(named) + more


def _code_only(before: set[str], after: set[str]) -> str:
    """When the settings agree and only the user's code differs: records matched by config_hash (one side saved
    before settings_hash), which covers the code."""
    return (f"none but your code (workload.source_sha baseline {_shown(before)}, current {_shown(after)}), which "
            "records stored before checks compared configs across a change of your code are matched by: save a new "
            "baseline (baseline save NAME)")


def _settings(frame: pd.DataFrame) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for text in set(frame["config_json"].dropna()) if "config_json" in frame else ():
        try:
            values = json.loads(text)
        except ValueError:
            continue
        for key, value in _flat(values, ""):
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
