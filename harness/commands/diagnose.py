"""``python -m harness diagnose [overrides]``: measure the loader alone, the model alone and the full
step for the same settings, each in its own process, store the three records (as a sweep with
ladder ``diagnose``, so they can be tabled and plotted), and print the verdict.
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
    return hydra_edge.hydra_app(argv, task)


def task(cfg) -> int:
    from harness.analysis.diagnosis import diagnose
    from harness.commands.console import console
    from harness.commands.progress import RunProgress

    try:
        settings = config_mod.from_dict(hydra_edge.plain_settings(cfg))
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
            record = runner.run_and_store(part, env, key, progress.update, sweep_id=diag_id, ladder="diagnose", rung=rung,
                                          change=f"measure.mode={mode}", round=0)
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
