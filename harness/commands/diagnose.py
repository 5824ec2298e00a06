"""``python -m harness diagnose [+ladder=NAME] [overrides]``: measure the loader alone, the model alone and the
full step for the same settings, each in its own process (forked from one warm launcher, as a sweep's runs), store
the three records (as a sweep with ladder ``diagnose``, so they can be tabled and plotted), and print the verdict,
with the complete commands to try next (the same overrides and ``--config-dir`` as given). With ``+ladder=NAME`` the
settings are that ladder's baseline (rung 0, as a sweep of it would run it here), the overrides on top.
"""

from __future__ import annotations

import copy

from rich.markup import escape

from harness import config as config_mod
from harness import shell
from harness.commands import exit_codes, hydra_edge
from harness.run.parent import launcher, runner
from harness.store import new_id
from harness.commands.sweep import split_ladder
from harness.config import ladder as ladder_mod
from harness.sweeps.rungs import SweepContext, rung_config
from harness.analysis.views.diagnosis import LADDER, DataKnobs, diagnose
from harness.commands.console import console, refuse
from harness.commands.progress import RunProgress
from harness.session import runner as session_runner

PARTS = (("loader", "loader alone (no model)"), ("model", "model alone (one batch kept on the device)"),
         ("train", "full training step"))


def main(command: str, argv: list[str]) -> int:
    name, overrides = split_ladder(argv)
    return hydra_edge.hydra_app(overrides, lambda cfg: task(cfg, name, overrides))


def ladder_baseline(name: str, settings: dict, overrides: list[str]) -> config_mod.RunConfig:
    """The settings of ladder ``name``'s baseline on this machine, with the user's overrides winning (ValueError
    for an unknown ladder)."""
    lad = ladder_mod.load(name, settings.get("results_dir", "results"))
    given = set(map(shell.given_key, overrides))
    user_keys = {k for k in map(hydra_edge.override_key, overrides) if k} | ({"workload"} & given)
    ctx = SweepContext(sweep_id="", ladder=lad, settings=settings, user_keys=frozenset(user_keys))
    return rung_config(ctx, 0, runner.Machine.detect())


def task(cfg, ladder: str | None = None, overrides: list[str] = ()) -> int:
    try:
        plain = hydra_edge.plain_settings(cfg)
        settings = ladder_baseline(ladder, plain, list(overrides)) if ladder else config_mod.from_dict(plain)
        if settings.measure.mode != "train":
            raise ValueError("measure.mode is set by diagnose itself (loader, model, train); remove it")
    except (ValueError, OSError) as exc:
        return refuse(exc)
    with session_runner.launcher_for(settings) as session:  # one launcher, as a sweep's
        try:
            prepared = session_runner.prepare(settings, "`python -m harness diagnose`", console.print)
        except (ValueError, OSError) as exc:
            return refuse(exc)
        base, diag_id = prepared.resolved, new_id("diagnose-")
        records = measure_parts(session, base, prepared.environment, diag_id)
    given = list(overrides)
    result = diagnose(records["loader"], records["model"], records["train"], base.device, base.data.num_workers,
                      _disk_uncached(base), data_knobs(base), NextCommands(given, base),
                      again=shell.command("diagnose", *([f"+ladder={ladder}"] if ladder else []),
                                          *shell.without(given, ["measure.steps"]),
                                          f"measure.steps={2 * base.measure.steps}"))
    for note in result.notes:
        console.print(f"[yellow]note:[/] {escape(note)}", soft_wrap=True)
    console.print(f"\n[bold]{result.text}[/]")
    for line in result.advice:
        console.print(f"  next: {line}", soft_wrap=True, markup=False)
    console.print("stored as sweep " + diag_id + ": " + shell.command("table", "--results", base.results_dir,
                                                                       "--sweep", diag_id),
                  soft_wrap=True, markup=False)
    return exit_codes.BUSY if result.verdict == "busy" else 0 if result.verdict != "unknown" else exit_codes.FAILED


def measure_parts(session: launcher.Session | None, base: config_mod.RunConfig, environment: tuple[dict, str],
                  diag_id: str) -> dict[str, dict]:
    """The three parts measured and stored in turn (rungs 0-2 of sweep ``diag_id``, ladder ``diagnose``), each
    forked from ``session``'s launcher (None: fresh interpreters, several devices or nodes); their records by
    mode."""
    env, key = environment
    parts = []
    for mode, _ in PARTS:
        part = copy.deepcopy(base)
        part.measure.mode = mode
        parts.append(part)
    if session is not None:  # told the full step's settings, as a sweep its first run's: it imports what that run
        session.begin(config_mod.to_dict(parts[-1]))  # builds, the optimizer's imports too, which two of three make
    records = {}
    for rung, ((mode, label), part) in enumerate(zip(PARTS, parts)):
        with RunProgress(console, f"[{rung + 1}/3] {label}") as progress:
            record = runner.run_and_store(part, env, key, progress.update, sweep_id=diag_id, ladder=LADDER,
                                          rung=rung, change=f"measure.mode={mode}", round=0)
        console.print(f"[{rung + 1}/3] {label}: {record.status}"
                      + (f", {record.samples_per_s / part.batch_size:.2f} batches/s" if record.status == "ok" else
                         f" {(record.error or '').strip().splitlines()[-1:]}"))
        records[mode] = {**record.__dict__, "batch_size": part.batch_size}
    return records


class NextCommands:
    """The complete command lines ``diagnose`` suggests: the words it was given (config folders included), with
    the workload named (a ladder's own must not replace it) and without what the suggested ladder varies."""

    def __init__(self, given: list[str], base: config_mod.RunConfig):
        self.given = shell.without(given, ["measure.mode"])
        if not any(shell.given_key(w) == "workload" for w in self.given):
            self.given = [f"workload={base.workload.name}"] + self.given
        self.results_dir = base.results_dir
        self.config_dirs = hydra_edge.config_dirs(hydra_edge.with_config_dirs(self.given))

    def __call__(self, command: str, *words: str) -> str:
        ladder = next((w.split("=", 1)[1] for w in words if w.startswith("+ladder=")), None)
        varied: set[str] = set()
        if ladder is not None:
            varied = ladder_mod.load(ladder, self.results_dir, self.config_dirs).varied_keys()
        return shell.command(command, *words, *shell.without(self.given, varied))


def data_knobs(cfg: config_mod.RunConfig):
    """The augmentation switches that are on and act on the data these settings load (none on a workload's own
    dataset or on random tensors), as the overrides that turn them down."""
    spec = cfg.workload
    if spec.dataset is not None or spec.synthetic in ("tensors", "tokens"):
        return DataKnobs(own_dataset=spec.dataset is not None)
    from harness.workload.data import augment_switches  # torch: the parent of a measuring command never loads it

    switches = augment_switches(cfg)
    lighter = ["data.augment=light"] if cfg.data.augment == "heavy" else []
    lighter += [f"data.{name}=false" for name, dims in (("rotate", 3), ("elastic", 3), ("mixup", 2))
                if switches[name] and spec.spatial_dims == dims]
    return DataKnobs(lighter=tuple(lighter))


def _disk_uncached(cfg: config_mod.RunConfig) -> bool:
    """Files decoded again for every item: data.cache=ram would decode them once (built-in pipelines only)."""
    return cfg.workload.dataset is None and cfg.data.source == "disk" and cfg.data.cache == "none"
