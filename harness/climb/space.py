"""The climb's space: the settings it may change (axes), the values each tries, their order; ``climb.*``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, List, Optional

from harness.registry import unknown_choice


@dataclass
class ClimbConfig:
    """The ``climb.*`` settings (registered with Hydra at the edge, in ``harness.commands.hydra_edge``)."""

    budget_min: float = 30.0  # wall-clock minutes for the whole climb; no trial starts that would not finish
    repeats: int = 2  # runs per side (candidate and incumbent), interleaved, each a fresh process
    min_effect: float = 0.03  # an accepted change is at least this much faster (and faster beyond noise)
    knobs: Optional[List[str]] = None  # axis names to climb (None: every axis of the default space)


def check(cfg: ClimbConfig) -> None:
    """ValueError naming the bad ``climb.*`` value and what is valid."""
    if not (isinstance(cfg.budget_min, (int, float)) and cfg.budget_min > 0):
        raise ValueError(f"climb.budget_min={cfg.budget_min!r} must be a positive number of minutes")
    if not (isinstance(cfg.repeats, int) and cfg.repeats >= 1):
        raise ValueError(f"climb.repeats={cfg.repeats!r} must be a whole number >= 1 (runs per side)")
    if not (0 <= cfg.min_effect < 1):
        raise ValueError(f"climb.min_effect={cfg.min_effect!r} must be a fraction in [0, 1), e.g. 0.03 for 3%")
    for name in cfg.knobs or ():
        if name not in AXES_BY_NAME:
            raise unknown_choice("climb.knobs entry", name, AXES_BY_NAME)


@dataclass(frozen=True)
class Facts:
    """What the climb knows about where it runs."""

    device: str  # "cpu" or "cuda"
    usable_cpus: int
    # the largest batch_size that fits the incumbent's settings (fit's search, fresh processes; it may raise
    # BudgetSpent), or None: no search (a CPU, where nothing runs out of memory below fit.max), the batch doubles
    largest_batch: Optional[Callable[[dict], Optional[int]]] = None


@dataclass(frozen=True)
class Axis:
    """One setting the climb may change, the values it tries from an incumbent, and its expected gain."""

    name: str
    key: str
    gain_cpu: float  # expected speed-up (x), for the order: this repository's CPU measurements, or guesses
    gain_cuda: float  # the guides' claims (phase2: precision 2-3x, batch 1.3-1.5x, workers 1.5-2x, ...)
    values: Callable[[dict, Facts], list]  # candidate values from the incumbent's settings, best first
    ends_on_oom: bool = False
    fits_with: tuple[str, Any] | None = None  # a change that may make a value that ran out of memory fit

    def gain(self, device: str) -> float:
        return self.gain_cuda if device == "cuda" else self.gain_cpu


def _precision(s: dict, f: Facts) -> list:
    order = ("bf16-mixed", "16-mixed", "32") if f.device == "cuda" else ("bf16-mixed", "32")
    return [p for p in order if p != s["precision"]]


def _batch(s: dict, f: Facts) -> list:
    """x2; with a search for the largest batch that fits (a GPU): x2, x4, ... up to it, the largest itself, then
    the first doubling past it (it runs out of memory, and activation checkpointing may make it fit), unless
    checkpointing is on already."""
    now = int(s["batch_size"])
    largest = f.largest_batch(s) if f.largest_batch is not None else None
    if largest is None:
        return [2 * now]
    values, size = [], 2 * now
    while size <= largest:
        values, size = values + [size], 2 * size
    values += [largest] if largest > now and largest not in values else []
    return values + ([size] if s.get("activation_checkpointing") is not True else [])


def _compile(s: dict, f: Facts) -> list:
    modes = ("default", "max-autotune", "reduce-overhead", "off") if f.device == "cuda" else \
        ("default", "max-autotune", "off")
    return [m for m in modes if m != s["compile"] and not (m == "off" and s["compile"] == "off")]


def _workers(s: dict, f: Facts) -> list:
    now = int(s["data.num_workers"])
    more = min(max(1, 2 * now), f.usable_cpus)  # 0, 1, 2, 4, ... up to the CPUs this process may use
    return [more] if more > now else []


def _prefetch(s: dict, f: Facts) -> list:
    now = s["data.prefetch_factor"] or 2  # PyTorch's default with workers
    return [2 * now] if s["data.num_workers"] > 0 and 2 * now <= 16 else []


def _persistent(s: dict, f: Facts) -> list:
    return [True] if s["data.num_workers"] > 0 and not s["data.persistent_workers"] else []


def _switch_on(key: str) -> Callable[[dict, Facts], list]:
    def values(s: dict, f: Facts) -> list:
        return [] if s[key] is True else [True]

    return values


def _fused(s: dict, f: Facts) -> list:
    return [] if s["optimizer.fused"] is True or s["optimizer.foreach"] is True else [True]


AXES = (
    Axis("precision", "precision", 1.10, 2.0, _precision),
    Axis("batch", "batch_size", 1.05, 1.3, _batch, ends_on_oom=True,
         fits_with=("activation_checkpointing", True)),  # checkpointing: only to fit a larger batch
    Axis("compile", "compile", 1.05, 1.3, _compile),  # on a CPU a first compile also costs a minute or more
    Axis("channels_last", "channels_last", 1.15, 1.2, _switch_on("channels_last")),
    Axis("workers", "data.num_workers", 1.05, 1.5, _workers),
    Axis("tf32", "tf32", 1.0, 1.3, _switch_on("tf32")),
    Axis("cudnn_benchmark", "cudnn_benchmark", 1.0, 1.1, _switch_on("cudnn_benchmark")),
    Axis("fused_optimizer", "optimizer.fused", 1.02, 1.05, _fused),
    Axis("pin_memory", "data.pin_memory", 1.0, 1.05, _switch_on("data.pin_memory")),
    Axis("prefetch", "data.prefetch_factor", 1.01, 1.02, _prefetch),
    Axis("persistent_workers", "data.persistent_workers", 1.01, 1.02, _persistent),
)
AXES_BY_NAME = {a.name: a for a in AXES}


def space(device: str, knobs: list[str] | None = None) -> list[Axis]:
    """The axes to climb, by expected gain on this device (largest first; ties keep the table's order)."""
    chosen = [AXES_BY_NAME[n] for n in knobs] if knobs else list(AXES)
    return sorted(chosen, key=lambda a: -a.gain(device))
