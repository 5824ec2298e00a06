"""``python -m harness diagnose [+ladder=NAME] [overrides]``: measure the loader alone, the model alone and the
full step for the same settings, each in its own process, store the three records (as a sweep with
ladder ``diagnose``, so they can be tabled and plotted), and print the verdict. With ``+ladder=NAME`` the settings
are that ladder's baseline (rung 0, as a sweep of it would run it here), the overrides on top.
"""

from __future__ import annotations

import copy

from harness.commands import hydra_edge
from harness import config as config_mod
from harness.run import runner
from harness.store import new_id

PARTS = (("loader", "loader alone (no model)"), ("model", "model alone (one batch kept on the device)"),
         ("train", "full training step"))


def main(command: str, argv: list[str]) -> int:
    from harness.commands.sweep import split_ladder

    name, overrides = split_ladder(argv)
    return hydra_edge.hydra_app(overrides, lambda cfg: task(cfg, name, overrides))


def ladder_baseline(name: str, settings: dict, overrides: list[str]) -> config_mod.RunConfig:
    """The settings of ladder ``name``'s baseline on this machine, with the user's overrides winning (ValueError
    for an unknown ladder)."""
    from harness.sweeps import ladder as ladder_mod
    from harness.sweeps.rungs import SweepContext, rung_config

    lad = ladder_mod.load(name, settings.get("results_dir", "results"))
    given = set(map(hydra_edge.given_key, overrides))
    user_keys = {k for k in map(hydra_edge.override_key, overrides) if k} | ({"workload"} & given)
    ctx = SweepContext(sweep_id="", ladder=lad, settings=settings, user_keys=frozenset(user_keys))
    return rung_config(ctx, 0, runner.Machine.detect())


def task(cfg, ladder: str | None = None, overrides: list[str] = ()) -> int:
    from harness.analysis.diagnosis import diagnose
    from harness.commands.console import console
    from harness.commands.progress import RunProgress

    try:
        plain = hydra_edge.plain_settings(cfg)
        settings = ladder_baseline(ladder, plain, list(overrides)) if ladder else config_mod.from_dict(plain)
        if settings.measure.mode != "train":
            raise ValueError("measure.mode is set by diagnose itself (loader, model, train); remove it")
        base = runner.ready(settings, console.print)
    except (ValueError, OSError) as exc:
        console.print(f"[red]error:[/] {exc}")
        return 2
    env, key = runner.environment(base.device)
    diag_id = new_id("diagnose-")
    records = {}
    for rung, (mode, label) in enumerate(PARTS):
        part = copy.deepcopy(base)
        part.measure.mode = mode
        with RunProgress(console, f"[{rung + 1}/3] {label}") as progress:
            record = runner.run_and_store(part, env, key, progress.update, sweep_id=diag_id, ladder="diagnose",
                                          rung=rung, change=f"measure.mode={mode}", round=0)
        console.print(f"[{rung + 1}/3] {label}: {record.status}"
                      + (f", {record.samples_per_s / part.batch_size:.2f} batches/s" if record.status == "ok" else
                         f" {(record.error or '').strip().splitlines()[-1:]}"))
        records[mode] = {**record.__dict__, "batch_size": part.batch_size}
    result = diagnose(records["loader"], records["model"], records["train"], base.device, base.data.num_workers,
                      base.data.source == "disk" and base.data.cache == "none")
    console.print(f"\n[bold]{result.text}[/]")
    for line in result.advice:
        console.print(f"  next: {line}")
    console.print(f"stored as sweep {diag_id}: python -m harness table --results {base.results_dir} --sweep {diag_id}")
    return 0 if result.verdict != "unknown" else 1
