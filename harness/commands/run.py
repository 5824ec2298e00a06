"""``python -m harness run [key=value ...]``: one isolated run, a summary, one stored record."""

from __future__ import annotations

from pathlib import Path

from harness import config as config_mod
from harness.commands import hydra_edge


def main(command: str, argv: list[str]) -> int:
    return hydra_edge.hydra_app(argv, task)


def task(cfg) -> int:
    from harness.run import runner
    from harness.commands.console import console, run_summary
    from harness.commands.progress import RunProgress
    from harness.store import check_writable

    try:
        settings = config_mod.from_dict(hydra_edge.plain_settings(cfg))
        resolved = runner.resolve(settings, runner.Machine.detect())
        check_writable(resolved.results_dir)
    except (OSError, ValueError) as exc:
        console.print(f"[red]error:[/] {exc}")
        return 2
    if settings.size == "auto" or settings.device == "auto":
        console.print(f"device: {resolved.device}, size: {resolved.size}"
                      + ("  (no CUDA GPU here: running the small CPU size)" if resolved.device == "cpu" else ""))
    try:
        runner.prepare_data(resolved, console.print)
    except (OSError, ValueError) as exc:
        console.print(f"[red]error:[/] {exc}")
        return 2
    env, key = runner.environment(resolved.device)
    with RunProgress(console, resolved.workload.name) as progress:
        record = runner.run_and_store(resolved, env, key, progress.update)
    console.print(run_summary(record))
    path = Path(resolved.results_dir) / "runs" / f"{record.run_id}.parquet"
    if path.exists():
        console.print(f"stored in {path}")
    return 0 if record.status == "ok" else 1
