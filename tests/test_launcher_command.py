"""One warm launcher per command (a campaign's sweeps, a climb's runs, diagnose's three parts: every run forks
from it), and the launcher's probe verdict remembered per environment, so that the next command does not probe
again."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from harness import config as config_mod
from harness.run.parent import launcher, runner
from harness.run.parent import env as env_mod
from tests.conftest import REPO
from tests.test_launcher import _probe_config


def test_every_sweep_of_a_command_forks_from_one_launcher(results, tmp_path, monkeypatch):
    monkeypatch.setenv("FORK_PROBE_OUT", str(tmp_path / "probe.jsonl"))
    cfg = _probe_config(results)
    env, key = env_mod.environment(cfg.device)
    records = []
    with launcher.warm() as command:  # a campaign, a climb
        for _ in range(2):  # two sweeps, each opening its session as run_ladder does
            with launcher.warm() as session:
                assert session is command
                session.begin(config_mod.to_dict(cfg))
                records.append(runner.run_and_store(cfg, env, key))
        assert command.zygotes == 1 and command.sweeps == 2
    assert [r.launched_by for r in records] == ["fork", "fork"] and [r.status for r in records] == ["ok", "ok"]
    assert launcher.active() is None


def test_a_probe_verdict_is_remembered_for_the_next_command_in_the_same_environment(tmp_path):
    (tmp_path / "fine_a.py").write_text("")
    (tmp_path / "thread_b.py").write_text("import threading, time\n"
                                          "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n")
    (tmp_path / "fine_c.py").write_text("")
    code = textwrap.dedent("""
        from harness.run.parent import zygote
        zygote.preload_fork_safe(["fine_a", "thread_b", "fine_c"], probe=True)
        print(zygote.PROBED, zygote.LEFT_TO_RUNS, zygote.LEFT_WHY["thread_b"].split(":")[0])
    """)
    env = dict(os.environ, PYTHONPATH=f"{REPO}:{tmp_path}", JE_ARROW_MALLOC_CONF="background_thread:false",
               XDG_CACHE_HOME=str(tmp_path / "cache"))

    def command() -> str:
        out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout.splitlines()[-1]

    assert command() == "[3] ['thread_b'] 2 threads in the launcher"  # the first command probes the three imports
    # the next one takes the verdict and its reason: no probe, the same imports left out
    assert command() == "[] ['thread_b'] 2 threads in the launcher"
    assert (tmp_path / "cache" / "harness" / "launcher-probes.json").exists()
    env["XDG_CACHE_HOME"] = str(tmp_path / "elsewhere")  # no verdict kept there: probed again
    assert command() == "[3] ['thread_b'] 2 threads in the launcher"


def test_the_flop_count_is_made_once_per_sweep_for_a_model_and_patch_size(results, tmp_path, monkeypatch):
    from harness.run.child import startup
    from harness.workload import shared_data

    cfg = _probe_config(results)
    counted = []

    def count():
        counted.append(1)
        return 1234.0

    monkeypatch.delenv(shared_data.ENV, raising=False)
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "unwritable"))
    (tmp_path / "unwritable").write_text("a file, not a folder")  # no cache: every run counts
    assert [startup.flops_per_sample(cfg, cfg.workload, count) for _ in range(2)] == [1234.0] * 2
    assert len(counted) == 2
    monkeypatch.setenv(shared_data.ENV, str(tmp_path))
    assert [startup.flops_per_sample(cfg, cfg.workload, count) for _ in range(3)] == [1234.0] * 3
    assert len(counted) == 3  # the sweep's first run counted; the next two read its count
    cfg.data.patch_size = [16, 16, 16]  # another input: counted again
    assert startup.flops_per_sample(cfg, cfg.workload, count) == 1234.0 and len(counted) == 4


def test_the_flop_count_is_kept_for_later_commands_until_what_it_depends_on_changes(results, tmp_path, monkeypatch):
    from harness.run.child import startup
    from harness.workload import shared_data

    cfg = _probe_config(results)
    counted = []

    def count():
        counted.append(1)
        return 1234.0

    monkeypatch.delenv(shared_data.ENV, raising=False)  # single runs, no sweep
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    assert [startup.flops_per_sample(cfg, cfg.workload, count) for _ in range(3)] == [1234.0] * 3
    assert len(counted) == 1 and len(list((tmp_path / "cache" / "flops").glob("*.json"))) == 1
    monkeypatch.setattr(startup.torch, "__version__", "9.9.9")  # another torch: counted again
    assert startup.flops_per_sample(cfg, cfg.workload, count) == 1234.0 and len(counted) == 2
    cfg.measure.mode = "loader"  # another mode (a loader run counts none): counted again
    assert startup.flops_per_sample(cfg, cfg.workload, count) == 1234.0 and len(counted) == 3


def test_a_single_run_forks_from_a_launcher_started_before_its_settings_compose(results, monkeypatch):
    from harness import cli
    from harness.commands import hydra_edge
    from harness.store import load_runs
    from tests.conftest import TINY_MODEL_ARGS, TINY_STEPS_ARGS

    at_compose, real_compose = [], hydra_edge.compose_settings

    def compose(*args, **kwargs):
        session = launcher.active()
        at_compose.append(session is not None and session.zygote is not None and session.zygote.proc.poll() is None)
        return real_compose(*args, **kwargs)

    monkeypatch.setattr(hydra_edge, "compose_settings", compose)
    assert cli.main(["run", *TINY_MODEL_ARGS, *TINY_STEPS_ARGS, f"results_dir={results}"]) == 0
    assert at_compose == [True]  # the launcher was importing while the settings composed
    frame = load_runs(results)
    assert list(frame["launched_by"]) == ["fork"] and list(frame["status"]) == ["ok"]
    assert list(frame["imports_trimmed"]) == [""]  # a user's model: MONAI as MONAI imports itself
    assert launcher.active() is None


def test_a_single_runs_launcher_starts_before_the_command_imports_its_settings_or_the_store(tmp_path):
    """The launcher's imports are the run's critical path: it starts before the parent imports anything heavy."""
    script = textwrap.dedent(f"""
        import sys
        from harness import cli
        from harness.run.parent import launcher
        heavy = ("harness.commands.run", "harness.config", "harness.store", "hydra", "omegaconf", "pyarrow", "torch")
        seen, init = [], launcher.Zygote.__init__
        def noted(self, *args, **kwargs):
            seen.append([name for name in heavy if name in sys.modules])
            init(self, *args, **kwargs)
        launcher.Zygote.__init__ = noted
        print(cli.main(["run", "data=nope", "results_dir={tmp_path / 'results'}"]), seen)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.stdout.split() == ["2", "[[]]"], out.stdout + out.stderr  # started once, before any of them
    assert "data=nope is not a choice" in out.stderr


def test_a_run_that_ends_before_measuring_kills_its_launcher_at_once(results, monkeypatch):
    from harness import cli

    started = []
    real_init = launcher.Zygote.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        started.append(self.proc)

    monkeypatch.setattr(launcher.Zygote, "__init__", init)
    assert cli.main(["run", "data=nope", f"results_dir={results}"]) == 2  # a bad value: one line, exit 2
    assert len(started) == 1 and started[0].poll() is not None  # started early, gone with the command
    assert cli.main(["run", "--help"]) == 0 and len(started) == 1  # Hydra's flags: none started


def test_a_single_run_without_its_launcher_starts_fresh_and_says_nothing_of_it(results, monkeypatch, capsys):
    from harness import cli
    from harness.store import load_runs
    from tests.conftest import TINY_MODEL_ARGS, TINY_STEPS_ARGS

    monkeypatch.setenv(launcher.LAUNCH_ENV, "exec")
    monkeypatch.setattr(launcher, "_said", set())  # said before in this process or not, it would be said again
    assert cli.main(["run", *TINY_MODEL_ARGS, *TINY_STEPS_ARGS, f"results_dir={results}"]) == 0
    assert list(load_runs(results)["launched_by"]) == ["exec"]
    assert "warm launcher" not in capsys.readouterr().err


def _diagnose_launchers(monkeypatch) -> list:
    started, real_init = [], launcher.Zygote.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        started.append(self.proc)

    monkeypatch.setattr(launcher.Zygote, "__init__", init)
    return started


def test_diagnose_forks_its_three_runs_from_one_launcher_gone_with_the_command(results, monkeypatch, capsys):
    """Also the default tier's `diagnose` end to end (what it prints and stores: the command of
    test_diagnose_stores_three_parts_and_prints_a_verdict_with_its_numbers, here in this process)."""
    from harness import cli
    from harness.store import load_runs
    from tests.conftest import TINY_MODEL_ARGS
    from tests.test_diagnose import BUSY, VERDICTS

    started = _diagnose_launchers(monkeypatch)
    code = cli.main(["diagnose", *TINY_MODEL_ARGS, "measure.steps=3", "measure.warmup_steps=1",
                     f"results_dir={results}"])
    out = " ".join(capsys.readouterr().out.split())  # the console wraps long lines
    # which verdict depends on the machine: not asserted; on a busy one (another test's runs beside it) none is given
    assert (code, any(v in out for v in VERDICTS)) == (0, True) or (code, BUSY in out) == (5, True), out
    frame = load_runs(results).sort_values("rung")
    assert list(frame["status"]) == ["ok"] * 3 and list(frame["rung"]) == [0, 1, 2]
    assert list(frame["mode"]) == ["loader", "model", "train"]
    assert frame.loc[frame["mode"] == "loader", "loss_last"].isna().all()
    assert list(frame["change"]) == ["measure.mode=loader", "measure.mode=model", "measure.mode=train"]
    assert set(frame["ladder"]) == {"diagnose"} and frame["sweep_id"].str.startswith("diagnose-").all()
    assert frame["sweep_id"].nunique() == 1
    # the first waits for the launcher, as a sweep's first run does; every one is forked from it
    assert list(frame["launched_by"]) == ["fork"] * 3
    assert len(started) == 1 and started[0].poll() is not None  # one launcher, gone with the command
    assert launcher.active() is None


@pytest.mark.parametrize("stop", [KeyboardInterrupt, RuntimeError])
def test_diagnose_stopped_at_its_second_run_leaves_no_launcher_behind(results, monkeypatch, stop):
    from harness import cli
    from harness.commands import diagnose
    from harness.store import load_runs
    from tests.conftest import TINY_MODEL_ARGS

    started, real_run, calls = _diagnose_launchers(monkeypatch), diagnose.runner.run_and_store, []

    def run_and_store(*args, **kwargs):  # Ctrl-C, or a parent that fails, once the first run is stored
        calls.append(1)
        if len(calls) == 2:
            raise stop("stopped")
        return real_run(*args, **kwargs)

    monkeypatch.setattr(diagnose.runner, "run_and_store", run_and_store)
    argv = ["diagnose", *TINY_MODEL_ARGS, "measure.steps=3", "measure.warmup_steps=1", f"results_dir={results}"]
    if stop is KeyboardInterrupt:
        assert cli.main(argv) == 130  # interrupted (SIGINT)
    else:
        with pytest.raises(RuntimeError):
            cli.main(argv)
    assert list(load_runs(results)["launched_by"]) == ["fork"]  # the first run's record stays
    assert len(started) == 1 and started[0].poll() is not None
    assert launcher.active() is None


def test_noise_forks_its_runs_from_one_launcher_as_a_sweeps_runs(results, monkeypatch, capsys):
    """Also the default tier's `noise` end to end (what it prints and stores, and a later sweep's table: the checks of
    test_noise_model's test_noise_command_end_to_end, on the same command run here in this process)."""
    # the spread it calibrates is the one a sweep's verdicts are judged by: that of runs started as a sweep's are
    from harness import cli
    from harness.store import load_runs
    from tests.conftest import TINY_MODEL_ARGS
    from tests.test_noise_model import NOISE_ARGS, check_noise_command

    started = _diagnose_launchers(monkeypatch)
    assert cli.main(["noise", *NOISE_ARGS, *TINY_MODEL_ARGS, f"results_dir={results}"]) == 0
    frame = load_runs(results).sort_values("round")
    assert list(frame["status"]) == ["ok"] * 2 and set(frame["ladder"]) == {"noise"}
    assert list(frame["launched_by"]) == ["fork"] * 2
    assert len(started) == 1 and started[0].poll() is not None
    assert launcher.active() is None
    check_noise_command(capsys.readouterr().out, results)
