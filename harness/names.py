"""How a workload is named to people: its name, or for an inline (``custom``) workload the model it measures.

Plain strings and JSON: no torch, no other module of the harness (tables, summaries and climbs all use it).
"""

from __future__ import annotations

import json
from typing import Any

CUSTOM = "custom"  # the inline workload: its name says nothing of what it measures


def target_of(node: Any) -> str:
    """The ``_target_`` of a node ("" when it has none or it is still ``???``)."""
    target = node.get("_target_") if isinstance(node, dict) else None
    return "" if target in (None, "???") else str(target)


def display_name(name: str, model: Any = None) -> str:
    """A workload as people read it: its name, or for ``custom`` the model it measures
    (``custom: monai.networks.nets.SegResNet``)."""
    target = target_of(model)
    return f"{name}: {target}" if name == CUSTOM and target else name


def display_name_of_record(name: str, config_json: str | None) -> str:
    """:func:`display_name` of a stored record (its ``workload`` and ``config_json`` columns)."""
    if name != CUSTOM or not config_json:
        return name
    try:
        workload = json.loads(config_json).get("workload") or {}
        model = workload.get("model") if target_of(workload.get("model")) else workload.get("lightning_module")
    except (ValueError, AttributeError):  # a record whose settings do not read: its name still does
        return name
    return display_name(name, model)
