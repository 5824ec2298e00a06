"""``_target_`` nodes: find what they name (with did-you-mean), build them, and fingerprint the user's source.

Hydra's ``_target_`` / ``_partial_`` / ``_args_`` conventions, implemented here in a few lines so that the
measuring child needs no Hydra. The parent calls :func:`check_targets` before anything runs: it imports the
modules the targets live in (the user's own included), nothing else. No torch here: building a model on the meta
device before any child starts is the torch side's (``harness.workload.preflight``).
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import importlib
import pkgutil
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.config.workload import TARGET_NODES, WorkloadSpec
from harness.names import target_of
from harness.registry import unknown_choice

SPECIAL_KEYS = ("_target_", "_partial_", "_args_", "_recursive_", "_convert_")
REPO_ROOT = Path(__file__).resolve().parent.parent.parent
# The harness's own code and its models (code_fingerprint, harness.run.parent.fingerprint, covers what of it the
# child runs), and installed packages (whose versions are part of the environment): no source hash for these.
FINGERPRINTED = (REPO_ROOT / "harness", REPO_ROOT / "harness_models")
# packages a workload's own training needs, by the extra of pyproject.toml that installs them
OPTIONAL_EXTRAS = {"lightning": "lightning", "pytorch_lightning": "lightning", "transformers": "hf"}


def locate(path: str, what: str = "_target_") -> Any:
    """The object a dotted path names; ValueError with did-you-mean over the names of the module it stops in."""
    parts = path.split(".")
    if not path or not all(parts):
        raise ValueError(f"{what}={path!r} is not a dotted path: use pkg.module.Name")
    obj, found = None, 0
    for i in range(len(parts), 0, -1):  # the longest importable module prefix
        module = ".".join(parts[:i])
        try:
            obj, found = importlib.import_module(module), i
            break
        except ModuleNotFoundError as exc:
            if exc.name and not module.startswith(exc.name):  # a module the user's module imports is missing
                extra = OPTIONAL_EXTRAS.get(exc.name.split(".")[0], "")
                hint = f" (the harness's optional extra: pip install -e '.[{extra}]')" if extra else ""
                raise ValueError(f"{what}={path!r}: importing {module!r} failed: {exc}{hint}") from None
        except Exception as exc:  # the user's module itself fails to import
            raise ValueError(f"{what}={path!r}: importing {module!r} failed: {type(exc).__name__}: {exc}") from None
    if obj is None:
        raise ValueError(f"{what}={path!r}: no module {parts[0]!r} can be imported here "
                         f"(is it installed, or on PYTHONPATH / in the current folder?)")
    for i in range(found, len(parts)):
        if not hasattr(obj, parts[i]):
            prefix = ".".join(parts[:i])
            raise _unknown_name(what, path, prefix, parts[i], _public_names(obj))
        obj = getattr(obj, parts[i])
    return obj


LISTED_NAMES = 40  # a module with more names (torch.nn has hundreds) gets the close ones and a count


def _unknown_name(what: str, path: str, prefix: str, name: str, names: list[str]) -> ValueError:
    """Did-you-mean over the names ``prefix`` has; every one of them only when they are few."""
    what = f"{what} (no {name!r} in {prefix!r})"
    if len(names) <= LISTED_NAMES:
        return unknown_choice(what, path, [f"{prefix}.{n}" for n in names])
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
    hint = f" Did you mean {' or '.join(repr(f'{prefix}.{c}') for c in close)}?" if close else ""
    return ValueError(f"unknown {what} {path!r}.{hint} ({prefix!r} has {len(names)} public names: "
                      f"python -c 'import {prefix.split('.')[0]}; print(dir({prefix}))' lists them)")


def _public_names(obj: Any) -> list[str]:
    names = {n for n in dir(obj) if not n.startswith("_") and callable(getattr(obj, n, None))}
    if hasattr(obj, "__path__"):  # a package: its submodules too
        names |= {m.name for m in pkgutil.iter_modules(obj.__path__) if not m.name.startswith("_")}
    return sorted(names)


def instantiate(node: Any, **extra: Any) -> Any:
    """Build a ``_target_`` node (nested nodes first); ``_partial_: true`` gives a functools.partial."""
    if isinstance(node, list):
        return [instantiate(v) for v in node]
    if not isinstance(node, dict):
        return node
    if "_target_" not in node:
        return {k: instantiate(v) for k, v in node.items()}
    target = locate(str(node["_target_"]))
    args = [instantiate(a) for a in node.get("_args_", [])]
    kwargs = {k: instantiate(v) for k, v in node.items() if k not in SPECIAL_KEYS}
    kwargs.update(extra)
    if node.get("_partial_"):
        return functools.partial(target, *args, **kwargs)
    return target(*args, **kwargs)


def function_of(node: dict) -> Any:
    """The function a ``step``/``collate``/``samples`` node names, as a partial of its arguments (``_partial_`` may
    be left out; ``_partial_: false`` calls the target, a factory, for the function)."""
    return instantiate({**node, "_partial_": node.get("_partial_", True)})


@dataclass(frozen=True)
class Functions:
    """A workload's own functions, each looked up once from its node (None where it names none): what the step
    adapters, the parent's check on the meta device and the child's loop are handed."""

    step: Any = None  # workload.step: step(model, batch) -> loss
    samples: Any = None  # workload.samples: samples(batch) -> float
    units: Any = None  # workload.units: units(batch) -> float
    val_step: Any = None  # workload.val_step: val_step(model, batch) -> loss
    collate: Any = None  # workload.collate: the loader's collate_fn


def functions_of(spec: WorkloadSpec) -> Functions:
    """Every function ``spec`` names, looked up once (:func:`function_of`); a factory (``_partial_: false``) that
    fails is one ValueError naming its node."""
    return Functions(**{name: _function(f"workload.{name}", node) if (node := getattr(spec, name)) is not None
                        else None for name in ("step", "samples", "units", "val_step", "collate")})


def _function(where: str, node: dict) -> Any:
    try:
        return function_of(node)
    except ValueError:
        raise  # a target that cannot be found: already one line naming it
    except Exception as exc:
        lines = str(exc).strip().splitlines()
        raise ValueError(f"{where}._target_={target_of(node)!r} cannot be made: {type(exc).__name__}: "
                         f"{lines[0] if lines else ''}".rstrip(": ")) from None


def setting_args(mapping: dict[str, str], cfg) -> dict[str, Any]:
    """Arguments taken from harness settings (``{ARG: SETTING}``); ``width`` is model.width x the size's width."""
    return {arg: cfg.effective_width if source == "width" else _get(cfg, source)
            for arg, source in mapping.items()}


def _get(cfg, dotted: str) -> Any:
    for part in dotted.split("."):
        cfg = getattr(cfg, part)
    return list(cfg) if isinstance(cfg, tuple) else cfg


def _nested_targets(node: Any, where: str):
    """(where, dotted path) of every _target_ in a node, nested ones included."""
    if isinstance(node, dict):
        if target_of(node):
            yield f"{where}._target_", target_of(node)
        for k, v in node.items():
            if k not in SPECIAL_KEYS:
                yield from _nested_targets(v, f"{where}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _nested_targets(v, f"{where}[{i}]")


def all_targets(spec: WorkloadSpec) -> list[tuple[str, str]]:
    """(setting, dotted path) of every class or function a workload names."""
    out = []
    for name in TARGET_NODES:
        out += list(_nested_targets(getattr(spec, name), f"workload.{name}"))
    out += [(f"workload.checkpoint_units[{i}]", p) for i, p in enumerate(spec.checkpoint_units)]
    return out


def check_targets(spec: WorkloadSpec) -> None:
    """Every target importable and present (ValueError with did-you-mean naming the setting)."""
    for where, path in all_targets(spec):
        obj = locate(path, where)
        if not callable(obj):
            raise ValueError(f"{where}={path!r} is a {type(obj).__name__}, not a class or function")


def source_sha(spec: WorkloadSpec) -> str:
    """sha256 (16 hex) of the source files of the user's modules the targets live in ("" when every one is in
    the harness, its harness_models/ or an installed package: code_fingerprint and the package versions cover those)."""
    files = sorted({f for _, path in all_targets(spec) if (f := _user_file(path)) is not None})
    if not files:
        return ""
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def user_sources(spec: WorkloadSpec) -> dict[str, str]:
    """The user's source files the targets live in (those ``source_sha`` covers), each with the sha256 (16 hex) of
    its text: named relative to the current folder when inside it, else by their full path."""
    here = Path.cwd().resolve()
    files = sorted({f for _, path in all_targets(spec) if (f := _user_file(path)) is not None})
    return {(str(f.relative_to(here)) if f.is_relative_to(here) else str(f)):
            hashlib.sha256(f.read_bytes()).hexdigest()[:16] for f in files}


def _user_file(path: str) -> Path | None:
    obj = locate(path)
    module = sys.modules.get(getattr(obj, "__module__", "") or "")
    origin = getattr(module, "__file__", None)
    if not origin:
        return None
    file = Path(origin).resolve()
    return file if is_user_source(file) else None


def is_user_source(file: str | Path) -> bool:
    """A source file of the user's own: not the harness's (nor its harness_models/), not the standard library's,
    not an installed package's (a ``site-packages`` folder anywhere: another environment's, seen through a .pth
    line, too), and a file (not ``<string>``)."""
    if str(file).startswith("<"):
        return False
    file = Path(file).resolve()
    installed = [Path(p).resolve() for k, p in sysconfig.get_paths().items() if k in ("stdlib", "purelib", "platlib")]
    if any(file.is_relative_to(root) for root in (*FINGERPRINTED, *installed)):
        return False
    return not {"site-packages", "dist-packages"} & set(file.parts)
