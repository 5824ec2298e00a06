"""Every shipped ladder loads and validates; each guide's claims are in its ladder."""

import pytest

from harness import config as config_mod
from harness.config import machine
from harness.config import ladder as ladder_mod
from harness.workload import applicability
from tests.conftest import REPO

GUIDE_LADDERS = ["phase1", "phase2", "phase3", "phase4", "connectomics_level1", "a100_volume", "detr_fast",
                 "resnet50_aggressive", "seresnet"]
SHIPPED = sorted(p.stem for p in ladder_mod.LADDER_DIR.glob("*.yaml"))  # not the ladders a climb wrote under results/


def test_all_expected_ladders_ship():
    assert set(GUIDE_LADDERS + ["batch", "workers", "precision", "selftest", "scaling"]) <= set(SHIPPED)


@pytest.mark.parametrize("name", SHIPPED)
def test_every_ladder_loads_and_each_rung_changes_exactly_one_knob(name):
    lad = ladder_mod.load(name)
    assert lad.rungs[0].key == "" and lad.rungs[0].index == 0
    for size in ("full", "smoke"):
        for r in lad.rungs[1:]:
            before, after = lad.settings(r.index - 1, size), lad.settings(r.index, size)
            changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
            assert changed <= {r.key}, f"{name} rung {r.index}"
    for r in lad.rungs[1:]:  # and changes it at some size (a GPU toggle may change nothing at the CPU's)
        assert any(lad.settings(r.index - 1, s) != lad.settings(r.index, s) for s in ("full", "smoke")), r.index
        for r in lad.rungs:  # every rung's settings are valid for the CPU (loader workers beyond it are skipped)
            settings = lad.settings(r.index, "smoke")
            config_mod.resolve(config_mod.from_dict(settings), cuda_available=False, ladder_keys=settings)


@pytest.mark.parametrize("name,change,claim", [
    ("phase2", "precision=bf16-mixed", (2, 3)),
    ("phase2", "batch_size=8", (1.3, 1.5)),
    ("phase2", "data.num_workers=4", (1.5, 2)),
    ("phase3", "model.width=0.5", (2, 4)),
    ("phase4", "compile=reduce-overhead", (1.5, 2)),
    ("phase4", "devices=2", (1.8, 1.8)),
    ("phase4", "devices=4", (1.94, 1.94)),
    ("a100_volume", "batch_size=2", (2, 2)),
    ("a100_volume", "data.num_workers=4", (2, 3)),
    ("detr_fast", "channels_last=true", (1.1, 1.15)),
    ("resnet50_aggressive", "compile=max-autotune", (1.2, 1.2)),
    ("resnet50_aggressive", "tf32=true", (1.1, 1.1)),
    ("seresnet", "cudnn_benchmark=true", (1.1, 1.3)),
])
def test_guide_claims_are_transcribed(name, change, claim):
    lad = ladder_mod.load(name)
    rung = next(r for r in lad.rungs if r.change("full") == change)
    assert (rung.claim.low, rung.claim.high) == claim and rung.claim.source


def test_phase2_total_claim():
    assert ladder_mod.load("phase2").total_claim.label() == "3-4x"


# Every claim a shipped ladder carries: (ladder, span, label, component). Each is a figure the guide itself gives for
# that change in that situation (docs/guides.md quotes it row by row): a claim added to a ladder must be added here,
# after checking it against the guide. A span is a rung, FIRST-LAST for a group, or "total" (last rung over rung 0).
GUIDE_CLAIMS = {
    ("a100_option_a", "1", "2x", ""), ("a100_option_a", "2", "2-3x", "data"), ("a100_option_a", "total", "2x", ""),
    ("a100_option_b", "1", "4x", ""), ("a100_option_b", "2", "2-3x", "data"), ("a100_option_b", "total", "3-4x", ""),
    ("a100_option_c", "1", "4x", ""), ("a100_option_c", "total", "5-6x", ""),
    ("a100_volume", "1", "2x", ""), ("a100_volume", "2", "2-3x", "data"),
    ("a100_volume", "3-4", "1.1-1.2x", "epoch:4000"), ("a100_volume", "total", "3-4x", ""),
    ("connectomics_architecture", "1", "2-3x", ""),
    ("connectomics_checkpointing", "1", "0.7-0.8x", ""), ("connectomics_checkpointing", "1-2", "often faster", ""),
    ("connectomics_cpus", "1", "minor", ""),
    ("connectomics_fastest", "1-2", "2-3x", ""), ("connectomics_fastest", "3", "2-4x", ""),
    ("connectomics_fastest", "4", "1.5-2x", ""), ("connectomics_fastest", "5", "1.3-1.5x", ""),
    ("connectomics_fastest", "6", "1.5-2x", ""), ("connectomics_fastest", "7", "2-3x", ""),
    ("connectomics_fastest", "8", "minor", ""), ("connectomics_fastest", "total", "5-8x", ""),
    ("connectomics_workers_cap", "1", "1.5-2x", ""),
    ("connectomics_level1", "1", "2-3x", ""), ("connectomics_level1", "2", "1.5-2x", ""),
    ("connectomics_level1", "3", "1.3-1.5x", ""), ("connectomics_level1", "4", "1.5-2x", ""),
    ("connectomics_level1", "5", "minor", ""),
    ("connectomics_progressive", "1", "2-3x", ""), ("connectomics_progressive", "2", "1.3-1.5x", ""),
    ("connectomics_progressive", "3", "1.5-2x", ""), ("connectomics_progressive", "4", "2-4x", ""),
    ("connectomics_progressive", "5", "1.5-2x", ""), ("connectomics_progressive", "6", "1.5-2x", ""),
    ("connectomics_progressive", "1-3", "3-4x", ""), ("connectomics_progressive", "4-5", "2x", ""),
    ("connectomics_progressive", "total", "8-10x", ""),
    ("connectomics_quick", "1", "2-3x", ""), ("connectomics_quick", "4", "2x", ""),
    ("connectomics_quick", "2-3", "1.5-2x", ""), ("connectomics_quick", "total", "4-6x", ""),
    ("connectomics_shallow", "1", "2-4x", ""),
    ("detr_fast", "2", "2x", ""), ("detr_fast", "3", "1.1-1.15x", ""), ("detr_fast", "1", "1.5x", "compute"),
    ("detr_fast", "4", "2-3x", ""), ("detr_fast", "5-7", "1.2-1.4x", ""),
    ("detr_guide", "1", "2-3x", ""), ("detr_guide", "7", "2x", "validation"), ("detr_guide", "9", "1.02-1.05x", ""),
    ("detr_guide", "2-4", "1.2-1.4x", "epoch_s:900"), ("detr_guide", "5-6", "1.1-1.2x", ""),
    ("detr_guide", "total", "2-2.5x", ""),
    ("mednext_deep_supervision", "1", "1.1-1.2x", ""),
    ("phase2", "1", "2-3x", ""), ("phase2", "2", "1.3-1.5x", ""), ("phase2", "3", "1.5-2x", ""),
    ("phase2", "total", "3-4x", ""),
    ("phase3", "1", "2-4x", ""), ("phase3", "2", "1.5-2x", ""), ("phase3", "3", "0.7-0.8x", ""),
    ("phase3", "1-2", "2x", ""),
    ("phase4", "1", "1.8x", ""), ("phase4", "2", "1.94x", ""), ("phase4", "3", "1.5-2x", ""),
    ("precision", "1", "2-3x", ""),
    ("resnet50_aggressive", "1", "1.1x", ""), ("resnet50_aggressive", "6", "1.2x", ""),
    ("resnet50_aggressive", "7", "1.15x", ""), ("resnet50_aggressive", "total", "3.5x", ""),
    ("resnet50_storage", "2", "1.5x", ""), ("resnet50_storage", "3", "1.5x", ""), ("resnet50_storage", "5", "1.1x", ""),
    ("resnet50_storage", "total", "10-15x", ""),
    ("resnet50_matmul", "1", "1.1x", ""),
    ("seresnet", "3", "1.15-1.2x", "epoch:10000"), ("seresnet", "4", "2-3x", ""), ("seresnet", "6", "1.1-1.3x", ""),
    ("seresnet", "7", "1.2-1.3x", ""), ("seresnet", "8", "1.05-1.1x", "validation"), ("seresnet", "1-2", "4-8x", ""),
    ("seresnet", "1-8", "5-10x", ""),
    ("seresnet_cudnn", "2", "1.1-1.3x", ""),
    # not a guide's: the language-model ladder's published claims (torchtitan's), each source in lm.yaml (docs/lm.md)
    ("lm", "5", "1.016-1.036x", ""), ("lm", "6", "1.16x", ""), ("lm", "12", "1.25-1.28x", ""),
    *{("lm", str(r), "minor", "") for r in (1, 2, 3, 4, 7, 8, 9, 10, 11, 13)}, ("lm", "8-9", "minor", ""),
}


def _claims(lad: ladder_mod.Ladder) -> list[tuple[str, str, ladder_mod.Claim]]:
    """(ladder, span, claim) of every claim the ladder carries; a total's span is its rungs, FIRST-LAST."""
    out = [(lad.name, str(r.index), r.claim) for r in lad.rungs if r.claim is not None]
    out += [(lad.name, f"{g.first}-{g.last}", g.claim) for g in lad.group_claims]
    if lad.total_claim is not None:
        out.append((lad.name, "total", lad.total_claim))
    return out


def test_no_ladder_carries_a_claim_the_guides_do_not_make():
    shipped = {(name, span, c.label(), c.component) for name in SHIPPED for name, span, c in _claims(
        ladder_mod.load(name))}
    assert shipped - GUIDE_CLAIMS == set(), "claims not checked against the guides (add them to GUIDE_CLAIMS)"
    assert GUIDE_CLAIMS - shipped == set(), "claims GUIDE_CLAIMS expects that no ladder carries any more"
    guides = (REPO / "docs" / "guides.md").read_text()
    for name in {name for name, *_ in GUIDE_CLAIMS}:
        assert f"`{name}`" in guides, f"docs/guides.md does not map any recommendation to {name}"
    for name, span, claim in (c for n in SHIPPED for c in _claims(ladder_mod.load(n))):
        assert claim.source, f"{name} {span}: a claim names the guide's words it comes from"


@pytest.mark.parametrize("name", SHIPPED)
def test_no_two_claims_of_a_ladder_judge_the_same_span(name):
    # two claims on one span (a rung's and a group's, or a group over every rung and the total) cannot both hold
    # when they differ, and repeat each other when they do not
    lad = ladder_mod.load(name)
    spans = [(r.index, r.index) for r in lad.rungs if r.claim is not None]
    spans += [(g.first, g.last) for g in lad.group_claims]
    spans += [(1, len(lad.rungs) - 1)] if lad.total_claim is not None else []
    assert len(spans) == len(set(spans)), f"{name}: claims on the same span {sorted(spans)}"


def test_a_claim_with_no_figure_and_a_component_claim_load_from_the_shipped_ladders():
    level1 = ladder_mod.load("connectomics_level1")
    logging = next(r for r in level1.rungs if r.key == "log_every_n_steps")
    assert logging.claim.word == "minor" and not logging.claim.has_figure and logging.claim.label() == "minor"
    workers = next(r for r in ladder_mod.load("a100_volume").rungs if r.key == "data.num_workers")
    assert workers.claim.component == "data"


def test_a_rung_changing_two_knobs_is_rejected_naming_it():
    with pytest.raises(ValueError, match=r"ladder 'bad' rung 2: changes 2 knobs"):
        ladder_mod.parse("bad", {"rungs": [{"set": {"batch_size": 4}},
                                           {"set": {"batch_size": 8, "precision": "bf16-mixed"}}]})


def test_a_rung_changing_nothing_is_rejected_naming_it():
    with pytest.raises(ValueError, match=r"ladder 'bad' rung 2: batch_size=4 is what the rung before already had"):
        ladder_mod.parse("bad", {"rungs": [{"set": {"batch_size": 4}}, {"set": {"batch_size": 4}}]})
    # a rung may change nothing at one size (a GPU toggle the CPU size leaves off), not at every size
    ok = ladder_mod.parse("ok", {"base": {"cudnn_deterministic": {"full": True, "smoke": False}},
                                 "rungs": [{"set": {"cudnn_deterministic": False}}]})
    assert [ok.settings(1, size)["cudnn_deterministic"] for size in ("full", "smoke")] == [False, False]


def test_the_seresnet_ladder_starts_from_the_guides_reproducibility_config_and_spans_its_table():
    lad = ladder_mod.load("seresnet")
    full = lad.settings(0, "full")
    assert (full["cudnn_deterministic"], full["data.num_workers"], full.get("precision"), full.get("compile")) == (
        True, 0, None, None)
    # the guide's loop: pinned memory (its non_blocking transfers act only from it), the loss read every step
    for name in ("seresnet", "seresnet_cudnn"):
        other = ladder_mod.load(name)
        for rung in other.rungs:
            assert (other.settings(rung.index, "full")["data.pin_memory"],
                    other.settings(rung.index, "full")["log_every_n_steps"]) == ("auto", 1)
    changes = [r.change("full") for r in lad.rungs]
    # the guide's #4 is its two cuDNN toggles, the claim on the benchmark's (its own line)
    assert changes[5:7] == ["cudnn_deterministic=false", "cudnn_benchmark=true"] and lad.rungs[6].claim.low == 1.1
    total = next(g for g in lad.group_claims if g.claim.label() == "5-10x")
    assert (total.first, total.last, lad.total_claim) == (1, 8, None)  # not set_to_none (9) nor batch 64 (10)
    assert changes[9:] == ["optimizer.zero_grad_set_to_none=true", "batch_size=64"]


def test_a_rung_with_an_unknown_knob_is_rejected():
    with pytest.raises(ValueError, match=r"unknown setting 'batchsize'.*Did you mean 'batch_size'"):
        ladder_mod.parse("bad", {"rungs": [{"set": {"batchsize": 4}}]})


def test_unknown_ladder_lists_the_shipped_ones():
    with pytest.raises(ValueError, match=r"unknown ladder 'phase9'.*Valid choices: .*phase2"):
        ladder_mod.load("phase9")


def test_failed_rungs_are_not_built_on():
    lad = ladder_mod.load("selftest")
    assert lad.settings(3, "smoke", frozenset({2})) == {"workload": "unet3d", "log_every_n_steps": 10, "batch_size": 4}


@pytest.mark.parametrize("name", ["resnet50_aggressive", "resnet50_storage", "detr_fast"])
def test_tf32_rung_measures_tf32_on_against_an_explicit_off(name):
    # tf32=null already runs cuDNN convolutions in TF32: only tf32=false before the rung makes it measure on vs off;
    # it comes first, so no later rung runs FP32 convolutions the guide's GPU never ran
    lad = ladder_mod.load(name)
    rung = next(r for r in lad.rungs if r.key == "tf32")
    assert lad.settings(rung.index - 1, "full")["tf32"] is False and lad.settings(rung.index, "full")["tf32"] is True
    assert all(lad.settings(r.index, "full")["tf32"] is True for r in lad.rungs if r.index > rung.index)


# rungs a shipped ladder runs only beyond one GPU as the harness is installed: FSDP2 at devices >= 2, float8 with
# torchao
SKIPPED_ON_ONE_GPU = {("lm", "lm.fsdp"): "needs devices >= 2", ("lm", "lm.float8"): "needs torchao"}


@pytest.mark.parametrize("name", SHIPPED)
def test_no_shipped_rung_is_skipped_on_a_gpu_for_cuda_graphs(name, monkeypatch):
    monkeypatch.setattr(machine, "usable_cpus", lambda: 64)  # a GPU server's CPUs (cpus=8), not this machine's
    lad = ladder_mod.load(name)
    for r in lad.rungs:
        cfg = config_mod.resolve(config_mod.from_dict(lad.settings(r.index, "full")), cuda_available=True)
        reason = applicability.not_applicable(cfg)
        if (name, r.key) in SKIPPED_ON_ONE_GPU:  # skipped with its reason on one GPU, as the ladder says
            assert SKIPPED_ON_ONE_GPU[name, r.key] in reason, f"{name} rung {r.index}"
            continue
        assert reason == "", f"{name} rung {r.index}"


# --------------------------------------------------------------------------------------------
# a rung's settings on this machine


def _context(name: str, results, settings: dict | None = None, user_keys=frozenset()):
    from harness.sweeps.rungs import SweepContext

    return SweepContext(sweep_id="s", ladder=ladder_mod.load(name), settings={"results_dir": str(results),
                        **(settings or {})}, user_keys=frozenset(user_keys), repeats=2)


def test_a_rungs_config_is_the_settings_with_the_ladders_and_the_sweeps_on_top(tmp_path):
    from harness.run.parent.runner import Machine
    from harness.sweeps.rungs import rung_config

    ctx = _context("phase2", tmp_path, {"seed": 7, "batch_size": 16, "measure": {"steps": "4"}}, {"batch_size"})
    rung = next(r.index for r in ctx.ladder.rungs if r.key == "precision")
    cfg = rung_config(ctx, rung, Machine(cuda_available=False), round_=1)
    assert (cfg.precision, cfg.seed, cfg.batch_size, cfg.measure.steps) == ("bf16-mixed", 7, 16, 4)  # the user's win
    assert (cfg.sweep.id, cfg.sweep.rung, cfg.sweep.round, cfg.sweep.repeats) == ("s", rung, 1, 2)


def test_a_ladders_workers_beyond_this_machine_skip_the_rung_and_the_users_are_refused(tmp_path, monkeypatch):
    from harness.run.parent.runner import Machine
    from harness.sweeps.rungs import preflight, rung_config

    monkeypatch.setattr(machine, "usable_cpus", lambda: 2)
    ctx = _context("workers", tmp_path)
    top = rung_config(ctx, len(ctx.ladder.rungs) - 1, Machine(cuda_available=False))  # preflight does not refuse it
    assert top.data.num_workers == 32 and "is more than 8 loader workers" in applicability.skip_reason(top)
    mine = _context("phase1", tmp_path, {"data": {"num_workers": 9}}, {"data.num_workers"})
    with pytest.raises(ValueError, match=r"rung 0 \(baseline\) does not fit these settings: data\.num_workers=9 is "
                                         r"more than 8 loader workers"):
        preflight(mine, Machine(cuda_available=False))


def test_a_rung_that_cannot_act_here_is_stored_as_skipped_asked_once_and_never_started(tmp_path, monkeypatch):
    from harness.run.parent import isolate
    from harness.run.parent.runner import Machine
    from harness.store import load_runs
    from harness.sweeps import rungs

    monkeypatch.setattr(machine, "usable_cpus", lambda: 2)
    asked, real = [], applicability.skip_reason
    monkeypatch.setattr(applicability, "skip_reason", lambda *a, **k: asked.append(1) or real(*a, **k))
    monkeypatch.setattr(isolate, "run_child", lambda *a, **k: pytest.fail("a skipped rung started a child"))
    ctx = _context("workers", tmp_path)
    rung = next(r.index for r in ctx.ladder.rungs if r.value == 4)
    outcome = rungs.run_rung(ctx, rung, 0, Machine(cuda_available=False))
    assert (outcome.how, outcome.record.status, len(asked)) == ("skipped", "skipped", 1)
    assert outcome.message == "data.num_workers=4 is more than the 2 CPUs this process may use"
    stored = load_runs(tmp_path)
    assert list(stored["status"]) == ["skipped"] and list(stored["rung"]) == [rung]


def _persistent_worker_rungs():
    """(ladder, rung) of every shipped rung that turns persistent workers on."""
    for name in SHIPPED:
        for r in ladder_mod.load(name).rungs[1:]:
            if r.key == "data.persistent_workers" and r.value is True:
                yield name, r.index


def _epoch_boundaries(settings: dict, overrides: dict | None = None) -> int:
    """Epoch boundaries among the measured steps of a rung's settings at its size: a step ``s`` with
    ``s % epoch_steps == 0`` starts a new epoch (and, without persistent workers, new workers). ``steps=auto``
    counts its shortest window, up to the rule's first check."""
    from harness.config.resolution import _fill_from_size
    from harness.run.child.stopping import AUTO_FIRST_CHECK

    cfg = config_mod.from_dict({**settings, **(overrides or {})})
    _fill_from_size(cfg)  # the size's presets (resolve would refuse the full size's GPU here)
    steps = AUTO_FIRST_CHECK if cfg.measure.steps == "auto" else cfg.measure.steps
    first = cfg.measure.warmup_steps
    return sum(1 for s in range(first, first + steps) if s % cfg.data.epoch_steps == 0)


@pytest.mark.parametrize("name,rung", list(_persistent_worker_rungs()))
@pytest.mark.parametrize("size", ["full", "smoke"])
def test_every_persistent_workers_rung_measures_at_least_two_epoch_boundaries(name, rung, size):
    lad = ladder_mod.load(name)
    settings = {**lad.settings(rung, size), "size": size}
    assert _epoch_boundaries(settings) >= 2, f"{name} rung {rung} ({size}): persistent workers cannot act"


def test_the_a100_persistent_workers_rung_acts_in_the_gpu_runs_short_window_too():
    # its GPU runs read every item from disk, seconds a step, so they measure 2 warm-up + 15 steps
    lad = ladder_mod.load("a100_volume")
    (name, rung), = [(n, r) for n, r in _persistent_worker_rungs() if n == "a100_volume"]
    short = {"measure.warmup_steps": 2, "measure.steps": 15}
    assert _epoch_boundaries({**lad.settings(rung, "full"), "size": "full"}, short) == 2


def test_the_scaling_ladders_ranks_load_their_batches_in_loader_workers():
    lad = ladder_mod.load("scaling")
    assert all(lad.settings(r.index, "full")["data.num_workers"] >= 4 for r in lad.rungs)


def test_a_ladder_on_a_workload_of_a_users_config_folder_parses_without_that_folder():
    # a climb writes such a ladder and checks it loads: the workload's own defaults matter only to workload.* rungs
    lad = ladder_mod.parse("mine", {"workload": "tiny_net", "rungs": [{"set": {"channels_last": True}}]})
    assert lad.workload == "tiny_net" and lad.rungs[1].key == "channels_last"


def test_the_imagenet_storage_ladder_makes_the_same_changes_as_the_in_ram_one():
    storage, in_ram = ladder_mod.load("resnet50_storage"), ladder_mod.load("resnet50_aggressive")
    for size in ("full", "smoke"):
        assert [r.change(size) for r in storage.rungs] == [r.change(size) for r in in_ram.rungs]
        extra = {k: v for k, v in storage.settings(0, size).items() if k not in in_ram.settings(0, size)}
        assert set(extra) == {"data.source", "data.cache", "data.page_cache", "data.read_latency_ms",
                              "data.storage_items_per_s"}


@pytest.mark.slow
def test_the_workers_cap_ladder_sweeps_at_the_cpu_size_and_judges_the_two_workers_the_guides_user_gets(tmp_path):
    """connectomics_workers_cap: 1 -> 2 workers carries the guide's 1.5-2x (what its framework's cached loader runs of
    "num_workers: 4"), rung 2 goes on to 4 with no claim."""
    from tests.conftest import harness_cli

    out = harness_cli("sweep", "+ladder=connectomics_workers_cap", "measure.steps=3", "measure.warmup_steps=1",
                      "sweep.repeats=1", "sweep.remeasure_busy=false", f"results_dir={tmp_path / 'results'}")
    assert out.returncode == 0, out.stdout + out.stderr
    lines = [line for line in out.stdout.splitlines() if line.startswith("| ")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    cells = {row[1]: row for row in ([c.strip() for c in line.strip("|").split("|")] for line in lines[1:])}
    claim, status = head.index("guide claims"), head.index("status")
    assert cells["data.num_workers=2"][claim] == "1.5-2x" and cells["data.num_workers=4"][claim] == "-"
    assert all(cells[k][status].startswith("ok") for k in ("data.num_workers=2", "data.num_workers=4"))


@pytest.mark.slow
def test_the_imagenet_storage_ladder_sweeps_at_the_cpu_size_through_its_shared_ceiling(tmp_path):
    """resnet50_storage: every rung runs from the storage-bound start through the shared ceiling (the TF32 rung is a
    GPU's), and the table carries the guide's claims where the ladder puts them."""
    from tests.conftest import harness_cli

    out = harness_cli("sweep", "+ladder=resnet50_storage", "measure.steps=3", "measure.warmup_steps=1",
                      "sweep.repeats=1", "sweep.remeasure_busy=false", f"results_dir={tmp_path / 'results'}",
                      timeout=3600)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = [line for line in out.stdout.splitlines() if line.startswith("| ")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    cells = {row[1]: row for row in ([c.strip() for c in line.strip("|").split("|")] for line in lines[1:])}
    claim, status = head.index("guide claims"), head.index("status")
    assert [cells[k][claim] for k in ("batch_size=12", "data.num_workers=2", "data.mixup=false")] == ["1.5x"] * 2 + [
        "1.1x"]
    assert cells["tf32=true"][status].startswith("skipped")
    assert all(cells[k][status].startswith("ok") for k in cells if k != "tf32=true"), out.stdout
    assert "10-15x" in out.stdout and "Near 2x by the guide's own figures" in out.stdout
