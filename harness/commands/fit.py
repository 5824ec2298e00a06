"""``python -m harness fit``: the largest batch that fits, and the speed at each size that does.

    python -m harness fit [key=value ...] [fit.axis=batch|patch|sequence] [fit.max=N] [fit.min=1] [memory.limit_gb=GIB]
                          [sweep.repeats=N]

Doubles ``batch_size`` from ``fit.min`` until a run ends ``oom`` or passes ``fit.max``, then bisects between the
largest size that ran and the smallest that did not: O(log n) runs, each in a fresh process (an in-process finder
carries the allocator's state of the sizes it tried into the training). With ``memory.limit_gb`` every run is
capped at that much device memory: the largest batch on the guide's card, found on a bigger one. Then the sizes
that fit are written as a ladder (``<results_dir>/ladders/fit-...yaml``) and measured as a sweep with the usual
rounds (``sweep.repeats``; the first round is the search's own runs). The output is the curve: samples/s with its
95% band and peak memory at each size, the largest that fits and the fastest. On a CPU no allocator can be capped:
the search runs to ``fit.max`` (8 unless given) and the memory is the host's peak. Run again, a fit resumes: the
sizes it tried and the rounds it measured are taken from the store (``<results_dir>/fits/``).

``fit.axis=patch`` searches ``data.patch_size`` instead (a 3D workload's; the batch stays): sides in steps of the
workload's ``patch_multiple`` (at least 8), the start's aspect kept; ``fit.min``/``fit.max`` are the patch's smallest
side in voxels, and the curve gives voxels/s beside samples/s (docs/memory.md). ``fit.axis=sequence`` searches a
language model's sequence length (``data.patch_size=[L]``, token batches) in steps of 64 tokens, the batch kept; the
curve gives tokens/s (docs/lm.md).
"""

from __future__ import annotations

from harness import shell
from harness.commands import hydra_edge
from harness import config as config_mod
from harness.commands.console import console, refuse
from harness.commands.progress import run_by_run_display
from harness.commands.sweep import RungLines
from harness.fit.session import run_fit


def main(command: str, argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__.strip())
        return 0
    return hydra_edge.hydra_app(argv, lambda cfg: task(cfg, argv))


def task(cfg, argv: list[str] | None = None) -> int:
    """One Hydra job: the composed config as plain settings, fitted with the console's display."""
    try:
        options, settings = hydra_edge.fit_settings(cfg), hydra_edge.plain_settings(cfg)
        config_mod.validate_one_node(int(settings.get("nodes", 1)), "fit")
    except ValueError as exc:
        return refuse(exc)
    given = shell.without(argv or [], ["fit", "fit."])  # the words its printed commands are made of
    return run_fit(settings, options, run_by_run_display(), RungLines(console), given)
