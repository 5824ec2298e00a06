"""A workload's own dataset looked at in the parent, before any child starts: its first item.

* **input_shape.** A workload that gives its own dataset and no ``input_shape`` takes the shape of its first item's
  input (``config.resolution`` asks :func:`input_shape`): a tensor item's shape, the first element of a tuple or
  list item (an ``(input, target)`` pair, a detection sample), the input of a dict item (``input_ids``,
  ``pixel_values``, ... or its first tensor); a 1-D input (token ids of length L) is ``[1, L]``.
* **The default step's batch.** That item collated as the loader will collate it (``workload.collate``, else
  PyTorch's default), as meta tensors, tells the parent's step check what the default step would be handed
  (``harness.workload.step.on_meta``): a dict, or a list that is no ``(input, target)`` pair, is refused there.

The dataset is built once per process for one node and its arguments; torch is imported only to collate.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

from harness.config.targets import setting_args
from harness.names import target_of

INPUT_KEYS = ("input_ids", "pixel_values", "input_values", "inputs", "input", "image", "images", "x")
_ITEMS: dict[str, Any] = {}  # the first item of each dataset this process built, by what built it


def input_shape(cfg) -> list[int]:
    """The ``input_shape`` of ``cfg``'s workload read from its dataset's first item (ValueError naming the dataset
    when it cannot be built or its item has no input with a shape); said once, on stderr."""
    spec = cfg.workload
    what = f"workload.dataset._target_={target_of(spec.dataset)!r}"
    fix = "set workload.input_shape=[C, ...] (one sample, channels first)"
    try:
        item = first_item(cfg, setting_args(spec.dataset_settings, cfg))
    except Exception as exc:
        if isinstance(exc, ValueError) and str(exc).startswith(("_target_", "workload.")):
            raise  # a target that cannot be found: already one line naming it
        lines = str(exc).strip().splitlines()
        raise ValueError(f"{what}: its first item cannot be read to find the input shape ({type(exc).__name__}: "
                         f"{lines[0][:160] if lines else ''}); {fix}") from None
    shape = shape_of(item)
    if shape is None:
        raise ValueError(f"{what}: its first item ({type(item).__name__}) has no input tensor to read the input shape "
                         f"from; {fix}")
    key = json.dumps([spec.name, spec.dataset, shape], sort_keys=True, default=str)
    if key not in _SAID:
        _SAID.add(key)
        print(f"note: workload {spec.name!r}: input_shape {shape} read from its dataset's first item (set "
              "workload.input_shape to give another)", file=sys.stderr)
    return shape


_SAID: set[str] = set()


def shape_of(item: Any) -> list[int] | None:
    """The input shape of one dataset item, channels first (None when it has no input with a shape)."""
    x = item
    if isinstance(item, Mapping):
        x = next((item[k] for k in INPUT_KEYS if k in item), None)
        if x is None:
            x = next((v for v in item.values() if getattr(v, "shape", None) is not None), None)
    elif isinstance(item, (tuple, list)):
        x = item[0] if item else None
    shape = getattr(x, "shape", None)
    if shape is None or len(shape) == 0:
        return None
    dims = [int(s) for s in shape]
    return dims if len(dims) >= 2 else [1, *dims]


def first_item(cfg, args: dict[str, Any]) -> Any:
    """Item 0 of the workload's dataset, built with ``args``, the values of the settings it is handed
    (``setting_args``; kept for this process)."""
    from harness.workload.build import user_dataset  # torch: only for a workload with its own dataset

    spec = cfg.workload
    key = json.dumps([spec.dataset, args, spec.source_sha], sort_keys=True, default=str)
    if key not in _ITEMS:
        _ITEMS[key] = user_dataset(spec, args)[0]
    return _ITEMS[key]


def first_batch(cfg, args: dict[str, Any], collate) -> Any:
    """The first item (``args``: its dataset's, as :func:`first_item` takes them) as a batch of one, collated as
    the loader collates (``collate``: ``workload.collate``, looked up once, or None for PyTorch's default), as meta
    tensors of the same shapes and dtypes (None when it cannot be read: the child reports that, with its
    traceback)."""
    import torch.utils._pytree
    import torch.utils.data  # torch: only for a workload with its own dataset

    try:
        item = first_item(cfg, args)
        batch = (collate or torch.utils.data.default_collate)([item])
    except Exception:
        return None
    return torch.utils._pytree.tree_map(
        lambda v: torch.empty(v.shape, dtype=v.dtype, device="meta") if isinstance(v, torch.Tensor) else v, batch)
