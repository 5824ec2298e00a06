"""``_target_`` nodes: find what they name (with did-you-mean), build them, and fingerprint the user's source.

Hydra's ``_target_`` / ``_partial_`` / ``_args_`` conventions, implemented here in a few lines so that the
measuring child needs no Hydra. The parent calls :func:`check_targets` before anything runs: it imports the
modules the targets live in (the user's own included), nothing else; then, for a workload that is not a built-in
as shipped, :func:`check_model_builds` builds its model on the meta device (torch imported there only), so that a
constructor that fails or a package the model needs is one line before any child starts.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import hashlib
import importlib
import json
import pkgutil
import re
import sys
import sysconfig
from pathlib import Path
from typing import Any

from harness.registry import unknown_choice
from harness.workload.workloads import TARGET_NODES, WorkloadSpec, is_builtin, target_of

SPECIAL_KEYS = ("_target_", "_partial_", "_args_", "_recursive_", "_convert_")
REPO_ROOT = Path(__file__).resolve().parent.parent.parent
# Code whose changes code_fingerprint (harness.run.env) already covers, and installed packages (whose versions
# are part of the environment): no source hash for these.
FINGERPRINTED = (REPO_ROOT / "harness", REPO_ROOT / "models")


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
                raise ValueError(f"{what}={path!r}: importing {module!r} failed: {exc}") from None
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
    the harness, its models/ or an installed package: code_fingerprint and the package versions cover those)."""
    files = sorted({f for _, path in all_targets(spec) if (f := _user_file(path)) is not None})
    if not files:
        return ""
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _user_file(path: str) -> Path | None:
    obj = locate(path)
    module = sys.modules.get(getattr(obj, "__module__", "") or "")
    origin = getattr(module, "__file__", None)
    if not origin:
        return None
    file = Path(origin).resolve()
    installed = [Path(p).resolve() for k, p in sysconfig.get_paths().items() if k in ("stdlib", "purelib", "platlib")]
    if any(file.is_relative_to(root) for root in (*FINGERPRINTED, *installed)):
        return None
    return file


def check_model_builds(cfg) -> None:
    """The model and loss of a resolved config built on the meta device in the parent, before any child starts
    (no memory, no arithmetic), and the model run once on a meta batch: ValueError with one line for a package the
    model needs that is missing here, or a constructor that fails. Built-in workloads as shipped are not built
    here (the parent needs no torch for them, and every test builds them)."""
    spec = cfg.workload
    if is_builtin(spec):
        return
    model_args = setting_args(spec.model_settings, cfg)
    # the batch the child will make; a workload's own dataset decides its samples itself
    shape = [cfg.batch_size, spec.in_channels, *cfg.data.patch_size] if spec.dataset is None else []
    seen = json.dumps([spec.model, model_args, spec.loss, setting_args(spec.loss_settings, cfg), shape], default=str)
    if seen in _BUILT:  # the rungs of a sweep: one build each for what they change of the model
        return
    model = _build_on_meta("workload.model", spec.model, model_args)
    if spec.loss is not None:
        _build_on_meta("workload.loss", spec.loss, setting_args(spec.loss_settings, cfg))
    if model is not None and shape:  # a package imported on the first call (MONAI's optional ones)
        _forward_on_meta(model, shape, target_of(spec.model))
    _BUILT.add(seen)


_BUILT: set[str] = set()  # what check_model_builds built in this process


def _build_on_meta(where: str, node: dict, settings: dict[str, Any]) -> Any:
    """``node`` built with its parameters on the meta device; None when the constructor cannot run there (it reads
    values of tensors it made), which leaves the check to the child."""
    import torch

    what = f"{where}._target_={target_of(node)!r}"
    try:
        with torch.device("meta"):
            return instantiate(node, **settings)
    except Exception as exc:
        if not _meta_limit(exc):
            raise _build_error(what, exc) from None
    try:  # tensors the constructor makes for itself stay real (linspace(...).item()); only parameters are meta
        with _parameters_on_meta():
            return instantiate(node, **settings)
    except Exception as exc:
        if not _meta_limit(exc):
            raise _build_error(what, exc) from None
    return None


def _forward_on_meta(model: Any, shape: list[int], target: str) -> None:
    """One forward pass on a meta batch: only a missing package stops here; anything else (a shape the model does
    not take, an input of another dtype) is the child's to report, with the batch's shapes."""
    import torch

    try:
        with torch.no_grad():
            model(torch.empty(shape, device="meta"))
    except ImportError as exc:
        raise _build_error(f"workload.model._target_={target!r}", exc) from None
    except Exception:
        pass


def _meta_limit(exc: BaseException) -> bool:
    """An error of the meta device itself (a value read from a tensor with no data), not of the model."""
    return not isinstance(exc, (ImportError, ValueError)) and ("meta" in str(exc).lower()
                                                               or isinstance(exc, NotImplementedError))


def _build_error(what: str, exc: BaseException) -> ValueError:
    """One line: the package that is missing, or the constructor's own error."""
    if isinstance(exc, ImportError):
        found = re.search(r"No module named '([^']+)'", f"{exc} {exc.__cause__ or ''}")
        module = exc.name or (found.group(1) if found else "")
        if module:
            top = module.split(".")[0]
            return ValueError(f"{what} needs the package {top!r}, which is not installed here: pip install {top} "
                              "(or the package that provides it)")
    if isinstance(exc, ValueError) and str(exc).startswith(("workload.", "_target_")):
        return exc  # a nested target that cannot be found: already one line naming it
    lines = str(exc).strip().splitlines()
    return ValueError(f"{what} cannot be built: {type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": "))


@contextlib.contextmanager
def _parameters_on_meta():
    """Every parameter a module registers moved to the meta device as it is registered (as accelerate's
    init_empty_weights does), so that a constructor computing with tensors of its own still runs."""
    from torch import nn

    register = nn.Module.register_parameter

    def on_meta(module, name, param):
        register(module, name, param)
        if param is not None and not isinstance(param, nn.parameter.UninitializedParameter):
            module._parameters[name] = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)

    nn.Module.register_parameter = on_meta
    try:
        yield
    finally:
        nn.Module.register_parameter = register
