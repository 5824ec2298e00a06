"""Every shipped ladder loads and validates; each guide's claims are in its ladder."""

import pytest

from harness import config as config_mod
from harness.config import machine
from harness.sweeps import ladder as ladder_mod
from harness.workload import applicability

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
            assert changed == {r.key}, f"{name} rung {r.index}"
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
    ("a100_volume", "data.prefetch_factor=2", (1.1, 1.2)),
    ("detr_fast", "channels_last=true", (1.1, 1.15)),
    ("resnet50_aggressive", "compile=max-autotune", (1.2, 1.2)),
    ("resnet50_aggressive", "tf32=true", (1.1, 1.1)),
    ("seresnet", "data.num_workers=4", (4, 8)),
    ("seresnet", "cudnn_benchmark=true", (1.1, 1.3)),
])
def test_guide_claims_are_transcribed(name, change, claim):
    lad = ladder_mod.load(name)
    rung = next(r for r in lad.rungs if r.change("full") == change)
    assert (rung.claim.low, rung.claim.high) == claim and rung.claim.source


def test_phase2_total_claim():
    assert ladder_mod.load("phase2").total_claim.label() == "3-4x"


def test_a_rung_changing_two_knobs_is_rejected_naming_it():
    with pytest.raises(ValueError, match=r"ladder 'bad' rung 2: changes 2 knobs"):
        ladder_mod.parse("bad", {"rungs": [{"set": {"batch_size": 4}},
                                           {"set": {"batch_size": 8, "precision": "bf16-mixed"}}]})


def test_a_rung_changing_nothing_is_rejected_naming_it():
    with pytest.raises(ValueError, match=r"ladder 'bad' rung 2: batch_size=4 is what the rung before already had"):
        ladder_mod.parse("bad", {"rungs": [{"set": {"batch_size": 4}}, {"set": {"batch_size": 4}}]})


def test_a_rung_with_an_unknown_knob_is_rejected():
    with pytest.raises(ValueError, match=r"unknown setting 'batchsize'.*Did you mean 'batch_size'"):
        ladder_mod.parse("bad", {"rungs": [{"set": {"batchsize": 4}}]})


def test_unknown_ladder_lists_the_shipped_ones():
    with pytest.raises(ValueError, match=r"unknown ladder 'phase9'.*Valid choices: .*phase2"):
        ladder_mod.load("phase9")


def test_failed_rungs_are_not_built_on():
    lad = ladder_mod.load("selftest")
    assert lad.settings(3, "smoke", frozenset({2})) == {"workload": "unet3d", "log_every_n_steps": 10, "batch_size": 4}


@pytest.mark.parametrize("name", ["resnet50_aggressive", "detr_fast"])
def test_tf32_rung_measures_tf32_on_against_an_explicit_off(name):
    # tf32=null already runs cuDNN convolutions in TF32: only tf32=false before the rung makes it measure on vs off
    lad = ladder_mod.load(name)
    rung = next(r for r in lad.rungs if r.key == "tf32")
    assert lad.settings(rung.index - 1, "full")["tf32"] is False and lad.settings(rung.index, "full")["tf32"] is True


@pytest.mark.parametrize("name", SHIPPED)
def test_no_shipped_rung_is_skipped_on_a_gpu_for_cuda_graphs(name, monkeypatch):
    monkeypatch.setattr(machine, "usable_cpus", lambda: 64)  # a GPU server's CPUs (cpus=8), not this machine's
    lad = ladder_mod.load(name)
    for r in lad.rungs:
        cfg = config_mod.resolve(config_mod.from_dict(lad.settings(r.index, "full")), cuda_available=True)
        assert applicability.not_applicable(cfg) == "", f"{name} rung {r.index}"


# --------------------------------------------------------------------------------------------
# a rung's settings on this machine


def _context(name: str, results, settings: dict | None = None, user_keys=frozenset()):
    from harness.sweeps.rungs import SweepContext

    return SweepContext(sweep_id="s", ladder=ladder_mod.load(name), settings={"results_dir": str(results),
                        **(settings or {})}, user_keys=frozenset(user_keys), repeats=2)


def test_a_rungs_config_is_the_settings_with_the_ladders_and_the_sweeps_on_top(tmp_path):
    from harness.run.runner import Machine
    from harness.sweeps.rungs import rung_config

    ctx = _context("phase2", tmp_path, {"seed": 7, "batch_size": 16, "measure": {"steps": "4"}}, {"batch_size"})
    rung = next(r.index for r in ctx.ladder.rungs if r.key == "precision")
    cfg = rung_config(ctx, rung, Machine(cuda_available=False), round_=1)
    assert (cfg.precision, cfg.seed, cfg.batch_size, cfg.measure.steps) == ("bf16-mixed", 7, 16, 4)  # the user's win
    assert (cfg.sweep.id, cfg.sweep.rung, cfg.sweep.round, cfg.sweep.repeats) == ("s", rung, 1, 2)


def test_a_ladders_workers_beyond_this_machine_skip_the_rung_and_the_users_are_refused(tmp_path, monkeypatch):
    from harness.run.runner import Machine
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
    from harness.run import isolate
    from harness.run.runner import Machine
    from harness.store import load_runs
    from harness.sweeps import rungs

    monkeypatch.setattr(machine, "usable_cpus", lambda: 2)
    asked, real = [], applicability.skip_reason
    monkeypatch.setattr(applicability, "skip_reason", lambda *a, **k: asked.append(1) or real(*a, **k))
    monkeypatch.setattr(isolate, "_run_child", lambda *a, **k: pytest.fail("a skipped rung started a child"))
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
    from harness.run.stopping import AUTO_FIRST_CHECK

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
