"""Moving a batch of any shape to the device, leaf by leaf: what a workload's own step (``workload.step``, a
LightningModule, a Hugging Face model) is handed. The default step's ``(input, target)`` pair keeps its own two
``.to`` calls in the loop.

The rule is Lightning's (``lightning_utilities.apply_to_collection`` as ``move_data_to_device`` uses it), written
out here in a few lines so that the harness needs no Lightning: an object with ``.to`` is moved by its own ``.to``
(a tensor, a Hugging Face ``BatchEncoding``, a torch_geometric ``Data``); then mappings, named tuples, lists and
tuples, and dataclasses are rebuilt around their moved values; numbers, strings and None stay as they are. PyTorch's
``torch.utils._pytree`` was the other candidate: it walks tuples, lists and dicts, but a dataclass or an object with
``.to`` is a leaf to it unless registered beforehand, which a user's batch type never is. Anything else (a NumPy
array, an image object) cannot move: :class:`BatchLeafError` names where it is in the batch and what it is.

The kind of each type is decided once and kept (``_KINDS``): per leaf, a step costs a dictionary look-up and the
move itself, as Lightning's does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Callable

import torch

STAYS = (str, bytes, int, float, complex, bool, type(None))  # host values a step reads as they are
_KINDS: dict[type, str] = {}


class BatchLeafError(TypeError):
    """A leaf of a batch that cannot move to the device (an `error` record: the loader made it)."""


def kind_of(value: Any) -> str:
    """How a value of this type moves: tensor, to (its own ``.to``), mapping, namedtuple, sequence, dataclass, stays,
    or stuck (it cannot move)."""
    cls = type(value)
    kind = _KINDS.get(cls)
    if kind is None:
        kind = _KINDS[cls] = _decide_kind(value)
    return kind


def _decide_kind(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return "tensor"
    if callable(getattr(value, "to", None)) and not isinstance(value, type):
        return "to"
    if isinstance(value, Mapping):
        return "mapping"
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return "namedtuple"
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return "sequence"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return "dataclass"
    if isinstance(value, STAYS):
        return "stays"
    return "stuck"


def batch_mover(device: torch.device, non_blocking: bool = False,
                channels_last: bool = False) -> Callable[[Any], Any]:
    """A function that moves a batch to ``device``: every tensor with ``non_blocking`` (the ``data.non_blocking``
    knob; a copy overlaps only from pinned memory, ``data.pin_memory``), and with ``channels_last`` every floating
    4-D tensor in ``torch.channels_last`` and 5-D one in ``torch.channels_last_3d`` (the knob's batch half)."""

    def tensor(t: torch.Tensor) -> torch.Tensor:
        if channels_last and t.is_floating_point() and t.dim() in (4, 5):
            fmt = torch.channels_last if t.dim() == 4 else torch.channels_last_3d
            return t.to(device, non_blocking=non_blocking, memory_format=fmt)
        return t.to(device, non_blocking=non_blocking)

    def move(value: Any) -> Any:
        kind = kind_of(value)
        if kind == "tensor":
            return tensor(value)
        if kind == "sequence":
            moved = [move(v) for v in value]
            return moved if type(value) is list else (tuple(moved) if type(value) is tuple else type(value)(moved))
        if kind == "mapping":
            moved = {k: move(v) for k, v in value.items()}
            return moved if type(value) is dict else _rebuilt(value, moved)
        if kind == "stays":
            return value
        if kind == "to":
            out = value.to(device)
            return value if out is None else out  # a .to that moves in place and returns nothing
        if kind == "namedtuple":
            return type(value)(*(move(v) for v in value))
        if kind == "dataclass":
            return dataclasses.replace(value, **{f.name: move(getattr(value, f.name))
                                                 for f in dataclasses.fields(value) if f.init})
        raise BatchLeafError(stuck_leaf_message(value))

    def move_batch(batch: Any) -> Any:
        try:
            return move(batch)
        except BatchLeafError as exc:
            raise BatchLeafError(stuck_leaf_message(batch, root=True) or str(exc)) from None

    return move_batch


def _rebuilt(value: Mapping, moved: dict) -> Mapping:
    try:
        return type(value)(moved)
    except TypeError:  # a mapping type that cannot be made from a dict (a defaultdict's factory): a plain dict
        return moved


def stuck_leaf_message(batch: Any, root: bool = False) -> str:
    """Where in ``batch`` the first leaf that cannot move is, and what it is ("" when there is none)."""
    found = _first_stuck(batch, "batch") if root else ("batch", batch)
    if found is None:
        return ""
    where, leaf = found
    what = type(leaf).__module__ + "." + type(leaf).__qualname__
    what = what.removeprefix("builtins.")
    shape = f" of shape {list(leaf.shape)}" if hasattr(leaf, "shape") else ""
    return (f"{where} is a {what}{shape}, which cannot move to the device: a batch's leaves must be tensors (in "
            "tuples, lists, dicts or dataclasses) or objects with .to(device); numbers, strings and None stay on the "
            "host. Convert it in the dataset or the collate function (torch.as_tensor)")


def _first_stuck(value: Any, where: str) -> tuple[str, Any] | None:
    kind = kind_of(value)
    if kind == "stuck":
        return where, value
    if kind in ("sequence", "namedtuple"):
        items = enumerate(value)
    elif kind == "mapping":
        items = value.items()
    elif kind == "dataclass":
        return next(filter(None, (_first_stuck(getattr(value, f.name), f"{where}.{f.name}")
                                  for f in dataclasses.fields(value))), None)
    else:
        return None
    return next(filter(None, (_first_stuck(v, f"{where}[{k!r}]") for k, v in items)), None)


def float_leaves(batch: Any, dims: tuple[int, ...] = (4, 5)) -> list[torch.Tensor]:
    """The batch's floating tensors of ``dims`` dimensions (what channels_last can lay out)."""
    kind = kind_of(batch)
    if kind == "tensor":
        return [batch] if batch.is_floating_point() and batch.dim() in dims else []
    if kind in ("sequence", "namedtuple"):
        values = list(batch)
    elif kind == "mapping":
        values = list(batch.values())
    elif kind == "dataclass":
        values = [getattr(batch, f.name) for f in dataclasses.fields(batch)]
    else:
        return []
    return [t for v in values for t in float_leaves(v, dims)]


def describe(batch: Any, limit: int = 6) -> str:
    """The batch's tensors as ``where [shape] dtype``, for a message (the first ``limit``)."""
    out: list[str] = []

    def walk(value: Any, where: str) -> None:
        kind = kind_of(value)
        if kind == "tensor":
            out.append(f"{where} [{', '.join(map(str, value.shape))}] {str(value.dtype).removeprefix('torch.')}")
        elif kind in ("sequence", "namedtuple"):
            for i, v in enumerate(value):
                walk(v, f"{where}[{i}]")
        elif kind == "mapping":
            for k, v in value.items():
                walk(v, f"{where}[{k!r}]")
        elif kind == "dataclass":
            for f in dataclasses.fields(value):
                walk(getattr(value, f.name), f"{where}.{f.name}")

    walk(batch, "batch")
    return ", ".join(out[:limit]) + (f" and {len(out) - limit} more" if len(out) > limit else "")
