"""`scripts/gpu_measure.sh headline`: the one command a GPU slot starts with, its estimate from the H100's recorded
run times, and the whole driver run on this CPU with a faked device (a fake interpreter that answers the harness's
measuring commands with records, and a fake nvidia-smi)."""

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from harness.store import load_runs
from scripts import gpu_headline, gpu_parts
from tests.conftest import REPO

SCRIPT = REPO / "scripts" / "gpu_measure.sh"
RETURN_LIMIT_BYTES = 16 * 2**20  # what a slot brings back: files of at most 16 MiB,
RETURN_MAX_FILES, RETURN_MAX_DEPTH = 8, 2  # at most 8 of them, at most 2 folders down,
RETURN_NAME = re.compile(r"[A-Za-z0-9._-]+")  # named with letters, digits, '.', '_' and '-' only
ENV_KEYS = ("OUT", "DRY_RUN", "PYTHON", "DRIVER_PYTHON", "RESULTS_FROM", "SCRATCH", "GPU", "PLAN_DIR", "IN", "KEEP",
            "TIMEOUT_S", "GIT_COMMIT")

# The faked device's interpreter: `-m harness sweep|run` write ok records (FAKE_STATUS for the compile run) into
# their results_dir, as the measuring commands would; everything else runs for real.
FAKE_PYTHON = '''#!{python}
import os, sys, time
args = sys.argv[1:]
if args[:2] == ["-m", "harness"] and args[2] in ("sweep", "run"):
    from harness.store import RunRecord, write_record
    settings = dict(a.split("=", 1) for a in args[3:] if "=" in a)
    ladder = settings.get("+ladder", "")
    rungs = {{"phase2": 4, "bf16": 2}}.get(ladder, 1)
    status = os.environ.get("FAKE_STATUS", "ok") if args[2] == "run" else "ok"
    for rung in range(rungs):
        run_id = time.strftime("%Y%m%d-%H%M%S-") + f"{{time.time_ns() % 10**9:09d}}"
        write_record(RunRecord(run_id=run_id, status=status, timestamp="2026-11-27T10:00:00Z", workload="unet3d",
                               ladder=ladder, rung=rung if ladder else None, round=0, size="full", device="cuda",
                               gpu_name="NVIDIA H100 80GB HBM3", gpu_count=1, cpu_model="faked", cpu_count=16,
                               sweep_id=f"{{ladder}}-20261127-{{os.getpid()}}", samples_per_s=50.0 + rung,
                               error="" if status == "ok" else "tf32=true needs a CUDA GPU"),
                     settings["results_dir"])
    print(f"faked {{args[2]}} {{ladder}}: {{rungs}} record(s) {{status}}")
    sys.exit(0)
os.execv({python!r}, [{python!r}, *args])
'''
FAKE_NVIDIA_SMI = '''#!/bin/sh
case "$*" in *query-gpu*) echo "NVIDIA H100 80GB HBM3" ;; *) echo "| NVIDIA H100 80GB HBM3 | faked |" ;; esac
'''


def script(*args, **env):
    full_env = {k: v for k, v in os.environ.items() if k not in ENV_KEYS}
    full_env.update({"PYTHON": sys.executable, "PYTHONPATH": str(REPO), **env})
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=full_env, timeout=300)


def faked_device(tmp_path: Path) -> dict[str, str]:
    """The environment of a faked GPU machine: its interpreter and its nvidia-smi."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(FAKE_PYTHON.format(python=sys.executable))
    (bin_dir / "nvidia-smi").write_text(FAKE_NVIDIA_SMI)
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHON": str(bin_dir / "python3"),
            "DRIVER_PYTHON": sys.executable, "GIT_COMMIT": "c0ffee" * 6 + "abcd", "PLAN_DIR": str(tmp_path / "plan")}


def returned_files(out: Path) -> list[Path]:
    """What a slot would bring back from ``out``, checked against its limits."""
    files = [p for p in out.rglob("*") if p.is_file()]
    assert 0 < len(files) <= RETURN_MAX_FILES, files
    for path in files:
        rel = path.relative_to(out)
        assert len(rel.parts) - 1 <= RETURN_MAX_DEPTH and all(RETURN_NAME.fullmatch(n) for n in rel.parts), rel
        assert path.stat().st_size <= RETURN_LIMIT_BYTES, rel
    return files


@pytest.mark.slow  # a whole scenario in fresh processes: the default tier keeps its cheaper siblings
def test_the_headline_on_a_faked_device_returns_its_records_and_table_within_a_slot_s_limits(tmp_path):
    out = tmp_path / "out"
    result = script("headline", OUT=str(out), SCRATCH=str(tmp_path / "scratch"), **faked_device(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "headline: ok, 7 new records" in result.stdout
    assert sorted(p.name for p in returned_files(out)) == ["headline.md", "headline.tar.gz"]
    table = (out / "headline.md").read_text()
    assert re.search(r"### sweep phase2-20261127-\d+: ladder phase2", table) and "| 0 | (baseline)" in table
    with tarfile.open(out / "headline.tar.gz") as tar:
        names = tar.getnames()
        stamp = json.load(tar.extractfile("./stamp.json"))
        log = tar.extractfile("./headline.log").read().decode()
        tar.extractall(tmp_path / "back", filter="data")
    assert stamp["status"] == "ok" and stamp["part"] == "headline" and stamp["gpu"] == "h100"
    assert stamp["commit"].startswith("c0ffee") and len(stamp["records"]) == 4 + 1 + 2
    assert "./table.md" in names and not any(n.endswith("before.txt") for n in names)
    runs = load_runs(tmp_path / "back" / "results")
    assert sorted(runs.groupby("ladder").size().items()) == [("", 1), ("bf16", 2), ("phase2", 4)]
    # the steps in order: the wheels' imports; phase2 as the README runs it, within its budget; the compile + TF32
    # run; the forked two-rung sweep; env; then the strict check
    steps = [line for line in log.splitlines() if line.startswith("+ ")]
    assert steps.pop(0).endswith("scripts/gpu_wheels.py check") and "every module the harness imports is here" in log
    budget_min = gpu_headline.estimate("h100").budget_s / 60  # what the H100's records leave for phase2
    assert f"-m harness sweep +ladder=phase2 sweep.budget_min={budget_min:g} results_dir=" in steps[0]
    assert "-m harness run workload=resnet50 size=smoke compile=default tf32=true" in steps[1]
    assert "-m harness sweep +ladder=bf16 workload=resnet50 size=smoke tf32=true sweep.repeats=1" in steps[2]
    assert steps[4] == "+ nvidia-smi" and steps[5].endswith("before.txt strict")
    assert steps[6].endswith("before.txt phase2 > " + str(tmp_path / "scratch" / "pack" / "headline" / "table.md"))
    assert "NVIDIA H100 80GB HBM3 | faked" in log


def test_the_headline_s_strict_check_fails_a_record_that_is_not_ok(tmp_path, capsys):
    """The compile + TF32 run skipped (as it is on a CPU) fails the headline: on its GPU it must run."""
    from harness.store import RunRecord, write_record
    from scripts import gpu_part

    results = tmp_path / "results"
    write_record(RunRecord(run_id="20261127-100000-a", status="skipped", timestamp="", workload="resnet50",
                           error="tf32=true needs a CUDA GPU (TF32 is a tensor-core format)"), results)
    before = tmp_path / "before.txt"
    before.write_text("")
    assert gpu_part.check(str(results), str(before)) == 0  # a campaign part: a knob that cannot act here
    assert gpu_part.check(str(results), str(before), strict=True) == 1
    assert "FAILS THE PART: ended skipped, not ok" in capsys.readouterr().out
    assert gpu_part.main(["check", str(results), str(before), "strict"]) == 1


def test_the_dry_run_prints_the_one_command_and_its_estimate_from_the_h100_s_records():
    result = script("headline", DRY_RUN="1", GPU="h100", GIT_COMMIT="abc123")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    head = re.fullmatch(r"# headline on h100: ~(\d+) s by estimate, within the 540 s \(9 minutes\) it may take",
                        lines[0])
    assert head and int(head[1]) <= 540
    command = next(line for line in lines if not line.startswith(("#", "+")))
    assert command == (f"{gpu_headline.INSTALL} && GIT_COMMIT=abc123 GPU=h100 bash scripts/gpu_measure.sh headline")
    assert "a round took 112 s (recorded on the H100), so 3 rounds fit" in result.stdout
    assert "install the carried wheels (.whl/): 30 s, then import what the harness imports: 5 s" in result.stdout


def test_the_estimate_is_made_of_the_h100_s_recorded_run_times():
    est = gpu_headline.estimate("h100")
    # the newest phase2 of several rounds (2026-11-27's headline, two rounds; 2026-11-22's had three, at 139 s a
    # round): its sweep began 23:57:60.0, its last record 224 s later, 112 s a round
    assert est.round_s == pytest.approx(112.0, abs=0.5)
    # the newest compile run (ResNet-50 smoke, compile=default, TF32): 56 s after the run before it, 34.3 s of it
    # compiling
    assert est.compile_run_s == pytest.approx(56.0) and est.smoke_run_s == pytest.approx(56.0 - 34.32, abs=0.01)
    assert est.budget_s == 384 and est.total_s <= gpu_headline.LIMIT_S
    assert gpu_headline.estimate("b200").source == "recorded on the H100; no B200 record yet"
    # the H200's own, from its newest slot (2026-11-30): three rounds of phase2 in 168 s, the compile run 55 s
    h200 = gpu_headline.estimate("h200")
    assert h200.source == "recorded on the H200" and h200.round_s == pytest.approx(56.0, abs=0.5)
    assert h200.compile_run_s == pytest.approx(55.0)
    assert gpu_parts.find("headline").estimate_s == est.total_s


def test_a_sweep_s_start_is_read_from_its_id():
    start = gpu_headline.sweep_start("phase2-20261122-091425948891-586da8f8")
    assert start.isoformat() == "2026-11-22T09:14:25.948891+00:00"
    assert gpu_headline.sweep_start("phase2-h100-c0ffeec0") is None


def test_the_carried_wheels_cover_every_module_the_harness_and_the_models_import(monkeypatch):
    from scripts import gpu_wheels

    imported = gpu_wheels.imported_modules()
    assert gpu_wheels.uncovered(imported) == []
    assert imported["soundfile"] == ["harness_models/speech.py"]  # the SEResNet stand-in: soundfile (cffi, pycparser)
    assert {"cffi", "pycparser"} <= set(gpu_wheels.CARRIED)
    # the analysis' and the ladders' reader's: the H100's image had them (its check imported them, none carried)
    assert {"scipy", "yaml"} <= set(gpu_wheels.IMAGE)
    assert set(gpu_wheels.IMAGE).isdisjoint(gpu_wheels.CARRIED)
    assert gpu_wheels.uncovered(["soundfile", "librosa"]) == ["librosa"]  # what nobody carries is named
    monkeypatch.delitem(gpu_wheels.CARRIED, "cffi")
    assert gpu_wheels.uncovered(["soundfile"]) == ["cffi"]  # what a wheel imports itself: --no-deps installs none
