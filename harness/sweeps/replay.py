"""A stored sweep's configs as ``python -m harness run`` command lines: what ``check --against`` measures again.

Every record keeps the settings it ran with (``config_json``, resolved: the batch size, steps and sizes the run
actually had). A config is replayed with the settings that differ from the defaults, as Hydra overrides, so
both sides of the check run exactly the sweep's settings whatever their own defaults say, and an older REF
need not know settings the config does not use. The sweep's own bookkeeping (``sweep.*``, ``results_dir``)
is left out. A shipped workload is named (``workload=unet3d``); any other (a file of the user's, an inline
``custom`` one) is written whole as a workload file in a config folder of the check's own, found through
``hydra.searchpath``. The user's ``key=value`` arguments go last and win.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import yaml

from harness import config as config_mod
from harness.names import with_models_name

LEFT_OUT = ("results_dir", "sweep")  # the sweep's bookkeeping, not what it measured


@dataclass(frozen=True)
class Replay:
    """One config of the sweep: where it sat, and the ``run`` overrides that measure it again."""

    rung: int
    ladder: str
    change: str
    workload: str
    config_hash: str
    overrides: tuple[str, ...]
    workload_file: str = ""  # the name of a workload written by the check (workload=<name>), "" for a shipped one
    workload_yaml: str = ""  # its text


def hydra_value(value: Any) -> str:
    """A value as Hydra's override grammar reads it back as the same value (strings always quoted)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            return "inf" if value > 0 else ("-inf" if value < 0 else "nan")
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def _defaults() -> dict[str, Any]:
    values = config_mod.to_dict(config_mod.RunConfig())
    values.pop("workload")
    return config_mod.flatten(values)


def settings_overrides(values: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The settings of a record's ``config_json`` (without its workload) that differ from the defaults, as
    overrides; and the keys this harness does not know (a record of another version), left out."""
    defaults, out, unknown = _defaults(), [], []
    rest = {k: v for k, v in values.items() if k != "workload"}
    for key, value in sorted(config_mod.flatten(rest).items()):
        if key.split(".")[0] in LEFT_OUT:
            continue
        if key not in defaults:
            unknown.append(key)
        elif value != defaults[key]:
            out.append(f"{key}={hydra_value(value)}")
    return out, unknown


def workload_override(workload: Any, rung: int) -> tuple[str, str, str]:
    """``workload=NAME`` for a shipped workload; for another, the override naming the file the check writes for
    it, that file's name and its text (the whole workload as composed, so both sides build the same one)."""
    if isinstance(workload, str):
        return f"workload={workload}", "", ""
    spec = with_models_name(dict(workload))  # a record stored before the reference models moved
    spec.pop("source_sha", None)  # filled when resolved, from the side's own source files
    name = f"against-{spec.get('name') or 'workload'}-{rung}"
    return f"workload={name}", name, yaml.safe_dump(spec, sort_keys=False)


def replay(records, extra: list[str]) -> tuple[list[Replay], list[str]]:
    """One ``Replay`` per config (rung) of a sweep's records, and warnings about settings left out."""
    replays, warnings = [], []
    order = records.sort_values(["rung", "timestamp"], na_position="last", kind="stable")
    for position, (key, group) in enumerate(order.groupby(order["rung"].fillna(-1), sort=True)):
        rung = int(key) if key >= 0 else position
        ok = group[group["status"] == "ok"]
        row = (ok if len(ok) else group).iloc[0]
        values = json.loads(row["config_json"] or "{}")
        if not values:
            raise ValueError(f"sweep {row['sweep_id']!r} rung {rung} has no stored settings (config_json); "
                             "it cannot be measured again")
        settings, unknown = settings_overrides(values)
        workload, file_name, file_text = workload_override(values.get("workload", "unet3d"), rung)
        if unknown:
            warnings.append(f"rung {rung}: settings {', '.join(unknown)} are unknown to this harness; left out")
        overrides = _merge([workload] + settings, extra)
        replays.append(Replay(rung=rung, ladder=str(row["ladder"] or ""), change=str(row["change"] or ""),
                              workload=str(row["workload"] or ""), config_hash=str(row["config_hash"] or ""),
                              overrides=tuple(overrides), workload_file=file_name if _kept(workload, overrides) else "",
                              workload_yaml=file_text))
    return replays, warnings


def _merge(derived: list[str], extra: list[str]) -> list[str]:
    """The derived overrides, then the user's: a key the user gives replaces the derived one."""
    given = {o.split("=", 1)[0].lstrip("+~") for o in extra if "=" in o}
    return [o for o in derived if o.split("=", 1)[0] not in given] + list(extra)


def _kept(workload: str, overrides: list[str]) -> bool:
    return workload in overrides
