"""The headline: the GPU truth worth most, in one command of at most 9 minutes on an H100 or H200, the install of the
carried wheels included, so that any slot a GPU machine is lent for starts with it.

    0. every module the harness imports, imported (scripts/gpu_wheels.py check: a wheel not carried is named at
       once, not as a ladder's error);
    1. ``python -m harness sweep +ladder=phase2`` at full size, as the README's command runs it (every run forked
       from the warm launcher, ``sweep.repeats=auto``), within a ``sweep.budget_min`` that leaves room for the rest
       (its sweep id is the sweep's own: the command takes none). Its store is seeded with the records committed
       under results/<gpu>/runs/, so that a second slot at the same commit on the same kind of machine takes the
       rounds measured there (as `harness sweep` takes every round measured in its environment) and measures more
       only while a verdict is undecided;
    2. a short ``compile=default tf32=true`` run (ResNet-50 at smoke size): it guards every costly compile and TF32
       part of the campaign;
    3. a two-rung sweep forked from the warm launcher (``+ladder=bf16`` on ResNet-50 at smoke size, TF32 on);
    4. the environment (python, torch, CUDA, nvidia-smi).

Every record written must end ``ok``. What comes back: ``$OUT/headline.tar.gz`` (records, log, table, stamp) and
``$OUT/headline.md`` (phase2's table), two files. The estimate (``estimate``) is made of the run times recorded on
the H100 (results/h100/runs/): one phase2 round, and the compile run; what no record times is an allowance, said so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from math import floor
from pathlib import Path

from harness import api

REPO = Path(__file__).resolve().parent.parent

LIMIT_S = 540  # the headline's command, install included (a command's limit is 600 s: room for start and return)
INSTALL_S = 30  # allowance: pip installs the carried wheels from .whl/ (no index, no compile)
ENV_S = 5  # allowance: python -c and nvidia-smi
WHEELS_CHECK_S = 5  # allowance: importing every module the harness imports, once
PACK_S = 15  # allowance: the check, the table and the tarball
WHEELS = ".whl"
INSTALL = (f"python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site {WHEELS}/*.whl && "
           "export PYTHONPATH=/tmp/site:$PWD")
RUN_TIMEOUT_S = 240  # each run's limit (a phase2 run took ~35 s on the H100, the compile run ~65 s)
RECORDED_ON = "h100"  # the one GPU kind with recorded run times so far
PHASE2 = ("+ladder=phase2",)
COMPILE_RUN = ("workload=resnet50", "size=smoke", "compile=default", "tf32=true")
FORKED = ("+ladder=bf16", "workload=resnet50", "size=smoke", "tf32=true", "sweep.repeats=1", "sweep.rerun=true")


@dataclass(frozen=True)
class Estimate:
    """The headline's seconds by step, from recorded run times where there are some."""

    source: str  # where the recorded times come from
    round_s: float  # one phase2 round at full size
    compile_run_s: float
    smoke_run_s: float  # the compile run without its compile

    @property
    def forked_s(self) -> float:
        return 2 * self.smoke_run_s

    @property
    def budget_s(self) -> int:
        """What phase2's sweep may take: the command's limit less everything else, in whole tenths of a minute."""
        rest = INSTALL_S + WHEELS_CHECK_S + self.compile_run_s + self.forked_s + ENV_S + PACK_S
        return int(floor((LIMIT_S - rest) / 6) * 6)

    @property
    def total_s(self) -> int:
        return round(INSTALL_S + WHEELS_CHECK_S + self.budget_s + self.compile_run_s + self.forked_s + ENV_S + PACK_S)

    def lines(self) -> list[str]:
        rounds = int(self.budget_s // self.round_s)
        return [
            f"  install the carried wheels ({WHEELS}/): {INSTALL_S} s, then import what the harness imports: "
            f"{WHEELS_CHECK_S} s (allowances)",
            f"  phase2, sweep.repeats=auto within sweep.budget_min={self.budget_s / 60:g}: {self.budget_s} s at most; "
            f"a round took {self.round_s:.0f} s ({self.source}), so {rounds} rounds fit, another when forked "
            "rounds go quicker",
            f"  compile=default tf32=true run (resnet50, smoke): {self.compile_run_s:.0f} s ({self.source})",
            f"  two-rung forked sweep (bf16, resnet50 smoke, tf32): {self.forked_s:.0f} s (2 x the compile run "
            "less its compile)",
            f"  env {ENV_S} s, check, table and tarball {PACK_S} s (allowances)",
        ]


def estimate(gpu: str) -> Estimate:
    """The headline's estimate from the run times recorded for ``gpu`` (the H100's where it has none)."""
    import pandas as pd

    for kind in dict.fromkeys((gpu, RECORDED_ON)):
        folder = REPO / "results" / kind / "runs"
        if not folder.is_dir():
            continue
        runs = api.load_runs(folder.parent, columns=["timestamp", "sweep_id", "ladder", "round", "workload", "size",
                                                  "compile_s", "status"])
        runs["at"] = pd.to_datetime(runs["timestamp"], utc=True)
        round_s, (compile_run_s, compile_s) = phase2_round_s(runs), compile_run(runs)
        if round_s and compile_run_s:
            source = f"recorded on the {kind.upper()}" + ("" if kind == gpu else f"; no {gpu.upper()} record yet")
            return Estimate(source, round_s, compile_run_s, compile_run_s - compile_s)
    raise ValueError(f"no recorded phase2 sweep and compile run under results/{gpu}/ or results/{RECORDED_ON}/")


def phase2_round_s(runs) -> float:
    """Seconds a round of the newest recorded phase2 sweep of several rounds (else the newest) took: from the
    sweep's start (its id's time) to its last record, over its rounds. The newest: the code measured changes."""
    ok = runs[(runs["ladder"] == "phase2") & (runs["status"] == "ok")]
    if ok.empty:
        return 0.0
    sweeps = ok.groupby("sweep_id").agg(rounds=("round", "nunique"), last=("at", "max"))
    several = sweeps[sweeps["rounds"] >= 2]
    sweep = (several if len(several) else sweeps)["last"].idxmax()
    mine = ok[ok["sweep_id"] == sweep]
    started = sweep_start(sweep) or mine["at"].min().to_pydatetime()
    return (mine["at"].max().to_pydatetime() - started).total_seconds() / mine["round"].nunique()


def sweep_start(sweep_id: str) -> datetime | None:
    """The start a sweep id of `harness sweep` carries (``LADDER-YYYYMMDD-HHMMSSffffff-...``), in UTC."""
    from datetime import timezone

    found = re.search(r"-(\d{8}-\d{12})-", sweep_id)
    return datetime.strptime(found[1], "%Y%m%d-%H%M%S%f").replace(tzinfo=timezone.utc) if found else None


def compile_run(runs) -> tuple[float, float]:
    """(seconds the newest recorded compile run at smoke size took: from the record before it, its compile
    seconds)."""
    runs = runs.sort_values("at").reset_index(drop=True)
    hits = runs.index[(runs["compile_s"].fillna(0) > 0) & (runs["size"] == "smoke") & (runs["status"] == "ok")]
    for i in reversed(hits):
        if i > 0:
            return (runs["at"][i] - runs["at"][i - 1]).total_seconds(), float(runs["compile_s"][i])
    return 0.0, 0.0


def commands(py: str, results: Path, est: Estimate) -> list[list[str]]:
    """The headline's measuring commands, in order."""
    common = [f"results_dir={results}", f"timeout_s={RUN_TIMEOUT_S}"]
    return [
        [py, "scripts/gpu_wheels.py", "check"],
        [py, "-m", "harness", "sweep", *PHASE2, f"sweep.budget_min={est.budget_s / 60:g}", *common],
        [py, "-m", "harness", "run", *COMPILE_RUN, *common],
        [py, "-m", "harness", "sweep", *FORKED, *common],  # a sweep of its own each time: it is measured again
        [py, "-c", "import torch, sys; print(sys.version); print(torch.__version__, torch.version.cuda, "
         "torch.cuda.is_available() and torch.cuda.get_device_name(0))"],
        ["nvidia-smi"],
    ]


def measured_commit() -> str:
    """The commit measured: $GIT_COMMIT (a GPU copy without git), else this checkout's HEAD ("" if unknown)."""
    import os

    return os.environ.get("GIT_COMMIT") or api.git_state(REPO)[0]


def one_command(gpu: str) -> str:
    """The one command a slot is given (from the repository root, the wheels carried in .whl/)."""
    at = measured_commit() or "unknown"
    return f"{INSTALL} && GIT_COMMIT={at} GPU={gpu} bash scripts/gpu_measure.sh headline"


def summary(gpu: str) -> list[str]:
    """The dry run's head: the one command, and its estimate step by step."""
    est = estimate(gpu)
    return [f"# headline on {gpu}: ~{est.total_s} s by estimate, within the {LIMIT_S} s "
            f"({LIMIT_S // 60} minutes) it may take",
            *("#" + line[1:] for line in est.lines()),
            f"# from the repository root, with {WHEELS}/ carried (the wheels the machine's image lacks):",
            one_command(gpu)]
