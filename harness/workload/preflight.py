"""The workload checked in the parent, before any child starts: a constructor that fails or a package the model
needs is one line then, not a crashed child. Two passes: the workload's objects resolved once (:func:`resolve`: the
model and loss built on the meta device, the step and validation step its adapter makes, the batch the child will
be handed, on the meta device too), then checked (``harness.workload.step.on_meta``), which builds nothing more.
torch is imported only when a workload that is not a built-in as shipped is checked (the parent needs no torch for
those)."""

from __future__ import annotations

import contextlib
import json
import re
import sys
from dataclasses import dataclass
from typing import Any

from harness.config.targets import Functions, functions_of, instantiate, locate, setting_args
from harness.config.workload import is_builtin
from harness.names import display_name, target_of
from harness.workload import first_item


def check_model_builds(cfg) -> None:
    """The workload of a resolved config resolved on the meta device in the parent, before any child starts (no
    memory, no arithmetic), then checked: the model run once on a meta batch, and the workload's step on it
    (``harness.workload.step.on_meta``): ValueError with one line for a package the model needs that is missing here, a
    constructor that fails, or a step that returns no usable loss; the step's notes printed. Built-in workloads as
    shipped are not built here (the parent needs no torch for them, and every test builds them)."""
    spec = cfg.workload
    if is_builtin(spec):
        return
    # the arguments its model, loss and dataset are handed, and its own functions: each looked up once
    args = {what: setting_args(getattr(spec, f"{what}_settings"), cfg) for what in ("model", "loss", "dataset")}
    fns = functions_of(spec)
    # the batch the child will make; a workload's own dataset decides its samples itself
    shape = [cfg.batch_size, spec.in_channels, *cfg.data.patch_size] if spec.dataset is None else []
    seen = json.dumps([spec.model_node, args["model"], spec.loss, args["loss"], shape, spec.step, spec.synthetic,
                       spec.num_classes, spec.val_step, bool(cfg.val.every_n_steps)], default=str)
    if seen in _BUILT:  # the rungs of a sweep: one build each for what they change of the model
        return
    from harness.workload.step import on_meta  # torch: only for a model of the user's

    objects = resolve(cfg, args, shape, fns)
    for note in on_meta.check(objects):
        print(f"note: {display_name(spec.name, spec.model_node)}: {note}", file=sys.stderr)
    _BUILT.add(seen)


_BUILT: set[str] = set()  # what check_model_builds built in this process


@dataclass
class OnMeta:
    """A workload's objects as the child would make them, on the meta device: what the checks look at."""

    spec: Any  # the WorkloadSpec
    model: Any  # None when its constructor cannot run on the meta device (the child's to check)
    loss: Any  # the loss the default step calls; None when it cannot be built on the meta device
    own: Any  # the step its adapter makes (OwnStep), or None for the default step
    val: Any  # the validation step (ValStep) the parent can check: ``val.every_n_steps`` asks for a pass, else None
    batch: Any  # the batch the child is handed, on the meta device; None where the parent cannot know it


def resolve(cfg, args: dict[str, dict[str, Any]], shape: list[int], fns: Functions) -> OnMeta:
    """Every object of ``cfg``'s workload the checks look at, built once and in one pass, on the meta device: the
    model, the loss and the dataset with the arguments they are handed (``args``, by node: ``model``, ``loss``,
    ``dataset``), its functions looked up once (``fns``; ValueError with one line for a constructor that fails or
    a package it needs that is missing; a LightningModule given as ``model`` refused), the model called once on a
    meta batch of ``shape`` (a package imported on the first call, as MONAI's optional ones; [] for a workload's own
    dataset: not called), the step and validation step its adapter makes for it, and the batch (synthetic, or the
    dataset's first item collated)."""
    from harness.workload import build  # torch: only for a model of the user's
    from harness.workload.step import adapters, lightning, validation  # torch too (the step's adapters)

    spec, synthetic = cfg.workload, _meta_batch(cfg)
    where = "workload.lightning_module" if spec.lightning_module is not None else "workload.model"
    built = {what: _build_on_meta(what, node, args, called) for what, node, args, called in
             ((where, spec.model_node, args["model"], shape), ("workload.loss", spec.loss, args["loss"], []))
             if node is not None}
    model, target = built.get(where), target_of(spec.model_node)
    loss = built["workload.loss"] if spec.loss is not None else build.default_loss(spec)
    if spec.lightning_module is None:
        _refuse_lightning_as_model(target, model)
    if model is None:  # its constructor cannot run on the meta device: the rest is the child's to check
        return OnMeta(spec, None, loss, None, None, None)
    own, val = adapters.steps_of(spec, model, fns, bool(cfg.val.every_n_steps), with_data=False, loss_fn=loss)
    if val is not None and validation.has_own_val_data(spec, model, own):
        val = None  # a LightningModule's pass over its own val_dataloader() is the child's to run
    batch = synthetic
    if own is not None and own.lightning and lightning.overrides(type(model), "train_dataloader"):
        batch = None  # its batches come from its own data, which only the child builds
    elif batch is None and own is None and spec.dataset is not None:
        # the default step's batch, from the dataset's first item
        batch = first_item.first_batch(cfg, args["dataset"], fns.collate)
    return OnMeta(spec, model, loss, own, val, batch)


def _meta_batch(cfg) -> Any:
    """The batch the child's synthetic data gives, on the meta device (None for a workload's own dataset)."""
    import torch

    spec, n, patch = cfg.workload, cfg.batch_size, list(cfg.data.patch_size)
    if spec.dataset is not None:
        return None
    if spec.synthetic == "tokens":
        ids = torch.empty([n, patch[-1]], dtype=torch.int64, device="meta")
        return {"input_ids": ids, "attention_mask": ids, "labels": ids}
    if spec.synthetic != "tensors":
        return None
    x = torch.empty([n, spec.in_channels, *patch], device="meta")
    if spec.target == "class":
        y = torch.empty([n], dtype=torch.int64, device="meta")
    elif spec.target == "segmentation":
        y = torch.empty([n, *patch], dtype=torch.int64, device="meta")
    else:
        y = torch.empty([n, *(spec.target_shape or [spec.num_classes])], device="meta")
    return x, y


def _refuse_lightning_as_model(target: str, model: Any) -> None:
    """A LightningModule given as ``model`` (``target``: its ``_target_``) would be measured through its forward with
    the harness's loss, not its training_step: refused, naming ``workload.lightning_module``. Found by its methods,
    as the adapter finds it."""
    found = type(model) if model is not None else locate(target, "workload.model._target_")
    if not isinstance(found, type) or not all(callable(getattr(found, m, None))
                                             for m in ("training_step", "configure_optimizers")):
        return
    raise ValueError(f"workload.model._target_={target!r} is a LightningModule ({found.__name__} has training_step "
                     "and configure_optimizers): as workload.model it would be measured through its forward with the "
                     "harness's loss; give it as workload.lightning_module._target_=" + target
                     + " (and workload.model=null) to measure its training_step")


def _build_on_meta(where: str, node: dict, settings: dict[str, Any], shape: list[int]) -> Any:
    """``node`` built with its parameters on the meta device, then (a model: ``shape`` not []) called once on a meta
    batch of ``shape``; None when the constructor cannot run there (it reads values of tensors it made), which leaves
    the check to the child. A parameter is made on the meta device as it is registered where the whole constructor
    cannot run there (tensors it makes for itself, as linspace(...).item(), stay real). The call: only a missing
    package stops there; anything else (a shape the model does not take, an input of another dtype) is the child's
    to report, with the batch's shapes."""
    import torch

    for on_meta in (lambda: torch.device("meta"), _parameters_on_meta):
        try:
            with on_meta():
                built = instantiate(node, **settings)
        except Exception as exc:
            if not _meta_limit(exc):
                raise _build_error(f"{where}._target_={target_of(node)!r}", exc) from None
            continue
        try:
            if shape:
                with torch.no_grad():
                    built(torch.empty(shape, device="meta"))
        except ImportError as exc:
            raise _build_error(f"workload.model._target_={target_of(node)!r}", exc) from None
        except Exception:
            pass
        return built
    return None


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
