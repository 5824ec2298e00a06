"""scripts/gpu_measure.sh: valid bash, every part fits a 10-minute command, output packed under $OUT (no GPU)."""

import os
import re
import subprocess
import sys
import tarfile

import pytest

from harness.sweeps import ladder as ladder_mod
from harness.store import load_runs
from tests.conftest import REPO

SCRIPT = REPO / "scripts" / "gpu_measure.sh"
COMMAND_LIMIT_S = 600  # a lent GPU machine's limit per command
RUNG_PARTS = {"resnet50": "resnet50_aggressive", "detr": "detr_fast", "a100": "a100_volume"}


def script(*args, **env):
    full_env = {k: v for k, v in os.environ.items() if k not in ("OUT", "DRY_RUN", "PYTHON", "RESULTS_FROM")}
    full_env.update(env)
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=full_env, timeout=300)


def all_parts() -> list[str]:
    parts = []
    for word in script("list").stdout.split():
        if m := re.fullmatch(r"(\w+)-(\d+)\.\.(\d+)", word):
            parts += [f"{m[1]}-{i}" for i in range(int(m[2]), int(m[3]) + 1)]
        else:
            parts.append(word)
    return parts


def test_script_is_valid_bash():
    result = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_rung_parts_cover_every_rung_of_their_ladder_and_no_more():
    parts = all_parts()
    for prefix, name in RUNG_PARTS.items():
        rungs = len(ladder_mod.load(name).rungs)
        assert [p for p in parts if p.startswith(prefix + "-") and p[len(prefix) + 1:].isdigit()] == \
            [f"{prefix}-{i}" for i in range(rungs)]
        assert script(f"{prefix}-{rungs}", "/tmp/unused", DRY_RUN="1").returncode == 2


@pytest.mark.parametrize("part", ["env", "runs-unet3d", "runs-basic_unet3d", "runs-mednext", "runs-resnet50", "phase2",
                                  "scaling", "resnet50-3", "detr-7", "a100-diagnose", "a100-0", "tests",
                                  "tests-slow"])
def test_dry_run_prints_commands_that_fit_one_command_under_out(part, tmp_path):
    out = tmp_path / "out"
    result = script(part, DRY_RUN="1", OUT=str(out))
    assert result.returncode == 0, result.stderr
    commands = [line[2:] for line in result.stdout.splitlines() if line.startswith("+ ")]
    assert commands[-1] == f"tar -czf {out}/{part}.tar.gz -C {out}/{part} ."
    assert not out.exists()  # a dry run writes nothing
    harness_cmds = [c for c in commands if c.startswith("python3 ")]
    assert harness_cmds, "the default interpreter is python3"
    for c in harness_cmds:
        if "results_dir=" in c:
            assert f"results_dir={out}/{part}/results" in c
    # every run's timeout, times the runs the part makes, stays under the command limit
    runs = {"phase2": len(ladder_mod.load("phase2").rungs), "scaling": len(ladder_mod.load("scaling").rungs),
            "a100-diagnose": 3}
    limits = [float(t) for c in harness_cmds for t in re.findall(r"timeout_s=(\d+)", c)]
    if not part.startswith(("env", "tests")):
        assert limits and sum(limits) * (runs.get(part, 1)) < COMMAND_LIMIT_S - 60, (part, limits)


def test_python_override_and_usage_errors(tmp_path):
    result = script("runs-unet3d", str(tmp_path / "o"), DRY_RUN="1", PYTHON="/opt/venv/bin/python")
    assert result.returncode == 0 and "+ /opt/venv/bin/python -m harness run workload=unet3d" in result.stdout
    assert script("runs-unet3d", DRY_RUN="1").returncode == 2  # no OUT_DIR and no $OUT
    bad = script("resnet", str(tmp_path), DRY_RUN="1")
    assert bad.returncode == 2 and "unknown part 'resnet'" in bad.stderr
    assert script().returncode == 2


def test_a_failing_part_exits_non_zero_and_still_packs_its_log(tmp_path):
    out = tmp_path / "out"
    result = script("runs-unet3d", str(out), PYTHON="false")
    assert result.returncode == 1, result.stdout + result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["runs-unet3d.tar.gz"]
    with tarfile.open(out / "runs-unet3d.tar.gz") as tar:
        log = tar.extractfile("./runs-unet3d.log").read().decode()
    assert "exit 1: false -m harness run workload=unet3d precision=32" in log


@pytest.mark.slow  # two real commands with a measured run: ~2 minutes on 2 busy cores
def test_one_rung_per_command_makes_one_sweep_across_commands(tmp_path):
    """Rung 0 of resnet50_aggressive for real (smoke size on this CPU), then the TF32 rung in a second command
    seeded with the first one's records: both land in the sweep resnet50_aggressive-gpu."""
    py = sys.executable
    first = script("resnet50-0", str(tmp_path / "a"), PYTHON=py)
    assert first.returncode == 0, first.stdout + first.stderr
    packed = tmp_path / "a" / "resnet50-0.tar.gz"
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["resnet50-0.tar.gz"]
    second = script("resnet50-5", str(tmp_path / "b"), PYTHON=py, RESULTS_FROM=str(packed))
    assert second.returncode == 0, second.stdout + second.stderr  # skipped (TF32 needs a GPU) is not a failure
    merged = tmp_path / "merged"
    with tarfile.open(tmp_path / "b" / "resnet50-5.tar.gz") as tar:
        names = tar.getnames()
        tar.extractall(merged, filter="data")
    assert "./table.md" in names and "./resnet50-5.log" in names
    runs = load_runs(merged / "results").sort_values("rung")
    assert list(runs["sweep_id"]) == ["resnet50_aggressive-gpu"] * 2
    assert list(runs["rung"]) == [0, 5] and list(runs["status"]) == ["ok", "skipped"]
    assert "tf32=true needs a CUDA GPU" in runs["error"].iloc[1]
