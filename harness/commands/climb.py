"""``python -m harness climb``: find the fastest settings for this machine, keeping only what helps beyond noise.

    python -m harness climb [key=value ...] [climb.budget_min=30] [climb.repeats=2] [climb.min_effect=0.03]
                            [climb.knobs=[precision,batch,...]]

Greedy coordinate ascent from the given settings (``harness.climb``: ``ascent`` decides, ``trials`` measures).
Each candidate changes one setting of the incumbent and is measured against it in fresh processes,
``climb.repeats`` runs per side, interleaved (candidate, incumbent, incumbent, candidate, ...). Every run
is a record of one sweep with ladder ``climb``: the incumbent of step s is rung 2s-2, its candidate rung
2s-1, so ``table --sweep <climb id>`` shows each comparison as "x previous". Runs already in the store
for the same settings and environment are copied instead of measured (the oldest first, so a re-run
replays the climb and continues where it stopped). No run starts that the budget could not pay for.

At the end: the trajectory, the best settings as a ladder file under ``<results_dir>/ladders/`` (found
by ``sweep +ladder=NAME``), the best command line, and what an accepted change does to the training; every
command it prints carries the overrides and ``--config-dir`` it was given. Run again, a climb resumes: it says
what it takes from the store, and its budget is what is left of ``climb.budget_min`` (the time it spent is kept
in ``<results_dir>/climbs/``).
"""

from __future__ import annotations

import time

from harness import shell
from harness.climb.space import space
from harness.commands import hydra_edge
from harness.climb.session import run_climb
from harness import config as config_mod
from harness.commands.console import refuse
from harness.commands.progress import run_by_run_display
from harness.run.parent import launcher


def main(command: str, argv: list[str]) -> int:
    started = time.monotonic()  # the budget counts from here: start-up is part of the climb
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__.strip() + "\n\naxes (climb.knobs), in the order tried on a CPU:\n"
              + "\n".join(f"  {a.name:<19} {a.key}" for a in space("cpu")))
        return 0
    return hydra_edge.hydra_app(argv, lambda cfg: task(cfg, started, argv))


def task(cfg, started: float, argv: list[str] | None = None) -> int:
    """One Hydra job: the composed config as plain settings, climbed with the console's display."""
    display = run_by_run_display()
    try:
        options, settings = hydra_edge.climb_settings(cfg), hydra_edge.plain_settings(cfg)
        config_mod.validate_one_node(int(settings.get("nodes", 1)), "climb")
    except ValueError as exc:
        return refuse(exc)
    given = shell.without(argv or [], ["climb", "climb."])  # the words its printed commands are made of
    with launcher.warm():  # every run of the climb forked from one warm launcher, as a sweep's
        return run_climb(settings, options, started, display, given)
