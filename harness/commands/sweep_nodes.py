"""``python -m harness sweep +ladder=NAME nodes=M dist.master_addr=HOST dist.master_port=P dist.node_rank=R``: one
sweep across M nodes, the same command started once on each (``harness.sweeps.nodes``).

Node 0 runs the sweep (its store, its cache, its table) and tells the others each run it measures; node R > 0 checks
its sweep is node 0's, prepares what its rungs read, then runs what it is told and stores nothing. Ports: the
channel at P, the runs at P+1 .. P+32 (``nodes.RUN_PORTS``).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable

from rich.markup import escape

from harness import config as config_mod
from harness.commands.console import console, refuse
from harness.commands.progress import RunProgress
from harness.run.parent import env as env_mod, rendezvous, runner
from harness.store import new_id
from harness.sweeps import nodes
from harness.sweeps import rungs as sweep_mod
from harness.workload import datasets, preflight


def main(plan, run_sweep: Callable[..., int]) -> int:
    """Resolve where the nodes meet, open the channel (node 0 serves it), then drive or follow. ``plan``: the sweep
    command's checked ``SweepPlan``; ``run_sweep(plan, sweep_id=, driver=)``: its sweep, which node 0 runs."""
    try:
        parsed = config_mod.from_dict(plan.settings)
        meet = rendezvous.of(parsed, os.environ)
    except ValueError as exc:
        return refuse(exc)
    plan = dataclasses.replace(plan, settings=nodes.with_rendezvous(plan.settings, meet))
    role = "drives the sweep and stores its records" if meet.node_rank == 0 else "follows node 0's sweep"
    console.print(f"{meet.describe()}: this node {role}")
    try:
        channel = nodes.Channel(meet, parsed.dist.rdzv_timeout_s)
    except nodes.Lost as exc:
        what = (f"node 0 cannot serve the sweep's channel at port {meet.master_port} (take another "
                "dist.master_port)" if meet.node_rank == 0 else
                f"start the same sweep on node 0 within dist.rdzv_timeout_s={parsed.dist.rdzv_timeout_s:g}")
        return refuse(f"{exc}: {what}")
    if meet.node_rank == 0:
        return _drive(plan, channel, run_sweep)
    return _follow(plan, channel)


def _drive(plan, channel: nodes.Channel, run_sweep: Callable[..., int]) -> int:
    channel.set("hello", nodes.hello(plan.ladder.name, plan.overrides))
    driver = nodes.Driver(channel, plan.ladder.cap_workers_at_cpus)
    code, text = 1, "node 0's sweep was interrupted"
    try:
        code = run_sweep(plan, sweep_id=new_id(f"{plan.ladder.name}-"), driver=driver)
        code, text = max(code, 1) if driver.stopped else code, ""
    finally:
        missing = driver.end(code, text, interrupted=bool(text))
        if missing:
            console.print(f"[yellow]note:[/] {escape(missing)} when told the sweep ended")
    return code


def _follow(plan, channel: nodes.Channel) -> int:
    node = channel.meet.node_rank
    ctx = sweep_mod.SweepContext(sweep_id="", ladder=plan.ladder, settings=plan.settings, user_keys=plan.user_keys)
    try:  # what every rung reads is built here before node 0 asks for a run (no run waits on a dataset)
        machine = runner.Machine.detect()
        for cfg in sweep_mod.preflight(ctx, machine):
            preflight.check_model_builds(cfg)
    except (ValueError, OSError) as exc:
        nodes.leave(channel, f"node {node} refused the sweep: {exc}")
        return refuse(exc)
    try:
        return nodes.follow(channel, nodes.hello(plan.ladder.name, plan.overrides), _Runs(node, ctx.results_dir),
                            console.print)
    except ValueError as exc:
        return refuse(exc)
    except nodes.Lost as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}: node 0 stopped or cannot be reached; node {node} stops "
                      "here (it stores nothing)", soft_wrap=True)  # one line, however long the reason
        return 1
    except (KeyboardInterrupt, _Failed) as exc:
        nodes.leave(channel, f"node {node} stopped: {exc or 'interrupted'}")
        if isinstance(exc, KeyboardInterrupt):
            raise
        console.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
        return 1


class _Failed(Exception):
    """A run this node could not even start (node 0 is told, and stops the sweep)."""


class _Runs:
    """Node R's runs: each measured with node 0's (nothing stored here), one line each. A run's folders (its disk
    dataset, its caches) are this node's own ``results_dir``, built at its preflight; where it meets is node 0's."""

    def __init__(self, node: int, results_dir: str):
        self.node, self.results_dir, self.environments = node, results_dir, {}

    def __call__(self, run: nodes.Run) -> None:
        if not run.takes_part:
            console.print(f"{escape(run.label)}: on nodes 0-{run.cfg.nodes - 1}; node {self.node} waits")
            return
        cfg, device = dataclasses.replace(run.cfg, results_dir=self.results_dir), run.cfg.device
        try:
            datasets.prepare(cfg, console.print)
            if device not in self.environments:
                self.environments[device] = env_mod.environment(device)
            env, key = self.environments[device]
            with RunProgress(console, run.label) as progress:
                record = runner.run_and_store(cfg, env, key, progress.update)
        except (ValueError, OSError) as exc:
            raise _Failed(f"{run.label} could not start here: {exc}") from exc
        figure = f" {record.samples_per_s:.2f} samples/s" if record.status == "ok" and record.samples_per_s else ""
        console.print(f"{escape(run.label)}: {record.status}{figure} (node 0 stores the record)")
