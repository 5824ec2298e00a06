"""How a workload is named to people: its name, or for an inline (``custom``) workload the model it measures; and the
name of the reference models' package, now and before it moved (what the settings' hash and stored records use).

Plain strings and JSON: no torch, no other module of the harness (tables, summaries and climbs all use it).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import pkgutil
from typing import Any

CUSTOM = "custom"  # the inline workload: its name says nothing of what it measures
# The reference models' package, and the name it had before (a bare ``models`` collides with a user's own package).
MODELS_PACKAGE = "harness_models"
OLD_MODELS_PACKAGE = "models"


def target_of(node: Any) -> str:
    """The ``_target_`` of a node ("" when it has none or it is still ``???``)."""
    target = node.get("_target_") if isinstance(node, dict) else None
    return "" if target in (None, "???") else str(target)


NAME_ARGS = ("model_name", "name", "pretrained_model_name_or_path", "arch", "model")  # a factory's model, by name


def display_name(name: str, model: Any = None) -> str:
    """A workload as people read it: its name, or for ``custom`` the model it measures
    (``custom: monai.networks.nets.SegResNet``); a factory's with the model it makes
    (``custom: timm.create_model(resnet18)``)."""
    target = target_of(model)
    if name != CUSTOM or not target:
        return name
    made = made_by_factory(model)
    return f"{name}: {target}({made})" if made else f"{name}: {target}"


def made_by_factory(node: dict) -> str:
    """The model a factory such as ``timm.create_model`` is asked for: its first positional argument or a
    name argument, when it is a string ("" otherwise)."""
    args = node.get("_args_")
    if isinstance(args, (list, tuple)) and args and isinstance(args[0], str):
        return args[0]
    return next((node[key] for key in NAME_ARGS if isinstance(node.get(key), str)), "")


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


def with_old_models_name(value: Any) -> Any:
    """``value`` (a workload's fields, nested) with every dotted path into the reference models named as before they
    moved (``harness_models.x.Y`` -> ``models.x.Y``): what config_hash covers, so a setting hashes as it did then and
    the records stored before the move are still found by the cache."""
    return _renamed(value, f"{MODELS_PACKAGE}.", f"{OLD_MODELS_PACKAGE}.", lambda module: True)


def with_models_name(value: Any) -> Any:
    """``value`` with the dotted paths of a record stored before the move named as now (``models.x.Y`` ->
    ``harness_models.x.Y``) where ``x`` is a module of the reference models: a stored workload measured again."""
    return _renamed(value, f"{OLD_MODELS_PACKAGE}.", f"{MODELS_PACKAGE}.", lambda module: module in _model_modules())


def _renamed(value: Any, old: str, new: str, applies) -> Any:
    if isinstance(value, dict):
        return {k: _renamed(v, old, new, applies) for k, v in value.items()}
    if isinstance(value, list):
        return [_renamed(v, old, new, applies) for v in value]
    if isinstance(value, str) and value.startswith(old) and applies(value[len(old):].partition(".")[0]):
        return new + value[len(old):]
    return value


@functools.lru_cache(maxsize=None)
def _model_modules() -> frozenset[str]:
    spec = importlib.util.find_spec(MODELS_PACKAGE)
    folders = spec.submodule_search_locations if spec else None
    return frozenset(m.name for m in pkgutil.iter_modules(folders or []))
