"""The workload's model and loss built on the meta device in the parent, before any child starts: a constructor
that fails or a package the model needs is one line then, not a crashed child. torch is imported only when a
workload that is not a built-in as shipped is checked (the parent needs no torch for those)."""

from __future__ import annotations

import contextlib
import json
import re
import sys
from typing import Any

from harness.config.targets import instantiate, locate, setting_args
from harness.config.workload import is_builtin
from harness.names import display_name, target_of


def check_model_builds(cfg) -> None:
    """The model and loss of a resolved config built on the meta device in the parent, before any child starts
    (no memory, no arithmetic), the model run once on a meta batch, and the workload's step on it
    (``harness.workload.step.on_meta``): ValueError with one line for a package the model needs that is missing here, a
    constructor that fails, or a step that returns no usable loss; the step's notes printed. Built-in workloads as
    shipped are not built here (the parent needs no torch for them, and every test builds them)."""
    spec = cfg.workload
    if is_builtin(spec):
        return
    model_args, loss_args = setting_args(spec.model_settings, cfg), setting_args(spec.loss_settings, cfg)
    # the batch the child will make; a workload's own dataset decides its samples itself
    shape = [cfg.batch_size, spec.in_channels, *cfg.data.patch_size] if spec.dataset is None else []
    seen = json.dumps([spec.model_node, model_args, spec.loss, loss_args, shape,
                       spec.step, spec.synthetic, spec.num_classes, spec.val_step, bool(cfg.val.every_n_steps)],
                      default=str)
    if seen in _BUILT:  # the rungs of a sweep: one build each for what they change of the model
        return
    where = "workload.lightning_module" if spec.lightning_module is not None else "workload.model"
    model = _build_on_meta(where, spec.model_node, model_args)
    if spec.lightning_module is None:
        _refuse_lightning_as_model(spec, model)
    if spec.loss is not None:
        _build_on_meta("workload.loss", spec.loss, loss_args)
    if model is not None and shape:  # a package imported on the first call (MONAI's optional ones)
        _forward_on_meta(model, shape, target_of(spec.model_node))
    if model is not None:
        from harness.workload.step.on_meta import check_step_on_meta  # torch: only for a model of the user's

        for note in check_step_on_meta(cfg, model):
            print(f"note: {display_name(spec.name, spec.model_node)}: {note}", file=sys.stderr)
    _BUILT.add(seen)


_BUILT: set[str] = set()  # what check_model_builds built in this process


def _refuse_lightning_as_model(spec, model: Any) -> None:
    """A LightningModule given as ``model`` would be measured through its forward with the harness's loss, not its
    training_step: refused, naming ``workload.lightning_module``. Found by its methods, as the adapter finds it."""
    target = target_of(spec.model)
    found = type(model) if model is not None else locate(target, "workload.model._target_")
    if not isinstance(found, type) or not all(callable(getattr(found, m, None))
                                             for m in ("training_step", "configure_optimizers")):
        return
    raise ValueError(f"workload.model._target_={target!r} is a LightningModule ({found.__name__} has training_step "
                     "and configure_optimizers): as workload.model it would be measured through its forward with the "
                     "harness's loss; give it as workload.lightning_module._target_=" + target
                     + " (and workload.model=null) to measure its training_step")


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
