"""Workloads: what to train (model, loss and optimizer as ``_target_`` nodes), on what samples, measured in
which unit, at which sizes.

A workload is one file of the Hydra config group ``conf/workload/`` (the four built-ins, and ``custom`` for a
model named on the command line; a user's own files join the group with ``--config-dir``), composed into a
:class:`WorkloadSpec`. This module is imported by the parent to resolve settings, so it never imports torch:
the measuring child builds the objects (``harness.workload.build``).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import yaml

from harness.conf import CONF_DIR
from harness.config import axes as axes_mod
from harness.names import target_of
from harness.registry import check_choice, unknown_choice

WORKLOAD_DIR = CONF_DIR / "workload"
TARGET_KINDS = ("class", "segmentation", "regression")
# volumes: labelled 3D ellipsoids (1 channel, segmentation); images: ImageNet-like uint8 RGB images (class);
# tensors: random inputs of the sample's shape with targets of the workload's kind (any model)
# tokens: dicts of input_ids, attention_mask and labels (a causal language model's), ids below num_classes
SYNTHETIC_KINDS = ("volumes", "images", "tensors", "tokens")
# Harness settings a workload may hand to its model, loss or dataset (``model_settings: {ARG: SETTING}``); ``width``
# is model.width times the size's width; data.patch_size is the sample's spatial sides (the size's, unless set);
# data.cache_dir and results_dir say where a dataset that writes files keeps them (as data=disk does); size is the
# resolved size (full, smoke), for a builder whose shape differs by size in more than width (workload=gpt).
SETTING_SOURCES = ("width", "model.width", "model.mednext_size", "model.kernel_size", "model.deep_supervision",
                   "model.depth", "model.features", "data.patch_size", "data.cache_dir", "results_dir", "size")
# the _target_ nodes, free-form below their name; the last six are a workload's own training
# (harness.workload.step.adapters)
TARGET_NODES = ("model", "loss", "optimizer", "dataset", "step", "collate", "samples", "units", "lightning_module",
                "val_step")
OWN_TRAINING_NODES = TARGET_NODES[4:]  # absent (None), a spec hashes as it did before they existed
OPEN_NODES = TARGET_NODES + ("model_settings", "loss_settings", "dataset_settings", "val_dataset", "sizes")
# words only, and the axes' names (harness.config.axes): two specs that differ only here measure the same thing
NOT_HASHED_FIELDS = ("description", "input_axes")


@dataclass
class SizePreset:
    """Defaults a size fills in for settings left unset. ``width`` multiplies the model's channels."""

    batch_size: int = 2
    input_shape: Optional[List[int]] = None  # one sample, channels first; None: the workload's input_shape
    sequence: Optional[int] = None  # a token workload's sample: input_shape [1, sequence], axes [channel, sequence]
    warmup_steps: int = 3
    steps: int = 20
    epoch_steps: int = 10
    width: float = 1.0


@dataclass
class WorkloadSpec:
    """One workload as its config file composes it (the ``workload`` node of the settings)."""

    name: str = ""
    description: str = ""
    model: Any = None  # {_target_: pkg.module.Class, ARG: VALUE, ...}
    model_settings: Dict[str, str] = field(default_factory=dict)  # model argument <- harness setting
    loss: Any = None  # None: cross-entropy (class, segmentation) or mean squared error (regression)
    loss_settings: Dict[str, str] = field(default_factory=dict)
    optimizer: Any = None  # {_target_: torch.optim.X, _partial_: true, lr: ...}, called with the parameters
    dataset: Any = None  # {_target_: ..., _partial_: true}: the user's own data, called with no arguments
    dataset_settings: Dict[str, str] = field(default_factory=dict)  # dataset argument <- harness setting
    # the validation loader's dataset: ``dataset`` with these of its arguments changed (eval transforms, e.g.
    # {clahe: false}); empty: validation reads the training dataset's kind of items
    val_dataset: Dict[str, Any] = field(default_factory=dict)
    synthetic: str = "tensors"  # the generated samples when no dataset is given (SYNTHETIC_KINDS)
    input_shape: Optional[List[int]] = None  # one sample, channels first; set here, it is every size's
    # the name of each side of input_shape (harness.config.axes): channel, then spatial sides or one sequence;
    # None: a size's `sequence` says [channel, sequence], else the volume form [channel, spatial, ...]
    input_axes: Optional[List[str]] = None
    target: str = "class"  # TARGET_KINDS
    target_shape: Optional[List[int]] = None  # regression only; None: [num_classes]
    num_classes: int = 2
    unit: str = "samples"  # what units_per_s counts: voxels, images, tokens, ...
    # a number, "spatial": the product of the sample's spatial sides, or "sequence": its length (a language model's
    # tokens: a size's `sequence: length`, one channel of token ids)
    units_per_sample: Any = 1
    checkpoint_units: List[str] = field(default_factory=list)  # module classes wrapped by activation checkpointing
    patch_multiple: int = 1  # every spatial side must be a multiple of this (downsampling depth)
    min_side: int = 1  # smallest spatial side the network accepts
    sizes: Dict[str, SizePreset] = field(default_factory=dict)
    source_sha: str = ""  # filled when resolved: the user's source files the targets live in
    # a workload's own training (harness.workload.step.adapters), each a ``_target_`` node:
    # ``step(model, batch) -> loss``
    # (partial); the loader's collate_fn (partial); ``samples(batch)`` and ``units(batch)`` (partials) where batches
    # vary; a LightningModule (its training_step, configure_optimizers and train_dataloader), instead of ``model``;
    # ``val_step(model, batch) -> loss`` (partial), the validation pass's step (``harness.workload.step.validation``)
    step: Any = None
    collate: Any = None
    samples: Any = None
    units: Any = None
    lightning_module: Any = None
    val_step: Any = None

    def sample_shape(self, size: str = "full") -> list[int]:
        preset = self.sizes.get(size)
        shape = self.input_shape or (preset.input_shape if preset else None)
        if not shape and preset is not None and preset.sequence is not None:
            shape = [1, preset.sequence]
        return list(shape or [])

    @property
    def named_axes(self) -> bool:
        """Whether the workload names its axes (``input_axes``, or a size's ``sequence``), not the volume form."""
        return self.input_axes is not None or any(p.sequence is not None for p in self.sizes.values())

    @property
    def axes(self) -> list[str]:
        """The name of each side of a sample: ``[channel, sequence]``, ``[channel, spatial, spatial, spatial]``..."""
        if self.input_axes is not None:
            return list(self.input_axes)
        if self.named_axes:
            return [axes_mod.CHANNEL, axes_mod.SEQUENCE]
        return axes_mod.volume_axes(max(len(self.sample_shape()) - 1, 0))

    @property
    def own_training(self) -> bool:
        """Whether the workload trains through its own step (a step, a LightningModule), not loss_fn(model(x), y);
        a Hugging Face model is found only once built."""
        return self.step is not None or self.lightning_module is not None

    @property
    def model_node(self) -> Any:
        """The node the model is built from: the LightningModule's, or ``model``."""
        return self.lightning_module if self.lightning_module is not None else self.model

    @property
    def in_channels(self) -> int:
        return self.sample_shape()[0]

    @property
    def spatial_dims(self) -> int:
        return len(self.sample_shape()) - 1

    @property
    def deep_supervision(self) -> bool:
        return "model.deep_supervision" in self.model_settings.values()

    @property
    def mednext_options(self) -> bool:
        return "model.mednext_size" in self.model_settings.values()

    def units_in(self, patch_size: tuple[int, ...]) -> int:
        """Units (voxels, images, tokens, ...) in one sample of this spatial size (a sequence: its length)."""
        if self.named_axes and self.units_per_sample in axes_mod.COUNTED:
            return axes_mod.count(self.axes, patch_size, self.units_per_sample)
        if self.units_per_sample == "sequence":
            return int(patch_size[-1])
        if self.units_per_sample != "spatial":
            return int(self.units_per_sample)
        n = 1
        for s in patch_size:
            n *= s
        return n

    def hashed(self) -> dict[str, Any]:
        """What config_hash covers of a workload that is not a built-in as shipped."""
        values = dataclasses.asdict(self)
        for name in NOT_HASHED_FIELDS:
            values.pop(name)
        for name in ("dataset_settings", "val_dataset", *OWN_TRAINING_NODES):  # added later: absent, a spec
            if not values[name]:  # hashes as it did before
                values.pop(name)
        for preset in values["sizes"].values():  # a size's sequence: L hashes as its input_shape [1, L]
            length = preset.pop("sequence")
            if length is not None and preset["input_shape"] is None:
                preset["input_shape"] = [1, length]
        return values

    def for_validation(self) -> WorkloadSpec:
        """This workload as the validation loader builds its data: ``dataset`` with ``val_dataset``'s arguments
        changed (a copy; the same spec when there is nothing to change)."""
        if not self.val_dataset or self.dataset is None:
            return self
        return dataclasses.replace(self, dataset={**self.dataset, **copy.deepcopy(self.val_dataset)}, val_dataset={})


def parse_spec(values: dict[str, Any]) -> WorkloadSpec:
    """A WorkloadSpec from a plain mapping, rejecting unknown fields by name."""
    names = [f.name for f in dataclasses.fields(WorkloadSpec)]
    unknown = [k for k in values if k not in names]
    if unknown:
        raise unknown_choice("workload field", unknown[0], names)
    values = dict(values)
    for name in OWN_TRAINING_NODES:  # custom.yaml's {_target_: null} placeholders: left out
        node = values.get(name)
        if isinstance(node, dict) and not target_of(node) and set(node) <= {"_target_", "_partial_"}:
            values[name] = None
    sizes = values.pop("sizes", None) or {}
    spec = WorkloadSpec(**{k: copy.deepcopy(v) for k, v in values.items()})
    spec.sizes = {str(name): _size(name, preset) for name, preset in sizes.items()}
    for key in ("input_shape", "target_shape"):
        if getattr(spec, key) is not None:
            setattr(spec, key, [int(v) for v in getattr(spec, key)])
    spec.model_settings = dict(spec.model_settings or {})
    spec.loss_settings = dict(spec.loss_settings or {})
    spec.dataset_settings = dict(spec.dataset_settings or {})
    spec.val_dataset = dict(spec.val_dataset or {})
    spec.checkpoint_units = list(spec.checkpoint_units or [])
    spec.input_axes = [str(a) for a in spec.input_axes] if spec.input_axes is not None else None
    return spec


def _size(name: str, preset: Any) -> SizePreset:
    if isinstance(preset, SizePreset):
        return copy.deepcopy(preset)
    names = [f.name for f in dataclasses.fields(SizePreset)]
    unknown = [k for k in preset if k not in names]
    if unknown:
        raise unknown_choice(f"field of workload size {name!r}:", unknown[0], names)
    out = SizePreset(**preset)
    out.input_shape = [int(v) for v in out.input_shape] if out.input_shape is not None else None
    out.sequence = int(out.sequence) if out.sequence is not None else None
    out.width = float(out.width)
    return out


def available() -> list[str]:
    """The workloads shipped in conf/workload/ (``custom`` among them); listed anew when the folder changes (a
    cached sweep asks hundreds of times: one glob each cost ~0.5 ms)."""
    try:
        stamp = WORKLOAD_DIR.stat().st_mtime_ns
    except OSError:
        stamp = None
    if stamp is None or _LISTED.get("stamp") != stamp:
        _LISTED.update(stamp=stamp, names=sorted(p.stem for p in WORKLOAD_DIR.glob("*.yaml")))
    return list(_LISTED["names"])


_LISTED: dict[str, Any] = {}


@functools.lru_cache(maxsize=None)
def _builtin(name: str) -> WorkloadSpec:
    """The shipped workload ``name``, a name the caller found in :func:`available`."""
    return parse_spec(yaml.safe_load((WORKLOAD_DIR / f"{name}.yaml").read_text()))


def builtin(name: str) -> WorkloadSpec:
    """The shipped workload ``name`` (a fresh copy; did-you-mean ValueError for an unknown name)."""
    check_choice("workload", name, available())
    return copy.deepcopy(_builtin(name))


def shape_from_data(spec: WorkloadSpec) -> bool:
    """Whether the workload leaves its input shape to its own dataset: it gives a dataset and no input_shape (at the
    top or in any size), and does not hand the dataset the patch size (which the shape would decide)."""
    return (spec.dataset is not None and not any(spec.sample_shape(n) for n in [*spec.sizes, "full"])
            and "data.patch_size" not in spec.dataset_settings.values())


def is_builtin(spec: WorkloadSpec) -> bool:
    """Whether ``spec`` is a shipped workload exactly as shipped (its name alone then says what it measures)."""
    if spec.name not in available():
        return False
    return spec.hashed() == _shipped_hashed(spec.name, spec.source_sha)


@functools.lru_cache(maxsize=64)
def _shipped_hashed(name: str, source_sha: str) -> dict[str, Any]:
    """What config_hash would cover of the shipped ``name`` with ``source_sha`` (only compared, never changed)."""
    return dataclasses.replace(_builtin(name), source_sha=source_sha).hashed()

