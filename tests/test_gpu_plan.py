"""The GPU campaign's plan converges: a part measured at a commit stays done for it unless its own files changed, the
rounds of one ladder measured in different commands or slots at one commit make one sweep, parts measure the pinned
commit, and the estimates are corrected by what recorded parts took (no GPU; git in a temporary repository)."""

import dataclasses
import json
import re
import subprocess

import pytest

from scripts import gpu_parts, gpu_plan, gpu_width
from tests.test_gpu_script import script


def _git(repo, *args) -> str:
    out = subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
                         check=True, capture_output=True, text=True)
    return out.stdout.strip()


def _commit(repo, files: dict[str, str]) -> str:
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "change")
    return _git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    monkeypatch.setattr(gpu_plan, "REPO", repo)
    return repo


def test_a_commit_that_touches_none_of_a_ladder_s_files_leaves_its_part_done(repo):
    part = dataclasses.replace(gpu_parts.find("phase2"), paths=("conf/ladder/phase2.yaml", "models/net.py"))
    measured = _commit(repo, {"conf/ladder/phase2.yaml": "rungs: 4\n", "models/net.py": "a\n", "harness/run.py": "1\n"})
    entry = {"status": "ok", "commit": measured, "path_fingerprint": "not these files"}
    harness_only = _commit(repo, {"harness/run.py": "2\n"})  # the measuring code changed, the ladder's own files not
    assert gpu_plan.state(part, entry) == "done" and gpu_plan.state(part, entry, harness_only) == "done"
    ladder_too = _commit(repo, {"conf/ladder/phase2.yaml": "rungs: 5\n"})
    assert gpu_plan.state(part, entry, ladder_too) == "changed"
    assert gpu_plan.own_files_changed(part, entry, ladder_too) == ["conf/ladder/phase2.yaml"]
    assert gpu_plan.state(part, entry, harness_only) == "done"  # still done for the pin it was measured against
    assert gpu_plan.state(part, entry) == "changed"  # this checkout has the ladder's change
    failed = {**entry, "status": "failed", "path_fingerprint": gpu_parts.path_fingerprint(part)}
    assert gpu_plan.state(part, failed) == "retry"


def test_a_commit_git_does_not_know_falls_back_on_the_files_fingerprint(repo):
    part = gpu_parts.find("noise")
    same = {"status": "ok", "commit": "0" * 40, "path_fingerprint": gpu_parts.path_fingerprint(part)}
    assert gpu_plan.state(part, same) == "done"
    assert gpu_plan.state(part, {**same, "path_fingerprint": "0" * 16}) == "changed"


def test_parts_measure_the_pinned_commit_in_a_worktree_of_it(repo, tmp_path):
    pinned = _commit(repo, {"conf/ladder/phase2.yaml": "rungs: 4\n"})
    later = _commit(repo, {"conf/ladder/phase2.yaml": "rungs: 5\n"})
    plan = {"gpu": "h100", "commit": pinned, "parts": {}}
    assert gpu_plan.checkout_pin(plan, pinned, tmp_path / "s") is None  # this copy is at the pin
    assert gpu_plan.checkout_pin({**plan, "commit": ""}, later, tmp_path / "s") is None  # nothing pinned
    folder, commit = gpu_plan.checkout_pin(plan, later, tmp_path / "s")
    assert commit == pinned and (folder / "conf/ladder/phase2.yaml").read_text() == "rungs: 4\n"
    with pytest.raises(ValueError, match=r"the campaign is pinned at 1111111111.* GIT_COMMIT=1{40}"):
        gpu_plan.checkout_pin({**plan, "commit": "1" * 40}, later, tmp_path / "s")


def test_a_ladders_later_round_joins_its_first_rounds_sweep_across_a_commit_that_left_its_files_alone(repo):
    rounds = [p for p in gpu_parts.catalogue() if p.ladder == "phase2" and p.kind == "ladder"]
    assert [p.rounds for p in rounds] == [(0,), (1,), (2,)]
    own = {rel: (gpu_parts.REPO / rel).read_text() for rel in rounds[0].paths}  # the ladder's file, its workloads'
    first = _commit(repo, {**own, "harness/run.py": "1\n"})
    first_round = gpu_parts.sweep_id(rounds[0], "h100", repo)  # measured at the first commit
    unrelated = _commit(repo, {"harness/run.py": "2\n"})  # the measuring code changed, the ladder's files not
    second_round = gpu_parts.sweep_id(rounds[1], "h100", repo)  # the "more rounds" part, at the later commit
    assert first != unrelated and second_round == first_round and first_round.startswith("phase2-h100-")
    assert first[:8] not in first_round and unrelated[:8] not in second_round  # no commit in the id
    _commit(repo, {"harness/conf/ladder/phase2.yaml": own["harness/conf/ladder/phase2.yaml"] + "# edited\n"})
    assert gpu_parts.sweep_id(rounds[2], "h100", repo) != first_round  # the ladder itself changed: a new sweep


def test_the_dry_run_of_a_part_names_the_pinned_commit_and_its_sweep(tmp_path):
    (tmp_path / "plan.json").write_text(json.dumps({"gpu": "h100", "commit": "f" * 40, "parts": {}}))
    result = script("dry-run", "phase2-round2", GPU="h100", PLAN_DIR=str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "# at the campaign's pinned commit ffffffffffff" in result.stdout
    assert f" {gpu_parts.sweep_id(gpu_parts.find('phase2-round2'), 'h100')} " in result.stdout


def test_estimates_are_corrected_by_the_median_measured_over_estimated_time_of_recorded_parts():
    plan = {"gpu": "h100", "parts": {"a": {"elapsed_s": 60, "estimate_s": 100},
                                     "b": {"elapsed_s": 50, "estimate_s": 100},
                                     "c": {"elapsed_s": 150, "estimate_s": 100}, "d": {"estimate_s": 100}}}
    assert gpu_plan.correction(plan) == (0.6, 3)
    assert gpu_plan.correction({"gpu": "h100", "parts": {}}) == (1.0, 0)
    # the H100's records: phase2's three rounds 417 s of 639, noise 153 of 277, the test tier 155 of 300, the
    # checkpointing ladder 98.3 of 166, the accumulation ladder 84 of 173 (the headline is left out)
    factor, recorded = gpu_plan.correction(gpu_plan.load("h100"))
    assert recorded == 5 and factor == pytest.approx(153 / 277)


def test_plan_md_states_how_a_slot_is_used_and_the_campaign_s_corrected_estimate(tmp_path, monkeypatch):
    monkeypatch.setenv("PLAN_DIR", str(tmp_path))
    plan = gpu_plan.load("h100")
    plan["parts"] = {"tests": {"status": "ok", "elapsed_s": 150, "estimate_s": 300, "commit": "",
                               "path_fingerprint": gpu_parts.path_fingerprint(gpu_parts.find("tests"))}}
    text = gpu_plan.render(plan)
    left = [p for p in gpu_parts.catalogue() if p.name != "tests"]
    raw, headline = sum(p.estimate_s for p in left), gpu_parts.find("headline").estimate_s
    assert "starts with `bash scripts/gpu_measure.sh headline`" in text
    assert f"~{raw} s by the model's estimate; corrected by 0.50, the median measured/estimated time of 1 recorded " \
           f"parts: **~{0.5 * (raw - headline) + headline:.0f} s" in text  # the headline's: recorded times already
    rows = [line.split(" | ")[1] for line in text.splitlines() if line.startswith("| ") and "`" in line]
    assert rows[0] == "`headline`" and rows[1:5] == ["`phase2-diagnose`", "`a100-diagnose`", "`detr-diagnose`",
                                                     "`seresnet-diagnose`"] and rows[5].startswith("`total-")


def test_a_guide_total_part_alternates_its_two_ends_round_after_round(tmp_path, monkeypatch):
    """ABBA: rung 0 then the last rung, then the last rung then rung 0; the last rung's settings are every change of
    the guide's at once (no rung between was measured), all in one sweep, from one warm launcher (a faked runner)."""
    import contextlib

    from harness.run.parent import launcher
    from harness.workload import datasets
    from harness.store import RunRecord
    from harness.sweeps import rungs as sweep_mod
    from scripts import gpu_part

    turns, configs = [], {}
    monkeypatch.setattr(datasets, "prepare", lambda cfg, log=print: configs.setdefault("prepared", []).append(cfg))
    monkeypatch.setattr(launcher, "warm", contextlib.nullcontext)

    def fake_rung(ctx, index, round_, machine):
        turns.append((index, round_, ctx.sweep_id))
        return sweep_mod.RungOutcome(RunRecord(run_id=f"r{index}{round_}", status="ok", timestamp=""), "measured",
                                     frozenset())

    monkeypatch.setattr(sweep_mod, "run_rung", fake_rung)
    part = gpu_parts.find("total-a100_option_a")
    assert gpu_part.main(["total", part.ladder, "0-1", "a100_option_a-total-h100-abc", f"results_dir={tmp_path}"]) == 0
    assert turns == [(0, 0, "a100_option_a-total-h100-abc"), (2, 0, "a100_option_a-total-h100-abc"),
                     (2, 1, "a100_option_a-total-h100-abc"), (0, 1, "a100_option_a-total-h100-abc")]
    first, last = configs["prepared"]  # Option A: batch 1 -> 2 and workers 1 -> 4, together
    assert (first.batch_size, first.data.num_workers) == (1, 1) and (last.batch_size, last.data.num_workers) == (2, 4)


def test_a_guide_total_s_verdict_is_its_last_rung_over_rung_0_against_the_total_claim(tmp_path):
    from harness.store import RunRecord, write_record
    from scripts import gpu_part

    lad = gpu_parts._ladder("a100_option_a")  # the guide claims 2x for batch 2 and four workers together
    speeds = {(0, 0): 10.0, (2, 0): 20.5, (2, 1): 19.0, (0, 1): 9.8, (0, 2): 10.1, (2, 2): 20.2}
    for i, ((rung, round_), speed) in enumerate(speeds.items()):
        write_record(RunRecord(run_id=f"20261127-10000{i}-x", status="ok", timestamp=f"2026-11-27T10:00:0{i}Z",
                               workload="basic_unet3d", ladder=lad.name, rung=rung, round=round_, size="full",
                               device="cuda", gpu_name="NVIDIA H100 80GB HBM3", gpu_count=1, cpu_model="f",
                               cpu_count=16, sweep_id="t", samples_per_s=speed), tmp_path)
    line = gpu_part.total_verdict(str(tmp_path), "t", lad)
    assert line.startswith("a100_option_a total, rung 2 over rung 0: 2.0") and "the guide claims 2x: " in line
    assert line.endswith(": confirms"), line
    assert gpu_part.total_verdict(str(tmp_path / "none"), "t", lad).startswith("a100_option_a total: no table")


def test_the_a100_ladders_full_size_waits_on_its_data_as_the_guides_baseline_did():
    """The guide: an 18 s step, 15-17 s of it waiting for data (83-94%). The ladder's full-size read latency is
    calibrated on the plan's own estimates (a BasicUNet step at 72x136x136, a NIfTI file read and decompressed) to
    the middle of that, 16 of 18 s; the GPU plan diagnoses the same base at the full size, with none of the
    augmentation the guide never mentions."""
    lad = gpu_parts._ladder("a100_volume")
    base = lad.settings(0, "full")
    compute, item = gpu_parts.step_costs(base)
    assert base["data.read_latency_ms"] == 250 and base["batch_size"] == 1 and base["data.num_workers"] == 1
    assert compute == pytest.approx(0.05 * 72 * 136 * 136 / 112 ** 3)  # 47 ms
    assert item == pytest.approx(0.25 + gpu_parts.DISK_READ_S + 0.03 * 72 * 136 * 136 / 112 ** 3)  # 0.43 s
    assert gpu_parts.waiting_share(base) == pytest.approx(1 - compute / item) == pytest.approx(16 / 18, abs=0.005)
    assert 15 / 18 < gpu_parts.waiting_share(base) < 17 / 18
    for name in ("a100_option_a", "a100_option_b", "a100_option_c"):  # the same start
        assert gpu_parts.waiting_share(gpu_parts._ladder(name).settings(0, "full")) == gpu_parts.waiting_share(base)
    part = gpu_parts.find("a100-diagnose")
    assert part.args[0] == "+ladder=a100_volume" and not any("augment" in a for a in part.args)
    assert not any("augment" in a for a in gpu_parts.LADDER_OVERRIDES["a100_volume"])


def _guide_rows() -> list[list[str]]:
    """The cells of every recommendation row of docs/guides.md (its five guides' tables)."""
    rows, inside = [], False
    for line in (gpu_parts.REPO / "docs" / "guides.md").read_text().splitlines():
        if line.startswith("| # | recommendation"):
            inside = True
        elif inside and line.startswith("| ") and not line.startswith("|---"):
            rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
        elif not line.startswith("|"):
            inside = False
    return rows


def test_every_recommendation_says_how_far_it_is_measured_and_what_needs_a_gpu_is_in_the_plan():
    rows = _guide_rows()
    grades = ("full", "partly: ", "reproduced, needs a GPU", "none: ")  # computed by `python -m harness guides`
    kinds = [next((g for g in grades if row[-1].startswith(g)), row[-1]) for row in rows]
    assert set(kinds) <= set(grades) and all(len(row) == 5 for row in rows)
    counts = [len(rows), *map(kinds.count, grades)]
    all_line = "| **all** | " + " | ".join(map(str, counts)) + " |"
    assert all_line in (gpu_parts.REPO / "docs" / "guides.md").read_text()
    planned = {*gpu_parts.measured_ladders(), *gpu_parts.BEYOND_ONE_COMMAND, *gpu_parts.beyond_one_machine()}
    ladders = set(gpu_parts.ladder_names())
    section = "seresnet"  # the SEResNet table names its rungs without its ladder; it is the last table
    for row in rows:
        if "needs a GPU" in row[-1]:
            named = {name for name in re.findall(r"(?:`|\+ladder=)([a-z0-9_]+)", row[3]) if name in ladders}
            named = named or ({section} if re.match(r"rung \d", row[3]) else set())
            assert named and named <= planned, row[:2]


def test_the_estimate_scales_with_the_model_s_width_and_flags_rungs_over_the_card():
    fastest = gpu_parts._ladder("connectomics_fastest")
    rung = [fastest.settings(r, "full") for r in range(4)]
    assert gpu_width.width_scale(rung[1]) == 1.0  # BasicUNet's own features
    assert gpu_width.width_scale(rung[2]) == pytest.approx(220.5, rel=0.01)  # the FLOP counter: 218x
    assert gpu_width.width_scale(rung[3]) == pytest.approx(55.1, rel=0.01)  # half the channels: about a quarter
    assert gpu_width.width_scale({"model.width": 0.5}) == 0.25
    assert gpu_width.over_card(rung[2]) == ("likely over the 80 GiB card (>= 129 GiB of full-resolution "
                                            "activations)")
    assert gpu_width.over_card(rung[3]) == "" and gpu_width.over_card({**rung[3], "memory.limit_gb": 24}) != ""
    est = gpu_parts.rung_estimates("connectomics_fastest")
    assert est[2] < est[1] + 60 and est[3] > 5 * est[1]  # over the card: ends `oom` at once; rung 3: 55x compute
    part = next(p for p in gpu_parts.ladder_parts("connectomics_fastest") if 2 in p.rungs)
    assert "rung 2 likely over the 80 GiB card" in part.what


@pytest.mark.parametrize("ladder", ["connectomics_checkpointing", "connectomics_accumulate", "detr_test_batch"])
def test_the_memory_ladders_are_in_parts_that_carry_their_card_and_fit_the_part_budget(ladder):
    parts = [p for p in gpu_parts.catalogue() if p.ladder == ladder and p.kind == "ladder" and p.rounds == (0,)]
    lad = gpu_parts._ladder(ladder)
    assert [r for p in parts for r in p.rungs] == list(range(len(lad.rungs)))
    assert all(p.estimate_s <= (gpu_parts.PART_BUDGET_S if p.runs > 1 else gpu_parts.BATCH_BUDGET_S) for p in parts)
    limit = lad.settings(0, "full").get("memory.limit_gb")
    assert limit is not None and all(lad.settings(r, "full").get("memory.limit_gb") == limit
                                     for r in range(len(lad.rungs)))  # every run is capped at the guide's card
    plan = gpu_plan.render({"gpu": "h100", "parts": {}})
    assert all(p.name in plan for p in parts)


def test_a_change_to_how_runs_start_makes_the_headline_changed_not_the_ladders_parts(repo):
    # the headline's duty cycle and phase split measure the start of a run: the launcher, its preloads, the child's
    # start-up; a ladder's verdicts do not depend on them
    headline, ladder = gpu_parts.find("headline"), gpu_parts.find("phase2")
    assert set(gpu_parts.START_PATHS) <= set(headline.paths) and not set(gpu_parts.START_PATHS) & set(ladder.paths)
    files = {rel: "1\n" for rel in headline.paths}
    measured = _commit(repo, files)
    entry = {"status": "ok", "commit": measured}
    other = _commit(repo, {"harness/run/child/measure.py": "2\n"})
    assert gpu_plan.state(headline, entry, other) == "done" and gpu_plan.state(ladder, entry, other) == "done"
    start = _commit(repo, {"harness/run/parent/zygote.py": "2\n"})
    assert gpu_plan.own_files_changed(headline, entry, start) == ["harness/run/parent/zygote.py"]
    assert gpu_plan.state(ladder, entry, start) == "done"
