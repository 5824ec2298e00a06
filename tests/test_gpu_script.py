"""The GPU campaign (scripts/gpu_measure.sh and its Python): every ladder is in parts that each fit one 10-minute
command, nothing but small tarballs goes under $OUT, `next` follows the plan, `record` updates it (no GPU)."""

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from harness.store import RunRecord, load_runs, store_copy, write_record
from scripts import gpu_campaign, gpu_pack, gpu_part, gpu_parts, gpu_plan
from tests.conftest import REPO

SCRIPT = REPO / "scripts" / "gpu_measure.sh"
COMMAND_LIMIT_S = 600  # a lent GPU machine's limit per command
ENV_KEYS = ("OUT", "DRY_RUN", "PYTHON", "DRIVER_PYTHON", "RESULTS_FROM", "SCRATCH", "GPU", "PLAN_DIR", "IN", "KEEP",
            "TIMEOUT_S", "LEASE_S")


def script(*args, **env):
    full_env = {k: v for k, v in os.environ.items() if k not in ENV_KEYS}
    full_env.update({"PYTHON": sys.executable, "PYTHONPATH": str(REPO), **env})
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=full_env, timeout=300)


def sections(text: str) -> dict[str, list[str]]:
    """A dry run's lines by part (each part's block starts with '# PART: ...')."""
    out, name = {}, None
    for line in text.splitlines():
        if m := re.match(r"# ([\w.+-]+): ", line):
            name = m[1]
            out[name] = []
        elif name:
            out[name].append(line)
    return out


def test_script_is_valid_bash():
    result = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_a_ladder_left_out_of_the_campaign_is_one_whose_honest_windows_would_not_fit_a_command():
    # resnet50_storage: windows of two waves of its workers (2 x workers steps) do not fit one command
    assert gpu_parts.measured_ladders() == [n for n in gpu_parts.ladder_names()
                                            if n not in ("resnet50_storage", "ddp_knobs", "fsdp_knobs")]
    assert not {p.ladder for p in gpu_parts.catalogue()} & set(gpu_parts.BEYOND_ONE_COMMAND)
    lad = gpu_parts._ladder("resnet50_storage")
    too_long = []
    for rung in range(len(lad.rungs)):
        settings = lad.settings(rung, "full")
        waves = 2 * int(settings["data.num_workers"])
        if gpu_parts.estimate_run_s({**settings, "measure.warmup_steps": 1, "measure.steps": waves}) > \
                gpu_parts.BATCH_BUDGET_S:
            too_long.append(rung)
    assert too_long == [6, 7]  # the compile rungs (the first wave's wait is not even counted)
    plan = gpu_plan.render({"gpu": "h100", "parts": {}})
    assert "Ladders no lent machine measures (a run needs more than one command's 10 minutes): " \
           "`resnet50_storage`: the ImageNet guide's FSx-bound start" in plan


@pytest.mark.parametrize("ladder", gpu_parts.measured_ladders())
def test_every_ladder_is_in_parts_that_measure_each_rung_once_a_round(ladder):
    lad = gpu_parts._ladder(ladder)
    rounds = [0] + (list(gpu_parts.REPEAT_ROUNDS) if lad.total_claim is not None else [])
    for round_ in rounds:
        parts = [p for p in gpu_parts.catalogue() if p.ladder == ladder and p.kind == "ladder"
                 and p.rounds == (round_,)]
        assert [r for p in parts for r in p.rungs] == list(range(len(lad.rungs))), (ladder, round_)
        assert all(p.kind == "ladder" and p.runs == len(p.rungs) for p in parts)


def test_every_part_fits_one_command_by_a_pessimistic_estimate():
    for part in gpu_parts.catalogue():
        budget = gpu_parts.PART_BUDGET_S if part.runs > 1 and part.kind == "ladder" else gpu_parts.BATCH_BUDGET_S
        assert 0 < part.estimate_s <= budget, (part.name, part.estimate_s)
        assert part.timeout_s + gpu_parts.PART_OVERHEAD_S < COMMAND_LIMIT_S - 30, part.name
        if part.kind == "ladder":  # each run's limit leaves it room over its estimate
            worst = max(gpu_parts.rung_estimates(part.ladder)[r] for r in part.rungs)
            assert part.timeout_s >= min(1.5 * worst, gpu_parts.RUN_TIMEOUT_CAP_S), part.name
    # pessimistic against what the H100 took: phase2 ~150 s, five noise runs ~150 s, the test tier 155 s
    assert gpu_parts.find("phase2").estimate_s >= 1.3 * 150 and gpu_parts.find("noise").estimate_s >= 1.3 * 150
    assert gpu_parts.find("tests").estimate_s >= 1.3 * 155


def test_a_rung_asking_for_more_gpus_than_the_machine_has_costs_nothing_and_is_not_built_on():
    phase4 = gpu_parts.rung_estimates("phase4")  # devices 2 and 4 are skipped: compile builds on one device
    assert phase4[1] == phase4[2] == gpu_parts.SKIP_S and phase4[3] > gpu_parts.COMPILE_S["reduce-overhead"]
    disk = gpu_parts.rung_estimates("a100_option_b")  # batch 4 with one worker, 0.43 s an item: > 103 s of waiting
    assert disk[1] > 60 * 4 * 0.43 > disk[2]


def gpu_premises_ladder(part: str) -> str:
    from scripts.gpu_premises import PREMISES

    return next(p.ladder for p in PREMISES if p.part == part)


def test_parts_come_in_priority_order():
    """The headline, each guide's premise check before its totals, one part per guide total, the memory ladders at
    their cap, the tests (before any compile ladder), the noise calibration (before the ladders it calibrates), then
    the ladders: guide totals', single knobs', more rounds, the harness's own."""
    parts = list(gpu_parts.catalogue())
    kinds = [p.kind for p in parts]
    totals = [p for p in parts if p.kind == "total"]
    memory = [p for p in parts if p.tier == gpu_parts.TIER_MEMORY]
    assert {p.ladder for p in memory} == {"connectomics_accumulate", "connectomics_checkpointing", "detr_test_batch"}
    assert kinds[:len(totals) + len(memory) + 7] == \
        ["headline"] + ["diagnose"] * 4 + ["total"] * len(totals) + ["ladder"] * len(memory) + ["tests", "noise"]
    names = [p.name for p in parts]
    # each guide's premise check before its totals (SEResNet's "Total Combined" is a group claim: before its ladder)
    for check, guide in (("a100-diagnose", "a100_"), ("detr-diagnose", "detr_"), ("seresnet-diagnose", "seresnet"),
                         ("phase2-diagnose", "connectomics_")):
        assert [p.args[0] for p in parts if p.name == check] == [f"+ladder={gpu_premises_ladder(check)}"]
        assert all(names.index(check) < i for i, p in enumerate(parts)
                   if p.ladder.startswith(guide) and p.kind in ("total", "ladder")), check
    with_total = [n for n in gpu_parts.measured_ladders() if gpu_parts._ladder(n).total_claim is not None]
    # every guide with a total has its part (phase2's is the headline), or a reason it has none
    assert sorted(p.ladder for p in totals) + sorted(gpu_parts.totals_beyond_one_command()) + ["phase2"] == \
        sorted(with_total, key=lambda n: (n not in {p.ladder for p in totals}, n == "phase2", n))
    assert [p.tier for p in parts] == sorted(p.tier for p in parts)
    first_compile = min(i for i, p in enumerate(parts) if p.kind == "ladder" and "compile" in p.what.lower())
    per_rung = min(i for i, p in enumerate(parts) if p.kind == "ladder" and p.tier != gpu_parts.TIER_MEMORY)
    assert kinds.index("tests") < first_compile and kinds.index("noise") < per_rung
    total = [i for i, p in enumerate(parts) if p.kind == "ladder" and p.rounds == (0,)
             and gpu_parts._ladder(p.ladder).total_claim is not None]
    knobs = [i for i, p in enumerate(parts) if p.kind == "ladder" and gpu_parts._ladder(p.ladder).total_claim is None
             and p.tier != gpu_parts.TIER_MEMORY]
    assert max(total) < min(knobs)  # every guide-total ladder before the single knobs (the memory ladders: first)
    for ladder in {p.ladder for p in parts if p.kind == "ladder"}:  # a ladder's parts in rung order, round by round
        mine = [(p.rounds, p.rungs) for p in parts if p.ladder == ladder and p.kind == "ladder"]
        assert mine == sorted(mine), ladder


def test_a_guide_total_s_part_measures_its_ends_in_abba_rounds_and_two_fit_one_command():
    factor = gpu_plan.correction(gpu_plan.load("h100"))[0]
    for part in (p for p in gpu_parts.catalogue() if p.kind == "total"):
        lad = gpu_parts._ladder(part.ladder)
        assert part.rungs == (0, len(lad.rungs) - 1) and part.runs == 2 * len(part.rounds)
        assert part.estimate_s <= gpu_parts.PART_BUDGET_S and 2 * factor * part.estimate_s <= gpu_parts.BATCH_BUDGET_S
        est = gpu_parts.rung_estimates(part.ladder)
        two = gpu_parts.PART_OVERHEAD_S + gpu_parts._dataset_s(part.ladder) + 2 * (est[0] + est[-1])
        assert len(part.rounds) >= 2 or two > gpu_parts.PART_BUDGET_S, part.name  # one round where two won't fit
    assert gpu_parts.total_rounds(100.0, 30.0) == 2 and gpu_parts.total_rounds(50.0, 30.0) == 4
    assert gpu_parts.total_rounds(300.0, 30.0) == 1 and gpu_parts.total_rounds(500.0, 30.0) == 0
    total = gpu_parts.find("total-a100_option_a")
    assert gpu_parts.sweep_id(total, "h100") == f"a100_option_a-total-h100-{gpu_parts.path_fingerprint(total)[:8]}"


def test_dry_run_of_every_part_prints_its_commands_and_keeps_data_out_of_out(tmp_path):
    out, scratch = tmp_path / "out", tmp_path / "scratch"
    result = script("dry-run", "all", OUT=str(out), SCRATCH=str(scratch), GPU="h100")
    assert result.returncode == 0, result.stderr
    printed = sections(result.stdout)
    assert list(printed) == [p.name for p in gpu_parts.catalogue()]
    assert not out.exists() and not scratch.exists()  # a dry run writes nothing
    for part in gpu_parts.catalogue():
        commands = [line[2:] for line in printed[part.name] if line.startswith("+ ")]
        assert len(commands) >= 2, part.name
        assert commands[-1] == f"tar -czf {out}/{part.name}.tar.gz -C {scratch}/pack/{part.name} ."
        for command in commands[:-1]:
            # nothing is written under $OUT but the tarball: no results folder, no dataset cache, no test report
            assert str(out) not in command, (part.name, command)
            for where in re.findall(r"(?:results_dir=|cache_dir=|--results |--junitxml=)(\S+)", command):
                assert where.startswith(str(scratch)), (part.name, command)
        if part.kind == "ladder":
            assert commands[0].startswith(f"{sys.executable} scripts/gpu_part.py ladder {part.ladder} ")
            # one sweep per ladder, GPU and commit, whichever part, command or slot measures its rounds
            assert f" {part.ladder}-h100-{gpu_parts.path_fingerprint(part)[:8]} " in commands[0]
            assert f"timeout_s={part.timeout_s}" in commands[0]


def test_a_dry_run_with_the_machines_lease_starts_only_the_parts_that_fit_and_says_which_it_left(tmp_path):
    (tmp_path / "plan.json").write_text(json.dumps({"gpu": "h100", "parts": {}}))  # no correction: the estimates
    first, second = gpu_parts.find("a100-diagnose"), gpu_parts.find("total-a100_option_a")
    lease = 420
    assert first.estimate_s <= lease - gpu_campaign.LEASE_MARGIN_S < first.estimate_s + second.estimate_s
    result = script("dry-run", "a100-diagnose", "total-a100_option_a", GPU="h100", PLAN_DIR=str(tmp_path),
                    LEASE_S=str(lease))
    assert result.returncode == 0, result.stderr
    assert list(sections(result.stdout)) == ["a100-diagnose"]
    assert result.stdout.splitlines()[-1] == (
        "not started, the machine's lease (420 s when the command began) leaves no time to finish them: "
        "total-a100_option_a (run them in the next: bash scripts/gpu_measure.sh batch total-a100_option_a)")
    whole = script("dry-run", "a100-diagnose", "total-a100_option_a", GPU="h100", PLAN_DIR=str(tmp_path))
    assert list(sections(whole.stdout)) == ["a100-diagnose", "total-a100_option_a"]  # no lease: every part shown
    short = script("dry-run", "a100-diagnose", GPU="h100", PLAN_DIR=str(tmp_path), LEASE_S="100")
    assert list(sections(short.stdout)) == [] and "no time to finish them: a100-diagnose" in short.stdout
    bad = script("dry-run", "a100-diagnose", GPU="h100", LEASE_S="7m")
    assert bad.returncode == 2 and "LEASE_S='7m' is not valid" in bad.stderr and "Traceback" not in bad.stderr


def test_a_part_never_starts_past_the_lease_and_is_stopped_before_it_ends(tmp_path):
    ctx = gpu_campaign.Context(py="python3", out=tmp_path, scratch=tmp_path, gpu="h100", started=1000.0,
                               lease_s=300.0)
    part = gpu_parts.find("a100-diagnose")
    assert ctx.budget_s == 300 - gpu_campaign.LEASE_MARGIN_S and ctx.stop_at == 1000 + 300 - gpu_campaign.LEASE_MARGIN_S
    assert gpu_campaign.fits(part, 0.0, ctx, first=True)
    assert not gpu_campaign.fits(part, ctx.budget_s - part.estimate_s + 1, ctx, first=True)  # even the first
    unknown = gpu_campaign.Context(py="python3", out=tmp_path, scratch=tmp_path, gpu="h100", started=1000.0)
    assert gpu_campaign.fits(part, 500.0, unknown, first=True) and not gpu_campaign.fits(part, 500.0, unknown, False)
    assert unknown.stop_at == 1000 + gpu_campaign.STOP_AFTER_S


def test_the_headline_starts_within_a_long_lease_after_the_seconds_its_wheels_took(tmp_path):
    # an H200 slot: LEASE_S=860 and the headline (~538 s, sized to the command's 540) was refused, 2.7 s in
    headline = gpu_parts.find("headline")
    elapsed = max(1.0, gpu_parts.BATCH_BUDGET_S - headline.estimate_s + 1.0)  # the wheels' install, past the budget
    for lease in (860, 700, headline.estimate_s + elapsed + gpu_campaign.LEASE_MARGIN_S):
        ctx = gpu_campaign.Context(py="python3", out=tmp_path, scratch=tmp_path, gpu="h200", started=1000.0,
                                   lease_s=float(lease))
        assert gpu_campaign.fits(headline, elapsed, ctx, first=True), lease
        assert not gpu_campaign.fits(headline, elapsed, ctx, first=False)  # a later part keeps the command's budget
    short = gpu_campaign.Context(py="python3", out=tmp_path, scratch=tmp_path, gpu="h200", started=1000.0,
                                 lease_s=float(headline.estimate_s + gpu_campaign.LEASE_MARGIN_S))
    assert not gpu_campaign.fits(headline, elapsed, short, first=True)  # a lease it cannot finish in: never starts


def test_a_dry_run_without_out_prints_commands_that_fill_it_in():
    result = script("dry-run", "phase2", GPU="h100")
    assert result.returncode == 0, result.stderr
    assert '+ tar -czf "$OUT"/phase2.tar.gz -C /tmp/harness-gpu/pack/phase2 .' in result.stdout


def test_a_scratch_folder_inside_out_is_refused(tmp_path):
    result = script("phase2", str(tmp_path / "out"), SCRATCH=str(tmp_path / "out" / "scratch"))
    assert result.returncode == 2 and "is inside OUT=" in result.stderr
    assert "choose a SCRATCH outside OUT" in result.stderr
    assert not (tmp_path / "out").exists()


def test_usage_errors_name_the_bad_value_and_the_choices(tmp_path):
    bad = script("resnet", str(tmp_path))
    assert bad.returncode == 2 and "unknown part 'resnet'" in bad.stderr
    assert ("the parts are: headline phase2-diagnose a100-diagnose detr-diagnose seresnet-diagnose "
            "total-a100_option_a ") in bad.stderr
    assert "Traceback" not in bad.stderr
    none = script("phase2")  # no OUT_DIR and no $OUT
    assert none.returncode == 2 and "no output folder" in none.stderr
    assert script().returncode == 2 and script("batch").returncode == 2


def test_a_failing_part_exits_non_zero_and_still_packs_its_log(tmp_path):
    out = tmp_path / "out"
    result = script("runs-unet3d", str(out), PYTHON="false", DRIVER_PYTHON=sys.executable,
                    SCRATCH=str(tmp_path / "scratch"))
    assert result.returncode == 1, result.stdout + result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["runs-unet3d.tar.gz"]
    with tarfile.open(out / "runs-unet3d.tar.gz") as tar:
        log = tar.extractfile("./runs-unet3d.log").read().decode()
        stamp = json.load(tar.extractfile("./stamp.json"))
    assert "exit 1: false -m harness run workload=unet3d precision=32" in log
    assert stamp["status"] == "failed" and stamp["part"] == "runs-unet3d" and stamp["path_fingerprint"]
    journal = (tmp_path / "scratch" / gpu_campaign.JOURNAL).read_text().splitlines()
    assert [json.loads(line)["status"] for line in journal] == ["failed"]  # what this machine ran, for `next`


# ------------------------------------------------------------------------------------------
# the tarball's size


def _context(tmp_path) -> gpu_campaign.Context:
    return gpu_campaign.Context(py=sys.executable, out=tmp_path / "out", scratch=tmp_path / "scratch", gpu="h100")


def test_a_tarball_over_16_mib_is_refused_naming_its_biggest_files(tmp_path):
    part, ctx = gpu_parts.find("phase2"), _context(tmp_path)
    folder = ctx.pack(part)
    (folder / "results" / "runs").mkdir(parents=True)
    (folder / "results" / "runs" / "big.parquet").write_bytes(os.urandom(17 * 2**20))  # random: gzip cannot shrink it
    (folder / "phase2.log").write_text("small\n")
    assert not gpu_pack.pack_part(part, ctx)
    tarball = ctx.out / "phase2.tar.gz"
    problem = gpu_pack.size_problem(tarball, folder)
    assert tarball.stat().st_size > 16 * 2**20 and "over the 16 MiB a slot returns" in problem
    assert "results/runs/big.parquet (17.0 MiB)" in problem and f"tar -czf {tarball} -C {folder} ." in problem


def test_a_log_that_makes_the_tarball_too_big_keeps_its_end_and_the_part_packs(tmp_path, monkeypatch):
    part, ctx = gpu_parts.find("phase2"), _context(tmp_path)
    folder = ctx.pack(part)
    (folder / "results" / "runs").mkdir(parents=True)
    (folder / "results" / "runs" / "r.parquet").write_bytes(b"record")
    (folder / "phase2.log").write_bytes(os.urandom(3 * 2**20) + b"the end\n")
    monkeypatch.setattr(gpu_pack, "LOG_TAIL_BYTES", 2**20)
    assert gpu_pack.pack_part(part, ctx, limit=2 * 2**20)
    with tarfile.open(ctx.out / "phase2.tar.gz") as tar:
        log = tar.extractfile("./phase2.log").read()
        assert tar.extractfile("./results/runs/r.parquet").read() == b"record"
    assert log.startswith(b"[... cut to its last MiB") and log.endswith(b"the end\n")


# ------------------------------------------------------------------------------------------
# the plan: next, record


def _entry(part, status="ok", fingerprint=None, attempts=1):
    return {"status": status, "measured": "2026-11-23T10:00:00Z", "commit": "", "code_fingerprint": "c0de",
            "path_fingerprint": fingerprint or gpu_parts.path_fingerprint(gpu_parts.find(part)), "attempts": attempts,
            "records": 1, "sweeps": [], "failures": ["exit 1: boom"] if status != "ok" else []}


def test_next_takes_pending_parts_in_order_within_one_command(tmp_path, monkeypatch):
    monkeypatch.setenv("PLAN_DIR", str(tmp_path))
    plan = {"gpu": "h100", "parts": {
        "headline": _entry("headline"),  # done
        "noise": _entry("noise", fingerprint="0" * 16),  # its own files changed since (no commit: by fingerprint)
        "tests": _entry("tests", "failed"),  # failed once: retried
        "phase3": _entry("phase3", "failed", attempts=2),  # failed twice on this path: blocked
        "connectomics_quick": _entry("connectomics_quick", "cut"),  # stopped at the limit once: retried
    }}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    loaded = gpu_plan.load("h100")
    states = {p.name: gpu_plan.state(p, loaded["parts"].get(p.name)) for p in gpu_parts.catalogue()}
    assert [states[n] for n in ("headline", "noise", "tests", "phase3", "connectomics_quick", "detr_fast-r0-4")] == \
        ["done", "changed", "retry", "blocked", "retry", "to do"]
    pending = gpu_plan.pending(loaded)
    # the guides' premise checks, the guide totals (the cheapest ladder's first: A100's option A), then the
    # retried tests, the noise
    names = [p.name for p in pending]
    assert names[:5] == ["phase2-diagnose", "a100-diagnose", "detr-diagnose", "seresnet-diagnose",
                         "total-a100_option_a"]  # the cheapest premise first, then the cheapest total
    assert names.index("tests") < names.index("noise") < names.index("connectomics_quick")
    chosen = gpu_plan.pick(pending)
    assert chosen[0] == pending[0] and sum(p.estimate_s for p in chosen) <= gpu_parts.BATCH_BUDGET_S
    assert pending[2] not in chosen  # 159 + 181 + 328 s: too long for one command
    for part in chosen[1:]:  # smaller later parts fill the command, never ahead of an earlier part of their ladder
        assert all(p in chosen[:chosen.index(part)] for p in pending[:pending.index(part)] if p.ladder == part.ladder
                   and part.ladder)
    corrected = gpu_plan.pick(pending, factor=0.5)  # the plan's correction: more parts a command
    assert len(corrected) > len(chosen) and 0.5 * sum(p.estimate_s for p in corrected) <= gpu_parts.BATCH_BUDGET_S
    progressive = [p for p in pending if p.ladder == "connectomics_progressive" and p.kind == "ladder"][:2]
    total = gpu_parts.find("total-a100_option_a")
    assert gpu_plan.pick([total, *progressive]) == [total]  # rung 6 waits for rungs 0-5
    big = [gpu_parts.find("resnet50_aggressive-r6")]  # compile max-autotune
    assert gpu_plan.pick(big + pending) == big  # the first pending part always runs, however big
    result = script("dry-run", "next", GPU="h100", PLAN_DIR=str(tmp_path), SCRATCH=str(tmp_path / "scratch"))
    assert result.returncode == 0, result.stderr
    assert f"GPU h100: next {' '.join(p.name for p in chosen)} (~" in result.stdout
    assert list(sections(result.stdout)) == [p.name for p in chosen]
    # a second command on the same machine, before `record` here: what the first one measured is not taken again
    (tmp_path / "scratch").mkdir()
    first = gpu_parts.find("phase2-diagnose")
    stamp = {"part": first.name, "gpu": "h100", "status": "ok", "ended": "2026-11-23T11:00:00Z", "records": ["a"],
             "commit": "", "code_fingerprint": "c0de", "path_fingerprint": gpu_parts.path_fingerprint(first)}
    (tmp_path / "scratch" / gpu_campaign.JOURNAL).write_text(json.dumps(stamp) + "\n")
    again = script("dry-run", "next", GPU="h100", PLAN_DIR=str(tmp_path), SCRATCH=str(tmp_path / "scratch"))
    assert again.returncode == 0 and list(sections(again.stdout))[0] == "a100-diagnose"


def test_the_command_s_age_counts_what_ran_before_the_driver_in_its_shell():
    code = "import sys; sys.path.insert(0, '.'); from scripts.gpu_campaign import command_age_s; print(command_age_s())"
    out = subprocess.run(["bash", "-c", f"sleep 2; {sys.executable} -c \"{code}\"; true"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert 1.5 <= float(out.stdout) < 60, out.stdout + out.stderr  # the shell began ~2 s before the driver


def test_a_batch_starts_no_part_that_would_not_fit_the_command(tmp_path, monkeypatch, capsys):
    clock = [0.0]
    ran = []
    monkeypatch.setattr(gpu_campaign.time, "monotonic", lambda: clock[0])

    def fake_run(part, ctx):
        ran.append(part.name)
        clock[0] += part.estimate_s
        return 0

    monkeypatch.setattr(gpu_campaign, "run_part", fake_run)
    parts = [gpu_parts.find(n) for n in ("noise", "tests", "phase1")]  # 277 + 300 > 540: tests waits
    assert gpu_campaign.run_parts(parts, _context(tmp_path)) == 0
    assert ran == ["noise"] and "bash scripts/gpu_measure.sh batch tests phase1" in capsys.readouterr().out


def _record(results, run_id, status="ok", error="", ladder="phase2", rung=0, config=None, launched_by=""):
    write_record(RunRecord(run_id=run_id, status=status, timestamp="2026-11-23T10:00:00Z", error=error,
                           workload="unet3d", ladder=ladder, rung=rung, sweep_id="phase2-h100-x",
                           config_json=json.dumps(config or {}), launched_by=launched_by), results)


def _tarball(tmp_path, part, status, records=1, log="the log\n") -> Path:
    folder = tmp_path / f"pack-{part}-{status}"
    for i in range(records):
        _record(folder / "results", f"20261123-10000{i}-{status[:4]}{part[:4]}")
    stamp = {"part": part, "gpu": "h100", "status": status, "started": "2026-11-23T10:00:00Z",
             "ended": "2026-11-23T10:04:00Z", "elapsed_s": 240.0, "estimate_s": 213, "commit": "abc123",
             "code_fingerprint": "c0de", "path_fingerprint": gpu_parts.path_fingerprint(gpu_parts.find(part)),
             "sweeps": ["phase2-h100-x"], "failures": [] if status == "ok" else ["exit 1: boom"]}
    (folder / "stamp.json").write_text(json.dumps(stamp))
    (folder / f"{part}.log").write_text(log)
    (folder / "table.md").write_text("| rung |\n")
    tarball = tmp_path / "back" / f"{part}.tar.gz"
    tarball.parent.mkdir(exist_ok=True)
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(folder, arcname=".")
    return tarball


def test_record_puts_records_and_logs_under_the_gpu_and_marks_the_plan(tmp_path):
    plan_dir = tmp_path / "plan"
    _tarball(tmp_path, "phase2", "ok", records=2)
    result = script("record", str(tmp_path / "back"), PLAN_DIR=str(plan_dir))
    assert result.returncode == 0, result.stderr
    assert "phase2 (h100): ok, 2 records, commit abc123" in result.stdout
    entry = json.loads((plan_dir / "plan.json").read_text())["parts"]["phase2"]
    assert entry["status"] == "ok" and entry["commit"] == "abc123" and entry["code_fingerprint"] == "c0de"
    assert len(load_runs(plan_dir)) == 2
    assert (plan_dir / "logs" / "phase2.log").read_text() == "the log\n"
    assert (plan_dir / "logs" / "phase2.table.md").read_text() == "| rung |\n"
    row = next(line for line in (plan_dir / "PLAN.md").read_text().splitlines() if "| `phase2` |" in line)
    assert "**done**" in row and "| abc123 |" in row
    # by name, from the folder the files came back in
    assert script("record", "phase2", PLAN_DIR=str(plan_dir), IN=str(tmp_path / "back")).returncode == 0
    assert sorted(p.name for p in (plan_dir / "logs").iterdir()) == ["phase2.log", "phase2.table.md"]  # the same
    # a later slot's part: its log and table in place, the earlier slot's kept under its date, never overwritten
    _tarball(tmp_path, "phase2", "ok", log="a later log\n")
    assert script("record", "phase2", PLAN_DIR=str(plan_dir), IN=str(tmp_path / "back")).returncode == 0
    assert (plan_dir / "logs" / "phase2.log").read_text() == "a later log\n"
    assert (plan_dir / "logs" / "phase2-2026-11-23T1004.log").read_text() == "the log\n"
    assert not (plan_dir / "logs" / "phase2-2026-11-23T1004.table.md").exists()  # the table did not change
    assert script("record", "nosuchpart", PLAN_DIR=str(plan_dir)).returncode == 2


def test_record_brings_a_sweep_s_copies_back_so_its_table_keeps_the_copied_rungs(tmp_path, monkeypatch):
    # a part whose sweep copied its baseline from an earlier sweep (sweep.rerun=false) returns that copy too
    monkeypatch.setenv("PLAN_DIR", str(tmp_path / "plan"))
    tarball = _tarball(tmp_path, "phase2", "ok", records=1)
    pack = tmp_path / "pack-phase2-ok"
    original = load_runs(pack / "results").iloc[0]
    copy = RunRecord(run_id="20261123-100009-copy", status="ok", timestamp="2026-11-23T10:01:00Z",
                     workload="unet3d", ladder="accumulate", rung=0, sweep_id="accumulate-h100-x",
                     cached_from=str(original["run_id"]))
    store_copy(copy, pack / "results")
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(pack, arcname=".")
    for _ in range(2):  # recorded twice: the copy is kept once
        gpu_plan.record(tarball)
    stored = load_runs(tmp_path / "plan", sweep="accumulate-h100-x")
    assert list(stored["run_id"]) == ["20261123-100009-copy"] and list(stored["workload"]) == ["unet3d"]


def test_a_part_that_fails_twice_on_one_path_is_blocked(tmp_path, monkeypatch):
    monkeypatch.setenv("PLAN_DIR", str(tmp_path / "plan"))
    for _ in range(2):
        gpu_plan.record(_tarball(tmp_path, "noise", "failed"))
    entry = gpu_plan.load("h100")["parts"]["noise"]
    assert entry["attempts"] == 2 and gpu_plan.state(gpu_parts.find("noise"), entry) == "blocked"
    assert "noise" not in [p.name for p in gpu_plan.pending(gpu_plan.load("h100"))]
    gpu_plan.record(_tarball(tmp_path, "noise", "ok"))
    assert gpu_plan.state(gpu_parts.find("noise"), gpu_plan.load("h100")["parts"]["noise"]) == "done"


# ------------------------------------------------------------------------------------------
# the part's check


def test_check_says_how_each_run_was_launched(tmp_path, capsys):
    # a slot's log shows whether the warm launcher forked the runs there (on the H100 they started as interpreters)
    _record(tmp_path / "results", "20261123-100001-forked", launched_by="fork")
    _record(tmp_path / "results", "20261123-100002-execed", launched_by="exec", rung=1)
    assert gpu_part.check(str(tmp_path / "results"), str(tmp_path / "none.txt")) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["phase2 rung 0 unet3d : ok (fork)", "phase2 rung 1 unet3d : ok (exec)"]


@pytest.mark.parametrize("status, error, config, fails", [
    ("ok", "", {}, False),
    ("skipped", "tf32=true needs a CUDA GPU (TF32 is a tensor-core format)", {}, False),
    ("skipped", "compile=max-autotune failed on this model (BackendCompilerFailed): boom", {}, True),
    ("error", "Traceback ...", {}, True),
    ("oom", "CUDA out of memory", {"debug": {"fault": "oom"}}, False),  # an injected fault, as asked
])
def test_check_fails_a_part_on_failures_and_on_a_compile_error_skip(tmp_path, capsys, status, error, config, fails):
    results = tmp_path / "results"
    _record(results, "20261123-100000-before")
    before = tmp_path / "before.txt"
    before.write_text("20261123-100000-before.parquet\n")
    _record(results, "20261123-100001-new", status, error, config=config)
    assert gpu_part.check(str(results), str(before)) == int(fails)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and ("FAILS THE PART" in lines[0]) == fails


def test_an_out_of_memory_ends_a_stop_on_oom_ladder_without_failing_it():
    assert gpu_part.failure("oom", "CUDA out of memory", "batch", "{}") == ""
    assert gpu_part.failure("oom", "CUDA out of memory", "phase2", "{}") == "ended oom"


def test_rung_and_round_spans_are_checked():
    assert gpu_part.span("0-3", "rungs", 4) == [0, 1, 2, 3] and gpu_part.span("2", "rounds") == [2]
    for bad in ("3-1", "x", "0-4"):
        with pytest.raises(ValueError, match=rf"rungs '{bad}' is not valid"):
            gpu_part.span(bad, "rungs", 4)


@pytest.mark.slow  # two real commands measuring six runs: ~5 minutes on 2 busy cores
def test_parts_of_one_ladder_measured_in_separate_commands_make_one_sweep(tmp_path):
    """Rungs 0-4 of resnet50_aggressive for real (smoke size on this CPU: the TF32 rung 1 skipped), then rung 5 in a
    second command on a fresh scratch folder seeded with the first one's tarball: all land in one sweep, and rung 5
    is built on the rungs that ran (not on the skipped TF32 one)."""
    first = script("resnet50_aggressive-r0-4", str(tmp_path / "a"), SCRATCH=str(tmp_path / "s1"), TIMEOUT_S="600")
    assert first.returncode == 0, first.stdout + first.stderr
    packed = tmp_path / "a" / "resnet50_aggressive-r0-4.tar.gz"
    second = script("resnet50_aggressive-r5", str(tmp_path / "b"), SCRATCH=str(tmp_path / "s2"),
                    RESULTS_FROM=str(packed))
    assert second.returncode == 0, second.stdout + second.stderr
    merged = tmp_path / "merged"
    for tarball in (packed, tmp_path / "b" / "resnet50_aggressive-r5.tar.gz"):
        with tarfile.open(tarball) as tar:
            tar.extractall(merged, filter="data")
    runs = load_runs(merged / "results").sort_values("rung")
    assert len(set(runs["sweep_id"])) == 1 and runs["sweep_id"].iloc[0].startswith("resnet50_aggressive-cpu-")
    assert list(runs["rung"]) == [0, 1, 2, 3, 4, 5]
    assert list(runs["status"]) == ["ok", "skipped", "ok", "ok", "ok", "ok"]  # skipped (TF32 needs a GPU) is no failure
    assert "tf32=true needs a CUDA GPU" in runs["error"].iloc[1]


@pytest.mark.parametrize("ladder, status, fault, code", [
    ("selftest", "oom", "oom", 0),  # its rung 1 injects an out-of-memory: what was asked for
    ("batch", "oom", "none", 0),  # a stop_on_oom ladder ends at the out-of-memory by design
    ("phase2", "oom", "none", 1),
    ("phase2", "error", "none", 1),
    ("phase2", "skipped", "none", 0),
])
def test_a_ladder_part_s_exit_code_follows_the_check_s_rule(tmp_path, monkeypatch, capsys, ladder, status, fault,
                                                            code):
    """A faked runner: rung 1 ends ``status`` (with ``fault`` injected), the others ok. The ladder's own exit code
    counts in its part before the check runs, so it must excuse what the check excuses."""
    import contextlib

    from harness.run.parent import launcher, runner
    from harness.workload import datasets
    from harness.sweeps import rungs as sweep_mod

    forked = []
    monkeypatch.setattr(runner.Machine, "detect", staticmethod(lambda: None))
    monkeypatch.setattr(datasets, "prepare", lambda cfg, log=print: None)
    monkeypatch.setattr(sweep_mod, "rung_config", lambda ctx, index, machine, *a, **k: None)
    monkeypatch.setattr(launcher, "warm", lambda: forked.append(True) or contextlib.nullcontext())

    def fake_rung(ctx, index, round_, machine):
        ended = status if index == 1 else "ok"
        config = {"debug": {"fault": fault if index == 1 else "none"}}
        rec = RunRecord(run_id=f"r{index}", status=ended, timestamp="", workload="unet3d", ladder=ladder, rung=index,
                        error="CUDA out of memory" if ended == "oom" else "", config_json=json.dumps(config))
        return sweep_mod.RungOutcome(rec, "measured", frozenset())

    monkeypatch.setattr(sweep_mod, "run_rung", fake_rung)
    assert gpu_part.ladder(ladder, "0-2", "0", f"{ladder}-h100-x", [f"results_dir={tmp_path}"]) == code
    assert forked == [True]  # every rung under one warm launcher, as `harness sweep` runs them
    out = capsys.readouterr().out
    assert f"{ladder} rung 1 " in out and out.count("FAILS THE PART") == code


def test_a_ladder_whose_every_rung_needs_more_gpus_than_a_lent_machine_gets_no_part():
    # DDP's and FSDP's knobs ask for 2 devices on every rung: each run would be recorded `skipped` at once
    assert set(gpu_parts.beyond_one_machine()) == {"ddp_knobs", "fsdp_knobs"}
    assert gpu_parts.beyond_one_machine()["ddp_knobs"] == \
        "every rung asks for 2 GPUs on 1 node(s); the lent machines have 1"
    assert not {p.ladder for p in gpu_parts.catalogue()} & {"ddp_knobs", "fsdp_knobs"}
    assert {"scaling", "scaling_nodes"} <= {p.ladder for p in gpu_parts.catalogue()}  # their rung 0 runs on one GPU
    plan = gpu_plan.render({"gpu": "h200", "parts": {}})
    assert "`fsdp_knobs`: every rung asks for 2 GPUs" in plan


def test_the_gpu_tests_part_runs_in_one_process_where_the_image_has_no_pytest_xdist(tmp_path):
    # the lent machines' image has pytest but not pytest-xdist, whose -n auto pyproject.toml's addopts ask for
    part = gpu_parts.find("tests")
    ctx = gpu_campaign.Context(py=sys.executable, out=tmp_path / "out", scratch=tmp_path / "scratch", gpu="h100")
    (command,) = gpu_campaign.commands(part, ctx)
    assert command[:3] == [sys.executable, "-m", "pytest"] and "-n" not in command
    done = subprocess.run([*command, "-p", "no:xdist", "--collect-only"], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    collected = re.search(r"(\d+)/\d+ tests collected", done.stdout).group(1)
    assert f"({collected} tests;" in part.what  # the plan says how many tests the part runs


def test_a_log_recorded_again_within_the_same_minute_is_kept_beside_the_earlier_never_over_it(tmp_path):
    target = tmp_path / "phase2.log"
    for text in (b"first\n", b"second\n", b"third\n", b"third\n"):  # three slots stamped within one minute
        gpu_plan.keep_log(target, text, "2026-11-30T10:04:59Z")
    kept = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert kept == {"phase2.log": b"third\n", "phase2-2026-11-30T1004.log": b"first\n",
                    "phase2-2026-11-30T1004-2.log": b"second\n"}
    gpu_plan.keep_log(target, b"fourth\n", "2026-11-30T10:04:59Z")  # the third kept; the same one is not kept twice
    assert sorted(p.name for p in tmp_path.iterdir())[-1] == "phase2.log" and len(list(tmp_path.iterdir())) == 4
    assert (tmp_path / "phase2-2026-11-30T1004-3.log").read_bytes() == b"third\n"
