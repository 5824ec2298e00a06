"""Campaigns: many sweeps as one Hydra multirun; a sweep is a plain loop in one process."""

from __future__ import annotations

import contextlib
import io
import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness import cli
from harness.commands import hydra_edge
from harness.config import ladder as ladder_mod
from harness.store import load_runs
from tests.conftest import ONE_ROUND, REPO, TINY_MODEL_ARGS, TINY_STEPS_ARGS, copy_store, harness_cli

TINY = ("measure.steps=2", "measure.warmup_steps=1", "sweep.repeats=1", "sweep.remeasure_busy=false")
# the tiny model: what a campaign does, not what a rung trains
TINY_RUNGS = (*TINY_MODEL_ARGS, *TINY_STEPS_ARGS, *ONE_ROUND)
TINY_LADDERS = {
    "tiny_a": "description: tiny ladder A\nworkload: unet3d\nrungs:\n  - set: {log_every_n_steps: 1}\n",
    "tiny_b": "description: tiny ladder B\nworkload: unet3d\n"
              "rungs:\n  - set: {optimizer.zero_grad_set_to_none: false}\n",
}


def _tiny_conf(root: Path, patch: pytest.MonkeyPatch) -> Path:
    conf = root / "conf"
    shutil.copytree(REPO / "harness" / "conf", conf)
    for name, text in TINY_LADDERS.items():
        (conf / "ladder" / f"{name}.yaml").write_text(text)
    patch.setattr(hydra_edge, "CONF_DIR", conf)
    patch.setattr(ladder_mod, "LADDER_DIR", conf / "ladder")
    patch.chdir(root)  # Hydra's multirun folder goes here, not into the repository
    return conf


@pytest.fixture
def tiny_conf(tmp_path, monkeypatch) -> Path:
    """The repository's conf/ plus two one-rung ladders, for campaigns that take seconds."""
    return _tiny_conf(tmp_path, monkeypatch)


@pytest.fixture(scope="module")
def campaign(tmp_path_factory) -> SimpleNamespace:
    """ONE measured campaign, tiny_a and tiny_b on the tiny model: its exit code, what it printed, its store. The
    tests read it; a test that adds to the store works on a copy."""
    root = tmp_path_factory.mktemp("campaign")
    printed = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(printed):
        _tiny_conf(root, patch)
        code = cli.main(["sweep", "-m", "+ladder=tiny_a,tiny_b", *TINY_RUNGS, f"results_dir={root / 'results'}"])
    return SimpleNamespace(code=code, out=printed.getvalue(), results=root / "results")


def test_a_campaign_stores_one_complete_sweep_per_combination_under_one_id(campaign, tiny_conf, capsys):
    assert campaign.code == 0, campaign.out
    frame = load_runs(campaign.results)
    assert frame["campaign_id"].nunique() == 1 and frame["campaign_id"].iloc[0].startswith("campaign-")
    per_sweep = frame.groupby("sweep_id")["rung"].apply(sorted)
    assert sorted(per_sweep.tolist()) == [[0, 1], [0, 1]] and set(frame["ladder"]) == {"tiny_a", "tiny_b"}
    assert "### campaign campaign-" in campaign.out and "2 sweeps" in campaign.out

    assert cli.main(["table", "--results", str(campaign.results), "--campaign", "latest"]) == 0
    table = capsys.readouterr().out
    assert table.count("### sweep ") == 2 and "log_every_n_steps=1" in table
    assert "optimizer.zero_grad_set_to_none=false" in table


@pytest.mark.slow  # a whole scenario in fresh processes: the default tier keeps its cheaper siblings
def test_a_campaign_climbs_a_ladder_the_results_folder_holds(campaign, tiny_conf, tmp_path, capsys):
    # climb writes its ladders to <results_dir>/ladders/, which is not a Hydra config group: the campaign must
    # find them there as a single sweep does, beside a shipped ladder (its rungs were measured by the campaign above:
    # cached here, as the same settings are)
    results = copy_store(campaign.results, tmp_path / "results")
    (results / ladder_mod.USER_LADDERS).mkdir(parents=True)
    (results / ladder_mod.USER_LADDERS / "climbed.yaml").write_text(TINY_LADDERS["tiny_a"].replace("A", "climbed"))
    code = cli.main(["sweep", "-m", "+ladder=climbed,tiny_b", *TINY_RUNGS, f"results_dir={results}"])
    out = capsys.readouterr().out
    assert code == 0, out
    frame = load_runs(results)
    frame = frame[~frame["campaign_id"].isin(load_runs(campaign.results)["campaign_id"])]  # this campaign's
    assert set(frame["ladder"]) == {"climbed", "tiny_b"} and frame["campaign_id"].nunique() == 1
    assert sorted(frame.groupby("sweep_id")["rung"].apply(sorted).tolist()) == [[0, 1], [0, 1]]


def test_the_config_search_path_gains_a_folder_after_those_given():
    assert hydra_edge.add_search_dir(["a=1"], Path("/x")) == ["a=1", "hydra.searchpath=[file:///x]"]
    assert hydra_edge.add_search_dir(["hydra.searchpath=[file:///u]", "b=2"], Path("/x")) == [
        "hydra.searchpath=[file:///u,file:///x]", "b=2"]


def test_a_campaign_is_every_combination_of_the_values_first_key_outermost():
    from harness.sweeps import campaign as campaign_mod

    argv = ["+ladder=a,b", "seed=range(1,3)", "model.sizes=[1,2]", "workload=x,y", "seed=7"]
    jobs = campaign_mod.expand(hydra_edge.sweep_alternatives(argv))
    # seed given twice: its first place, its last values (as Hydra's basic sweeper); a list is one value
    assert jobs == [[f"+ladder={lad}", "seed=7", "model.sizes=[1,2]", f"workload={w}"] for lad in "ab" for w in "xy"]
    with pytest.raises(ValueError, match="'seed=interval\\(0,1\\)': a campaign runs one sweep per value"):
        hydra_edge.sweep_alternatives(["seed=interval(0,1)"])
    assert campaign_mod.gives_several_values("a,b") and campaign_mod.gives_several_values("range(1,3)")
    assert not campaign_mod.gives_several_values("[1,2]") and not campaign_mod.gives_several_values("2")


def test_a_campaign_checks_every_sweep_before_any_runs(tiny_conf, results, capsys):
    code = cli.main(["sweep", "-m", "+ladder=tiny_a,nope", *TINY, f"results_dir={results}"])
    assert code == 2 and "unknown ladder 'nope'" in capsys.readouterr().err
    assert not results.exists()


@pytest.mark.slow  # a whole scenario in fresh processes: the default tier keeps its cheaper siblings
def test_a_requeued_campaign_job_keeps_the_rungs_it_measured(campaign, tiny_conf, tmp_path, capsys):
    """A requeued job gets the same sweep id (campaign id + job number) and measures only what is missing."""
    from harness.commands import sweep as sweep_cli

    results = copy_store(campaign.results, tmp_path / "results")
    first = load_runs(results)
    first = first[first["ladder"] == "tiny_a"]
    job, campaign_id = first["sweep_id"].iloc[0], first["campaign_id"].iloc[0]
    killed = first.loc[first["rung"] == 1, "run_id"].iloc[0]
    (results / "runs" / f"{killed}.parquet").unlink()  # the job was killed there
    plan = sweep_cli.plan_sweep(["+ladder=tiny_a", *TINY_RUNGS, f"results_dir={results}"])
    assert sweep_cli.run_sweep(plan, sweep_id=job, campaign_id=campaign_id) == 0
    assert "already measured in this sweep" in capsys.readouterr().out
    again = load_runs(results)
    again = again[again["sweep_id"] == job]
    assert sorted(again["rung"]) == [0, 1] and killed not in set(again["run_id"])
    assert again.loc[again["rung"] == 0, "run_id"].iloc[0] == first.loc[first["rung"] == 0, "run_id"].iloc[0]


def test_a_parallel_launcher_on_one_machine_is_called_out():
    from harness.sweeps.campaign import BASIC_LAUNCHER, launcher_warning

    assert launcher_warning(BASIC_LAUNCHER) == ""
    submitit = "hydra_plugins.hydra_submitit_launcher.submitit_launcher"
    assert "AT THE SAME TIME" in launcher_warning(f"{submitit}.LocalLauncher")
    assert "whole nodes" in launcher_warning(f"{submitit}.SlurmLauncher")


def test_a_fully_cached_sweep_starts_no_measuring_process(campaign, tiny_conf, tmp_path, capsys, monkeypatch):
    from harness.run.parent import isolate

    results = copy_store(campaign.results, tmp_path / "results")  # tiny_a's rungs measured by the campaign
    monkeypatch.setattr(isolate, "run_child", lambda *a, **k: pytest.fail("a cached rung started a child"))
    assert cli.main(["sweep", "+ladder=tiny_a", *TINY_RUNGS, f"results_dir={results}"]) == 0
    assert capsys.readouterr().out.count(": ok (cached)") == 2  # both rungs' outcome lines


@pytest.mark.slow
def test_the_issue_campaign_phase2_and_precision_on_the_cpu(results):
    start = time.monotonic()
    out = harness_cli("sweep", "-m", "+ladder=phase2,precision", "workload=unet3d", *TINY, f"results_dir={results}",
                      timeout=3600)
    assert out.returncode == 0, out.stdout + out.stderr
    frame = load_runs(results)
    assert frame["campaign_id"].nunique() == 1 and sorted(frame.groupby("ladder").size()) == [3, 4]
    table = harness_cli("table", "--results", str(results), "--campaign", "latest")
    assert table.returncode == 0 and table.stdout.count("### sweep ") == 2, time.monotonic() - start


@pytest.mark.slow
def test_a_campaign_through_submitit_local(results, tmp_path):
    """Each sweep a submitit job in its own process (pip install -e '.[slurm]'); the jobs run at the same
    time, which the command calls out."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    out = harness_cli("sweep", "-m", "+ladder=selftest", "workload=unet3d,basic_unet3d",
                      "hydra/launcher=submitit_local", f"hydra.sweep.dir={tmp_path / 'multirun'}", *TINY,
                      f"results_dir={results}", timeout=3600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "AT THE SAME TIME" in out.stderr
    frame = load_runs(results)
    assert frame["campaign_id"].nunique() == 1 and frame["sweep_id"].nunique() == 2 and len(frame) == 8
    assert "### campaign campaign-" in out.stdout


def test_a_results_folder_that_cannot_take_the_ladder_copies_is_refused(tiny_conf, results, capsys, monkeypatch):
    from harness.sweeps import campaign as campaign_mod

    def unwritable(ladders):
        raise PermissionError(13, "Permission denied", str(results / campaign_mod.CAMPAIGN_LADDERS))

    monkeypatch.setattr(campaign_mod, "results_ladder_roots", unwritable)
    code = cli.main(["sweep", "-m", "+ladder=tiny_a", *TINY, f"results_dir={results}"])
    err = capsys.readouterr().err
    assert code == 2 and "cannot copy the results folder's ladders" in err and "Permission denied" in err
    assert not (results / "runs").exists()
