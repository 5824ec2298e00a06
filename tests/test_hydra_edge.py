"""How the commands drive Hydra: a single run composed once and its task called with that config; a campaign and
Hydra's own flags through Hydra's command line, given their arguments; ``sys.argv`` never read nor rewritten."""

from __future__ import annotations

import sys

import pytest
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig

from harness import shell
from harness.commands import hydra_edge

NOT_OURS = ["python -m harness", "--not-a-flag-of-hydras", "seed=999"]  # argparse would stop on it, if it read it


@pytest.fixture
def argv(monkeypatch):
    monkeypatch.setattr(sys, "argv", list(NOT_OURS))
    yield
    assert sys.argv == NOT_OURS


def test_a_single_run_is_composed_once_and_its_task_called_outside_hydras_runtime(argv, monkeypatch):
    composed, seen = [], []
    compose = hydra_edge.compose_settings
    monkeypatch.setattr(hydra_edge, "compose_settings", lambda o, **kw: composed.append(o) or compose(o, **kw))

    def task(cfg) -> int:
        seen.append((cfg.seed, cfg.batch_size, GlobalHydra.instance().is_initialized(), sys.argv == NOT_OURS))
        return 4

    assert hydra_edge.hydra_app(["seed=7", "batch_size=3"], task) == 4
    assert len(composed) == 1 and seen == [(7, 3, False, True)]


def test_a_bad_value_is_one_line_and_exit_2_before_the_task(argv, capsys):
    assert hydra_edge.hydra_app(["workload=nope"], lambda cfg: pytest.fail("ran")) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: workload=nope is not a choice; valid choices:") and "\n" not in err


def test_a_multirun_runs_one_job_per_value_with_hydras_job_config(argv, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the multirun's folder: outputs/campaigns/<campaign>
    jobs = []

    def task(cfg) -> int:
        jobs.append((HydraConfig.get().job.num, cfg.seed, list(HydraConfig.get().overrides.task), sys.argv == NOT_OURS))
        return cfg.seed

    assert hydra_edge.hydra_app(["seed=1,2", "campaign=c1"], task, multirun=True) == 2
    assert jobs == [(0, 1, ["seed=1", "campaign=c1"], True), (1, 2, ["seed=2", "campaign=c1"], True)]
    assert (tmp_path / "outputs" / "campaigns" / "c1").is_dir() and not GlobalHydra.instance().is_initialized()


def test_a_bad_value_of_any_job_of_a_multirun_is_one_line_and_exit_2_before_any_job(argv, tmp_path, monkeypatch,
                                                                                   capsys):
    monkeypatch.chdir(tmp_path)
    assert hydra_edge.hydra_app(["batch_size=2,abc"], lambda cfg: pytest.fail("ran"), multirun=True) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: batch_size='abc' is not valid: batch_size takes a whole number"
    assert not (tmp_path / "outputs").exists()


def test_hydras_own_flags_read_the_arguments_given(argv, capsys):
    assert hydra_edge.hydra_app(["--cfg", "job", "seed=11"], lambda cfg: pytest.fail("ran")) == 0
    out = capsys.readouterr().out
    assert "seed: 11\n" in out and "workload:" in out


def test_the_config_search_path_is_read_and_extended_in_one_place():
    given = ["a=1", "+hydra.searchpath=[file:///x, file:///my%20conf]"]
    assert shell.with_search_path(given, ["file:///y"]) == ["a=1", "+hydra.searchpath=[file:///x,file:///my%20conf,"
                                                            "file:///y]"]
    assert shell.with_search_path(["a=1"], ["file:///y", "file:///z"]) == ["a=1", "hydra.searchpath=[file:///y,"
                                                                           "file:///z]"]
    assert shell.with_search_path(given, []) is given
    assert hydra_edge.config_dirs(given + ["hydra.searchpath=[pkg://mine]"]) == ["/x", "/my conf"]
