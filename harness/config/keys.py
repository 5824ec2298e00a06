"""Dotted keys (``data.num_workers``): the keys the schema has, reading and writing one, and a RunConfig built at
once from the nested dict Hydra composes.

A value takes its field's type through OmegaConf's structured-config typing ("3" -> 3, 1 -> 1.0, "true" -> True;
1.5 for a whole number is refused), so that a setting means the same from the command line, a ladder file, a
stored record or Python, and ``model.width=1`` and ``model.width=1.0`` are one setting. What OmegaConf's typing
cannot say stays here: the spellings the command line accepts for ``precision`` and ``compile``, the
whole-number-or-auto of ``measure.steps`` and ``measure.warmup_steps``, and the workload node, set whole by name
(``workload=NAME``), as a mapping, or field by field (the fields below its ``_target_`` nodes are the target's own
arguments).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import typing
from typing import Any

from harness.config.schema import RunConfig
from harness.registry import unknown_choice
from harness.config import workload as workloads_mod
from harness.config.workload import WorkloadSpec


def known_keys(cls: type = RunConfig, prefix: str = "") -> list[str]:
    """Every settable dotted key of the schema, e.g. ``data.num_workers``."""
    keys = []
    for f in dataclasses.fields(cls):
        name = prefix + f.name
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if isinstance(default, WorkloadSpec):  # set whole (`workload=NAME`) or field by field
            keys += [name] + [f"{name}.{w.name}" for w in dataclasses.fields(WorkloadSpec)]
        elif dataclasses.is_dataclass(default):
            keys += known_keys(type(default), name + ".")
        else:
            keys.append(name)
    return keys


KNOWN_KEYS = tuple(known_keys())


def check_key(key: str) -> None:
    """ValueError naming an unknown setting and the known ones closest to it."""
    if key.startswith(tuple(f"workload.{n}." for n in workloads_mod.OPEN_NODES)):
        return  # below a _target_ node: the target's own arguments (checked when the workload is resolved)
    if key not in KNOWN_KEYS:
        raise unknown_choice("setting", key, KNOWN_KEYS)


def flatten(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested dict as dotted keys down to the settings (a setting whose value is a mapping stays whole)."""
    out: dict[str, Any] = {}
    for k, v in values.items():
        if isinstance(v, dict) and prefix + k not in KNOWN_KEYS:
            out.update(flatten(v, prefix + k + "."))
        else:
            out[prefix + k] = v
    return out


def from_dict(values: dict[str, Any]) -> RunConfig:
    """A RunConfig from a nested (or dotted) dict, as Hydra composes it, each value converted once to its field's
    type; unknown keys are refused by name. A whole workload is set before its fields, so that ``workload.*``
    fields given beside it change it instead of being replaced by it."""
    cfg = RunConfig()
    flat = flatten(values)
    for key in sorted(flat, key=lambda k: k != "workload"):  # stable: the rest keep their order
        set_key(cfg, key, flat[key])
    return cfg


def to_dict(cfg: RunConfig) -> dict[str, Any]:
    """The settings as a nested dict of plain values (what ``from_dict`` takes back)."""
    return dataclasses.asdict(cfg)


def get_key(cfg: RunConfig, key: str) -> Any:
    """The value of a dotted key (below a workload's ``_target_`` nodes too)."""
    obj: Any = cfg
    for part in key.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else getattr(obj, part)  # a workload's _target_ nodes are dicts
    return obj


def set_key(cfg: RunConfig, key: str, value: Any) -> None:
    """Set one setting in place, its value in the field's type (ValueError naming the key and what it takes)."""
    check_key(key)
    if key == "workload" or key.startswith("workload."):
        return _set_workload_key(cfg, key, value)
    *parents, last = key.split(".")
    owner: Any = cfg
    for part in parents:
        owner = getattr(owner, part)
    setattr(owner, last, typed(type(owner), last, _normalize(key, value), key))


def _set_workload_key(cfg: RunConfig, key: str, value: Any) -> None:
    """``workload=NAME`` (a shipped workload), a whole mapping (as composed), or one of its fields."""
    if key == "workload":
        if isinstance(value, WorkloadSpec):
            cfg.workload = copy.deepcopy(value)
        elif isinstance(value, dict):
            cfg.workload = workloads_mod.parse_spec(value)
        else:
            cfg.workload = workloads_mod.builtin(str(value))
        return
    obj: Any = cfg.workload
    *parents, last = key.split(".")[1:]
    for part in parents:
        if isinstance(obj, dict):
            obj = obj.setdefault(part, {})
        elif getattr(obj, part) is None:
            setattr(obj, part, {})
            obj = getattr(obj, part)
        else:
            obj = getattr(obj, part)
    if isinstance(obj, dict):
        obj[last] = value
    elif last == "sizes":
        obj.sizes = workloads_mod.parse_spec({"sizes": value}).sizes
    else:
        setattr(obj, last, typed(type(obj), last, value, key))


def typed(owner: type, name: str, value: Any, key: str) -> Any:
    """``value`` converted to the type the dataclass ``owner`` declares for its field ``name``, by OmegaConf's
    structured-config typing; ValueError naming ``key``, the value and what the field takes."""
    hint = _type_hints(owner)[name]
    if type(value).__module__ == "numpy":  # a value read from a frame of records: OmegaConf takes Python's own
        value = value.item()
    if hint is Any:  # the field takes values of several kinds; validation checks them
        return value
    if type(value) in _SCALARS:
        out = _typed_scalar(owner, name, type(value), value, key)
        return copy.deepcopy(out) if isinstance(out, (list, dict)) else out  # never one list shared by two configs
    return _convert(owner, name, value, key, hint)


_SCALARS = (str, int, float, bool, type(None))


@functools.lru_cache(maxsize=4096)
def _typed_scalar(owner: type, name: str, kind: type, value: Any, key: str) -> Any:
    """:func:`_convert` of a plain scalar, remembered (its type is part of the key: ``True`` is not ``1``): a sweep
    builds each rung's settings again and again (~35 times for a cached phase2), ~100 assignments through OmegaConf
    each. A refusal is not remembered; it is raised each time."""
    return _convert(owner, name, value, key, _type_hints(owner)[name])


def _convert(owner: type, name: str, value: Any, key: str, hint: Any) -> Any:
    from omegaconf import Container, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    fields = _typed_fields(owner)
    try:
        fields[name] = value
        out = fields[name]
    except OmegaConfBaseException:  # a value of another type, or text that reads as an interpolation
        raise ValueError(f"{key}={value!r} is not valid: use {_takes(hint)}") from None
    return OmegaConf.to_container(out) if isinstance(out, Container) else out


@functools.cache
def _type_hints(owner: type) -> dict[str, Any]:
    return typing.get_type_hints(owner)


@functools.cache
def _typed_fields(owner: type):
    """The fields of ``owner`` as typed OmegaConf nodes. One per class, reused: a value assigned to a field is
    converted (or refused) on assignment and read back at once, so what a field held before does not matter."""
    from omegaconf import OmegaConf

    return OmegaConf.structured(owner)


_KINDS = {int: "a whole number", float: "a number", bool: "true or false", str: "text"}
_KINDS_PLURAL = {int: "whole numbers", float: "numbers", bool: "trues and falses", str: "names"}


def _takes(hint: Any) -> str:
    """What a field of this type takes, in words."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    optional = typing.get_origin(hint) is typing.Union and len(args) == 1
    base = args[0] if optional else hint
    if typing.get_origin(base) is list:
        (element,) = typing.get_args(base) or (Any,)
        words = f"a list of {_KINDS_PLURAL[element]}" if element in _KINDS_PLURAL else "a list"
    elif typing.get_origin(base) is dict:
        words = "a mapping"
    else:
        words = _KINDS.get(base, str(base))
    return words + (" or null" if optional else "")


def _normalize(key: str, value: Any) -> Any:
    """Values as the command line may spell them (precision=32, compile=false) in their canonical form."""
    if key == "precision":
        value = str(value)
        return {"32-true": "32", "bf16": "bf16-mixed", "16": "16-mixed"}.get(value, value)
    if key == "compile":
        if value is False or value is None or str(value).lower() in ("false", "none", "off"):
            return "off"
        if value is True or str(value).lower() == "true":
            return "default"
        return str(value)
    if key in ("measure.steps", "measure.warmup_steps") and value is not None:
        return _steps(value, key)
    return value


def _steps(value: Any, key: str = "measure.steps") -> int | str:
    """``measure.steps`` or ``measure.warmup_steps``: a whole number, or "auto" (the only word)."""
    if str(value).lower() == "auto":
        return "auto"
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = 0.5
    if not number.is_integer() or isinstance(value, bool):
        raise ValueError(f"{key}={value!r} is not valid: use a whole number or auto")
    return int(number)
