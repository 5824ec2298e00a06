"""The command line as a user meets it: help, bad input, one run, exit codes."""

import os
import subprocess
import sys

import pytest

from harness.store import load_runs
from tests.conftest import REPO, TINY_MODEL_ARGS, harness_cli, in_process

TINY = ("measure.steps=3", "measure.warmup_steps=1")


def test_help_lists_the_subcommands():
    out = harness_cli("--help")
    assert out.returncode == 0
    for command in ("run", "sweep", "table", "plot", "compare", "report", "baseline", "check"):
        assert f"  {command} " in out.stdout


def test_unknown_subcommand_suggests_the_close_one():
    out = harness_cli("swep")
    assert out.returncode == 2 and "Did you mean 'sweep'" in out.stderr


def test_unknown_setting_stops_before_anything_runs(results, capfd):
    out = in_process(capfd, "run", "data.num_worker=2", f"results_dir={results}")
    assert out.returncode == 2
    assert "unknown setting 'data.num_worker'" in out.stderr and "data.num_workers" in out.stderr
    assert not results.exists()


def test_a_climb_setting_given_to_another_command_is_refused_not_ignored(results):
    for command in ("run", "sweep"):
        out = harness_cli(command, "climb.budget_min=5", f"results_dir={results}")
        assert out.returncode == 2 and "Traceback" not in out.stderr
        assert f"'climb.budget_min=5' is a setting of `python -m harness climb`; `{command}` does not take it" \
            in out.stderr
    assert not results.exists()


def test_a_ladder_given_to_a_command_that_takes_none_is_refused_not_ignored(results, capfd):
    for command in ("run", "noise", "climb", "fit"):
        out = in_process(capfd, command, "+ladder=phase2", f"results_dir={results}")
        assert out.returncode == 2 and "Traceback" not in out.stderr
        assert out.stderr.startswith(f"error: '+ladder=phase2': `{command}` takes no ladder; a ladder is measured by "
                                     "`python -m harness sweep +ladder=NAME`")
    assert not results.exists()


@pytest.mark.parametrize("command, override, says", [
    ("run", "batch_size=abc", "batch_size='abc' is not valid: batch_size takes a whole number"),
    ("run", "timeout_s=abc", "timeout_s='abc' is not valid: timeout_s takes a number"),
    ("run", "channels_last=maybe", "channels_last='maybe' is not valid: channels_last takes true or false"),
    ("run", "workload.input_shape=abc", "workload.input_shape='abc' is not valid: workload.input_shape takes a list"),
    ("climb", "climb.budgetmin=3", "unknown setting 'climb.budgetmin'. Did you mean 'climb.budget_min'"),
    ("fit", "fit.maxx=3", "unknown setting 'fit.maxx'. Did you mean 'fit.max' or 'fit.axis' or 'fit.min'? Valid "
                          "choices: fit.axis, fit.max, fit.min"),
])
def test_a_value_of_the_wrong_type_or_an_own_setting_misspelt_is_one_line_naming_what_is_valid(
        results, capfd, command, override, says):
    out = in_process(capfd, command, override, f"results_dir={results}")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert out.stderr.startswith(f"error: {says}") and not results.exists()


def test_a_reader_that_stops_early_ends_help_without_a_traceback():
    # `python -m harness run --help | head -1`, the reader gone before anything is written: deterministic
    import signal

    child = subprocess.Popen([sys.executable, "-m", "harness", "run", "--help"], cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    child.stdout.close()
    err = child.stderr.read()
    assert child.wait() == 128 + signal.SIGPIPE and "Traceback" not in err, err


def test_contradiction_is_explained(results, capfd):
    out = in_process(capfd, "run", "data.prefetch_factor=2", f"results_dir={results}")
    assert out.returncode == 2 and "needs data.num_workers > 0" in out.stdout + out.stderr


def test_a_bad_multiprocessing_context_is_one_line_naming_the_valid_ones(results, capfd):
    out = in_process(capfd, "run", "data.num_workers=1", "data.multiprocessing_context=spwan",
                     f"results_dir={results}")
    assert out.returncode == 2 and "Traceback" not in out.stderr and not results.exists()
    assert out.stderr.strip().splitlines() == ["error: unknown data.multiprocessing_context 'spwan'. Did you mean "
                                               "'spawn'? Valid choices: fork, forkserver, spawn"]


def test_a_run_prints_a_summary_and_stores_one_ok_record(measured_run):
    # `python -m harness run workload=unet3d measure.steps=3 measure.warmup_steps=1`, measured once for the session
    assert "no CUDA GPU here: running the small CPU size" in measured_run.stdout
    for line in ("throughput", "step time", "data wait", "host memory", "status"):
        assert line in measured_run.stdout
    frame = load_runs(measured_run.results)
    assert list(frame["status"]) == ["ok"] and frame["samples_per_s"].iloc[0] > 0


def test_a_failed_run_exits_non_zero_and_is_still_stored(results):
    out = harness_cli("run", *TINY_MODEL_ARGS, "debug.fault=oom", "debug.fault_step=0", "measure.steps=2",
                      "measure.warmup_steps=1", f"results_dir={results}")
    assert out.returncode == 1
    assert list(load_runs(results)["status"]) == ["oom"]


def test_loader_workers_far_beyond_the_cpus_are_refused_in_one_line_before_anything_runs(results, capfd):
    bound = 4 * len(os.sched_getaffinity(0))
    out = in_process(capfd, "run", "data.num_workers=999999", "measure.steps=5", f"results_dir={results}")
    assert out.returncode == 2
    assert (out.stdout + out.stderr).strip().splitlines() == [
        f"error: data.num_workers=999999 is more than {bound} loader workers, the bound here (4 for each of the "
        f"{bound // 4} CPUs this process may use): use data.num_workers={bound} or fewer"]
    assert not results.exists()


def test_loader_workers_above_the_cpus_are_one_warning_line(tmp_path, capfd):
    cpus = len(os.sched_getaffinity(0))
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")  # the run stops at the results folder, after the settings were resolved
    out = in_process(capfd, "run", f"data.num_workers={cpus + 1}", f"results_dir={not_a_folder}")
    assert out.returncode == 2
    warning, error = out.stderr.strip().splitlines()  # the warning, then the refusal: one line each
    assert warning == (f"warning: data.num_workers={cpus + 1} is more than the {cpus} CPUs this process may use: the "
                       "loader workers will take turns on them")
    assert error.startswith(f"error: results folder {str(not_a_folder)!r} cannot take records: Not a directory")


# ------------------------------------------------------------------------------------------
# exit codes, and what a refusal says


def test_every_exit_code_is_said_in_help(monkeypatch, capsys):
    # in this process: the help the command line prints is cli.main's (`--help` in a fresh interpreter:
    # test_help_lists_the_subcommands); as wide a terminal as harness_cli's
    from harness import cli

    monkeypatch.setenv("COLUMNS", "200")
    for argv in (["--help"], ["run", "--help"], ["check", "--help"], ["check", "--against", "HEAD", "--help"]):
        try:
            code = cli.main(argv)
        except SystemExit as stop:  # as the process would exit
            code = stop.code
        assert code in (0, None), argv
        stdout = capsys.readouterr().out
        assert stdout.count("exit codes:") == 1, argv
        text = stdout[stdout.index("exit codes:"):]
        for code in ("0 ", "1 ", "2 ", "3 ", "4 ", "5 ", "6 ", "128+N "):
            assert f"\n  {code}" in text, code
        assert "not in results_dir" in text and "skipped" in text
        assert "check: busy" in text and "check: undecided" in text


def test_the_readme_exit_code_table_is_the_code_s():
    """README's table lists exactly the codes ``exit_codes`` defines, each with the words of its meaning."""
    from harness.analysis.gate import answers
    from harness.commands import exit_codes

    readme = (REPO / "README.md").read_text()
    table = readme[readme.index("| code | meaning |"):].split("\n\n")[0].splitlines()[2:]
    documented = {line.split("|")[1].strip(): line.split("|")[2] for line in table}
    assert set(documented) == {code for code, _ in exit_codes.MEANINGS}
    assert (exit_codes.BUSY, exit_codes.UNDECIDED) == (answers.BUSY, answers.UNDECIDED) == (5, 6)
    assert "busy" in documented["5"] and "undecided" in documented["6"] and "regression" in documented["1"]


def test_a_skipped_run_exits_4_not_1_and_is_stored(results):
    out = harness_cli("run", "tf32=true", *TINY, f"results_dir={results}")  # TF32 cannot act on a CPU
    assert out.returncode == 4, out.stdout + out.stderr
    assert list(load_runs(results)["status"]) == ["skipped"] and "tf32=true needs a CUDA GPU" in out.stdout


def test_the_free_space_refusal_names_the_command_that_was_run(results, monkeypatch, capfd):
    import collections
    import shutil

    usage = collections.namedtuple("Usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(2**40, 2**40 - 2**20, 2**20))
    for command in ("run", "diagnose", "climb"):
        out = in_process(capfd, command, f"results_dir={results}")
        assert out.returncode == 2, out.stdout + out.stderr
        assert out.stderr.strip().splitlines() == [
            f"error: results folder {str(results)!r} has 1 MiB free; `python -m harness {command}` needs at least "
            "64 MiB. Free some space or choose results_dir=PATH"]


def test_a_value_hydra_cannot_read_says_the_quoting_that_works_and_that_quoting_runs(tmp_path):
    folder = tmp_path / "my résultats"
    out = harness_cli("run", f"results_dir={folder}", "tf32=true")
    assert out.returncode == 2 and not folder.exists()
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith(f"error: 'results_dir={folder}': Hydra cannot read the value {str(folder)!r}")
    suggested = line.split("quote it for Hydra inside the shell's quotes: ")[1]
    assert suggested == f'"results_dir=\'{folder}\'"'
    again = harness_cli("run", suggested[1:-1], "tf32=true")  # the shell's quotes taken off, as a shell would
    assert again.returncode == 4, again.stdout + again.stderr  # skipped on a CPU: stored, in that folder
    assert list(load_runs(folder)["status"]) == ["skipped"]


def test_a_flag_where_a_setting_belongs_names_the_setting(tmp_path, capsys):
    from harness import cli

    assert cli.main(["run", "--results", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: '--results': this command takes its settings as key=value, without dashes: write "
        f"results_dir={tmp_path} (every setting: python -m harness run --help)")
    assert cli.main(["sweep", "+ladder=precision", "--steps=3"]) == 2
    err = capsys.readouterr().err
    assert "'--steps=3'" in err and "Did you mean" in err and "measure.steps" in err and "Valid choices" not in err
    assert not (tmp_path / "runs").exists()


def test_the_process_ends_as_at_a_normal_exit_less_the_module_teardown(tmp_path):
    # a command's end: its threads joined, atexit run, what it printed but did not flush flushed, its exit code
    script = tmp_path / "end.py"
    script.write_text(
        "import atexit, sys, threading, time\n"
        "from pathlib import Path\n"
        "import harness.__main__ as entry\n"
        f"out = Path({str(tmp_path)!r})\n"
        "def late():\n"
        "    time.sleep(0.3)\n"
        "    (out / 'thread').write_text('joined')\n"
        "def main():\n"
        "    threading.Thread(target=late).start()\n"
        "    atexit.register(lambda: (out / 'atexit').write_text('ran'))\n"
        "    sys.stdout.write('said, not flushed')\n"
        "    return 6\n"
        "entry.main = main\n"
        "entry.run()\n"
        "(out / 'after').write_text('never')\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert (done.returncode, done.stdout) == (6, "said, not flushed"), done.stderr
    assert (tmp_path / "thread").read_text() == "joined" and (tmp_path / "atexit").read_text() == "ran"
    assert not (tmp_path / "after").exists()


def test_under_a_profiler_the_process_ends_normally_so_the_profiler_reports():
    done = subprocess.run([sys.executable, "-m", "cProfile", "-m", "harness", "--help"], capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert done.returncode == 0, done.stderr
    assert "exit codes:" in done.stdout and "Ordered by: " in done.stdout  # the profile, printed at the end
