"""A sample's named axes: which sides of a workload's input shape are its channels, spatial sides or a sequence.

A workload says it in one of three ways (``harness.config.workload``), all the same sample:

* the volume form, as every workload was written before axes had names: ``input_shape: [C, D, H, W]`` (or
  ``[C, H, W]``, ``[C, L]``), channels first and every other side spatial;
* ``input_axes: [channel, sequence]`` beside ``input_shape: [1, L]`` (or ``[channel, spatial, spatial]``, ...): one
  name a side;
* a size's ``sequence: L`` instead of its ``input_shape``: one channel of ``L`` token ids, a token workload (an
  ``input_shape`` given beside it, at the top or in the size, wins: ``workload.sizes.smoke.input_shape=[1,64]`` on
  a shipped language model reads as it did before its sizes said ``sequence``).

``units_per_sample`` may name the axes it counts: ``spatial`` (the product of the spatial sides: voxels, pixels) or
``sequence`` (the sequence's length: tokens). The names change neither what is measured nor a config's hash; they
let the settings, the checks and the units read as the workload is.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from harness.registry import check_choice

CHANNEL, SPATIAL, SEQUENCE = "channel", "spatial", "sequence"
AXIS_NAMES = (CHANNEL, SPATIAL, SEQUENCE)
COUNTED = (SPATIAL, SEQUENCE)  # the axes units_per_sample may name
_FORM = ("channel first, then one or more spatial sides or one sequence, e.g. [channel, sequence] or "
         "[channel, spatial, spatial, spatial]")


def volume_axes(sides: int) -> list[str]:
    """The volume form's axes: a channel axis, then ``sides`` spatial ones."""
    return [CHANNEL] + [SPATIAL] * sides


def count(axes: Sequence[str], sides: Sequence[int], kind: str) -> int:
    """Units in a sample of these ``sides`` (the shape after its channel) along the axes named ``kind``."""
    return math.prod(int(s) for a, s in zip(axes[1:], sides) if a == kind)


def name_units(spec: Any) -> None:
    """A workload that names a sequence and counts it (``units_per_sample: sequence``) but leaves ``unit`` at
    ``samples`` counts tokens: its throughput reads tokens/s, as its axes say (the volume form keeps what it says)."""
    if spec.named_axes and spec.units_per_sample == SEQUENCE and spec.unit == "samples":
        spec.unit = "tokens"


def check(spec: Any) -> None:
    """A ``WorkloadSpec``'s axis names, its sizes' ``sequence``, and ``units_per_sample`` against the axes it names
    (ValueError naming the bad value and the valid choices). Typed Any: the spec's module imports this one."""
    if spec.input_axes is not None:
        _check_names(list(spec.input_axes))
    for name, preset in spec.sizes.items():
        if preset.sequence is None:  # an input_shape beside it wins (an override spelt as before axes had names)
            continue
        if preset.sequence < 1:
            raise ValueError(f"workload size {name!r}: sequence={preset.sequence} must be a positive whole number")
        if spec.input_axes is not None and list(spec.input_axes) != [CHANNEL, SEQUENCE]:
            raise ValueError(f"workload size {name!r} gives sequence={preset.sequence}, but workload.input_axes="
                             f"{list(spec.input_axes)} names no sequence: use input_axes [channel, sequence]")
    if spec.named_axes:
        _check_lengths(spec)
        _check_units(spec)


def _check_names(axes: list[str]) -> None:
    for axis in axes:
        check_choice("axis in workload.input_axes", axis, AXIS_NAMES)
    rest = axes[1:]
    if not rest or axes[0] != CHANNEL or CHANNEL in rest or (SEQUENCE in rest and rest != [SEQUENCE]):
        raise ValueError(f"workload.input_axes={axes} is not valid: {_FORM}")


def _check_lengths(spec: Any) -> None:
    """One name a side, in every size's shape."""
    for name in spec.sizes:
        shape = spec.sample_shape(name)
        if shape and len(shape) != len(spec.axes):
            raise ValueError(f"workload.input_axes={spec.axes} names {len(spec.axes)} axes, but the input shape "
                             f"{shape} of workload {spec.name!r} (size {name}) has {len(shape)} sides: give one name a "
                             "side")


def _check_units(spec: Any) -> None:
    units = spec.units_per_sample
    if units in COUNTED and units not in spec.axes:
        valid = [k for k in COUNTED if k in spec.axes]
        raise ValueError(f"workload.units_per_sample={units} counts {units} axes; workload {spec.name!r} has none "
                         f"(its axes: {', '.join(spec.axes)}): valid choices: {', '.join(valid)} or a positive "
                         "whole number")
