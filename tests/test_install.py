"""The harness as a tool installed into a user's own repository: ``init`` writes configs that compose through the
search path, a user's own ``models`` package imports beside the reference models, the wrong ``harness`` package is
refused in one line, and the move of the reference models to ``harness_models`` keeps every stored record's cache
keys (an old store read again). The slow tier builds the wheel and runs it as a user would, from an empty folder.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from harness import cli
from harness import config as config_mod
from harness import store
from harness.commands import hydra_edge
from harness.commands import init as init_mod
from harness.commands import sweep as sweep_cmd
from harness.conf import CONF_DIR, PROJECT_DIR
from harness.config import ladder as ladder_mod
from harness.config import workload as workloads
from harness.run.parent import fingerprint
from harness.sweeps import replay
from tests.conftest import ONE_ROUND, REPO, TINY_STEPS_ARGS


@pytest.fixture
def user_repo(tmp_path, monkeypatch) -> Path:
    """An empty folder, the current one: a user's repository."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


# ------------------------------------------------------------------------------------------
# init


def test_init_writes_a_workload_and_a_ladder_that_compose_through_the_search_path(user_repo, capsys):
    assert cli.main(["init"]) == 0
    out = capsys.readouterr().out
    assert f"{PROJECT_DIR}/workload/my_model.yaml" in out and "python -m harness sweep +ladder=my_ladder" in out
    assert "echo results/ >> .gitignore" in out
    overrides = hydra_edge.with_config_dirs(["workload=my_model", "size=smoke"])  # nothing given: found here
    assert overrides[-1] == f"hydra.searchpath=[{(user_repo / PROJECT_DIR).as_uri()}]"
    cfg = config_mod.from_dict(hydra_edge.plain_settings(hydra_edge.compose_settings(overrides)))
    assert cfg.workload.name == "my_model" and cfg.workload.model["_target_"] == "torchvision.models.resnet18"
    assert cfg.workload.sample_shape("smoke") == [3, 32, 32]
    assert "my_ladder" in ladder_mod.available() and "my_ladder" in sweep_cmd.ladder_list()
    plan = sweep_cmd.plan_sweep(hydra_edge.with_config_dirs(["+ladder=my_ladder", "size=smoke"]))
    assert plan.settings["workload"]["name"] == "my_model"  # the ladder's own workload, a file of the user's
    assert [r.change("smoke") for r in plan.ladder.rungs[1:]] == ["precision=bf16-mixed", "channels_last=true",
                                                                  "data.num_workers=2"]


def test_init_refuses_a_folder_that_is_there_in_one_line_naming_it(user_repo, capsys):
    (user_repo / PROJECT_DIR).mkdir()
    assert cli.main(["init"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith(f"error: {user_repo / PROJECT_DIR} already exists")
    assert not any((user_repo / PROJECT_DIR).iterdir())


def test_the_project_folder_is_not_named_so_that_it_shadows_the_package():
    assert PROJECT_DIR != "harness" and not PROJECT_DIR.isidentifier()  # not importable: a hyphen
    assert set(init_mod.FILES) == {"workload/my_model.yaml", "ladder/my_ladder.yaml"}


# ------------------------------------------------------------------------------------------
# beside a user's own packages


def test_a_user_models_package_imports_beside_the_reference_models(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "__init__.py").write_text("")
    (tmp_path / "models" / "nets.py").write_text("import torch\n\nNet = torch.nn.Linear\n")
    code = textwrap.dedent("""
        import models.nets, harness_models.classification2d
        from harness.config import targets, workload as workloads
        targets.check_targets(workloads.builtin("resnet50"))  # the shipped workload's targets, its loss included
        spec = workloads.builtin("custom")
        spec.model = {"_target_": "models.nets.Net"}
        targets.check_targets(spec)
        print(models.nets.__file__, harness_models.classification2d.__file__)
    """)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    mine, reference = done.stdout.split()
    assert Path(mine).is_relative_to(tmp_path) and Path(reference).is_relative_to(REPO / "harness_models")


def test_the_wrong_harness_package_is_refused_in_one_line(tmp_path):
    # the other distribution named `harness` installed over this one: its __init__, this one's __main__
    other = tmp_path / "harness"
    other.mkdir()
    (other / "__init__.py").write_text('__version__ = "0.1.0"\n')
    shutil.copy(REPO / "harness" / "__main__.py", other / "__main__.py")
    done = subprocess.run([sys.executable, "-m", "harness", "table"], cwd=tmp_path, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(tmp_path)), timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and f"imported from {other} is not this tool's" in done.stderr
    assert "pip uninstall -y harness, then install training-harness again" in done.stderr


# ------------------------------------------------------------------------------------------
# stored records: the move of the reference models changes no cache key


def test_an_old_store_still_matches_its_config_hashes(tmp_path):
    """results/h100 was stored before the move: every record's settings hash again to the config_hash it holds."""
    runs = store.load_runs(shutil.copytree(REPO / "results" / "h100" / "runs", tmp_path / "runs").parent)
    assert len(runs) > 0
    for _, row in runs.iterrows():
        values = json.loads(row["config_json"])
        values["workload"] = workloads.builtin(values["workload"])  # stored by name: a shipped one as shipped
        assert config_mod.config_hash(config_mod.from_dict(values)) == row["config_hash"], row["run_id"]


@pytest.mark.parametrize("model,stored_hash", [
    # config_hash as the harness computed it before the move, when the target was models.segmentation3d.unet3d
    ({"_target_": "harness_models.segmentation3d.unet3d", "in_channels": 1, "out_channels": 2, "dropout": 0.1},
     "d0ee796dd23908ab"),
    ({"_target_": "harness_models.classification2d.resnet50", "num_classes": 10}, "d32c7ce15cdedb62"),
])
def test_a_workload_naming_the_reference_models_hashes_as_before_they_moved(model, stored_hash):
    shipped = "unet3d" in model["_target_"]  # the shipped unet3d with one argument more; else an inline model
    spec = workloads.builtin("unet3d" if shipped else "custom")
    spec.model = model
    spec.input_shape = spec.input_shape if shipped else [3, 32, 32]
    cfg = config_mod.from_dict({"workload": spec, "size": "smoke", "device": "cpu"})
    assert config_mod.config_hash(cfg) == stored_hash


def test_a_record_stored_before_the_move_is_measured_again_with_the_reference_models_new_name():
    stored = {"name": "custom", "model": {"_target_": "models.segmentation3d.unet3d", "in_channels": 1},
              "loss": {"_target_": "models.segmentation3d.dice_ce_loss"}, "checkpoint_units": ["models.mine.Block"]}
    override, name, text = replay.workload_override(stored, 0)
    assert override == f"workload={name}"
    assert "harness_models.segmentation3d.unet3d" in text and "harness_models.segmentation3d.dice_ce_loss" in text
    assert "- models.mine.Block" in text  # not a module of the reference models: the user's own, kept


def test_the_move_alone_keeps_the_code_fingerprint(tmp_path):
    """The fingerprint the harness computed before the move, for a tree whose reference models sat in models/, is
    what it computes now for the same sources in harness_models/ (records of unchanged code stay in the cache)."""
    tree = {"harness/__init__.py": "", "harness/run/__init__.py": "", "harness/run/child/__init__.py": "",
            "harness/run/child/measure.py": "def loop(n):\n    return [n] * n\n",
            "harness_models/__init__.py": '"""The reference models."""\n',
            "harness_models/nets.py": "import torch\n\nWIDTH = 8\n\n\ndef net():\n"
                                      "    return torch.nn.Linear(WIDTH, 2)\n"}
    for rel, text in tree.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert "harness_models/nets.py" in fingerprint.measured_files(tmp_path)
    assert fingerprint.code_fingerprint(tmp_path) == "2776f48f590eb7a7"  # before the move, of models/nets.py


def test_the_shipped_workloads_name_the_reference_models_by_their_package():
    for path in (CONF_DIR / "workload").glob("*.yaml"):
        targets = [line.split(":", 1)[1].strip() for line in path.read_text().splitlines()
                   if line.strip().startswith("_target_:")]
        assert not [t for t in targets if t.startswith("models.")], path.name


# ------------------------------------------------------------------------------------------
# the wheel, as a user installs it


def _venv_with_the_wheel(tmp_path: Path) -> Path:
    """A fresh virtual environment holding the wheel built from this tree (``pip install --no-deps``); the
    dependencies (torch, MONAI, Hydra, ...) are this interpreter's, made visible by one ``.pth`` line, instead of
    ~6 GB downloaded again. That line adds a folder to the path without running its ``.pth`` files, so an
    editable install of the checkout there is not seen: only the wheel's ``harness`` and ``harness_models`` are."""
    source = tmp_path / "source"  # what the wheel is built from, outside the checkout: the build leaves its files
    for name in ("harness", "harness_models"):
        shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(source)],
                   env=_without_pythonpath(), check=True, timeout=600)  # as `pip install CHECKOUT`: isolated build
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python, env = venv / "bin" / "python", _without_pythonpath()  # a checkout on the path would be "installed"
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], env=env,
                             check=True, capture_output=True, text=True).stdout.strip()
    (Path(purelib) / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([python, "-m", "pip", "install", "--no-deps", "-q", *map(str, wheels.glob("*.whl"))], env=env,
                   check=True, timeout=600)
    return venv


def _without_pythonpath() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


@pytest.mark.slow
def test_the_wheel_runs_from_an_empty_folder_init_a_sweep_of_its_ladder_table_and_check(tmp_path):
    venv = _venv_with_the_wheel(tmp_path)
    folder = tmp_path / "user-repo"
    folder.mkdir()
    env = dict(_without_pythonpath(), COLUMNS="200")

    def harness(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(venv / "bin" / "harness"), *args], cwd=folder, env=env, capture_output=True,
                              text=True, timeout=1800)

    where = subprocess.run([venv / "bin" / "python", "-c", "import harness, harness_models; "
                            "print(harness.__file__, harness_models.__file__)"], cwd=folder, env=env,
                           capture_output=True, text=True)
    assert where.returncode == 0, where.stderr
    assert all(Path(p).is_relative_to(venv) for p in where.stdout.split()), where.stdout
    assert harness("init").returncode == 0 and (folder / PROJECT_DIR / "ladder" / "my_ladder.yaml").is_file()
    tiny = ("size=smoke", *TINY_STEPS_ARGS, *ONE_ROUND)
    for ladder in ("my_ladder", "phase2"):  # the user's own ladder, then a shipped one on the reference models
        swept = harness("sweep", f"+ladder={ladder}", *tiny)
        assert swept.returncode == 0, swept.stdout[-3000:] + swept.stderr[-3000:]
        table = harness("table")
        assert table.returncode == 0 and f"ladder {ladder}" in table.stdout, table.stderr
    runs = store.load_runs(folder / "results")
    assert sorted(runs["ladder"].value_counts().items()) == [("my_ladder", 4), ("phase2", 4)]
    assert set(runs["harness_version"]) == {"0.1.0"}
    assert set(runs["code_fingerprint"]) == {fingerprint.code_fingerprint()}  # the checkout's: same code, same key
    assert harness("baseline", "save", "first").returncode == 0
    checked = harness("check", "--baseline", "first")
    # 0: decided unchanged; 5: a busy machine; 6: undecided (one run a side: nothing decides it)
    assert checked.returncode in (0, 5, 6) and "result:" in checked.stdout, checked.stdout + checked.stderr
    assert not (folder / "outputs").exists() and sorted(p.name for p in folder.iterdir()) == [PROJECT_DIR, "results"]


CONVNET = """\
import torch


class ConvNet(torch.nn.Module):
    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.head = torch.nn.Linear(4, num_classes)

    def forward(self, x):
        return self.head(self.conv(x).mean(dim=(2, 3)))
"""


@pytest.mark.slow
def test_the_installed_script_imports_the_users_own_package_from_the_folder_it_runs_in(tmp_path):
    """The ``harness`` script, not ``python -m``, from a folder holding its own ``models/``: init, the workload
    pointed at models.ConvNet, the user's ladder measures it."""
    venv = _venv_with_the_wheel(tmp_path)
    folder = tmp_path / "user-repo"
    (folder / "models").mkdir(parents=True)
    (folder / "models" / "__init__.py").write_text("from models.convnet import ConvNet\n")
    (folder / "models" / "convnet.py").write_text(CONVNET)
    env = dict(_without_pythonpath(), COLUMNS="200")

    def harness(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(venv / "bin" / "harness"), *args], cwd=folder, env=env, capture_output=True,
                              text=True, timeout=1800)

    assert harness("init").returncode == 0
    workload = folder / PROJECT_DIR / "workload" / "my_model.yaml"
    workload.write_text(workload.read_text().replace("torchvision.models.resnet18", "models.ConvNet"))
    swept = harness("sweep", "+ladder=my_ladder", "size=smoke", *TINY_STEPS_ARGS, *ONE_ROUND)
    assert swept.returncode == 0, swept.stdout[-3000:] + swept.stderr[-3000:]
    runs = store.load_runs(folder / "results")
    assert len(runs) == 4 and set(runs["status"]) == {"ok"}
    specs = [json.loads(c)["workload"] for c in runs["config_json"]]
    assert {s["model"]["_target_"] for s in specs} == {"models.ConvNet"}
    assert [sorted(json.loads(f)) for f in set(runs["user_code_files"])] == [["models/convnet.py"]]


def test_the_console_script_puts_the_current_folder_first_as_python_m_does(tmp_path, monkeypatch):
    from harness import __main__ as entry

    path = ["/venv/bin", "/usr/lib/python3.11"]  # the console script's: its own folder first, not the current one
    entry.current_folder_first(path, str(tmp_path))
    assert path == [str(tmp_path), "/venv/bin", "/usr/lib/python3.11"]
    entry.current_folder_first(path, str(tmp_path))  # there already: once
    assert path == [str(tmp_path), "/venv/bin", "/usr/lib/python3.11"]
    monkeypatch.chdir(tmp_path)
    as_python_m = ["", "/usr/lib/python3.11"]  # "" is the current folder
    entry.current_folder_first(as_python_m, str(tmp_path))
    assert as_python_m == ["", "/usr/lib/python3.11"]


def test_a_console_script_finds_the_users_package_in_the_folder_it_runs_in(tmp_path):
    """A script as pip writes it, in a folder of its own: ``main`` puts the current folder on the path before any
    command looks for the user's targets."""
    (tmp_path / "bin").mkdir()
    script = tmp_path / "bin" / "harness"
    script.write_text("import sys\nfrom harness.__main__ import run\n"
                      "import harness.cli\nharness.cli.main = lambda: print(__import__('models').WHERE) or 0\n"
                      "sys.exit(run())\n")
    folder = tmp_path / "user-repo"
    (folder / "models").mkdir(parents=True)
    (folder / "models" / "__init__.py").write_text("WHERE = __file__\n")
    done = subprocess.run([sys.executable, str(script)], cwd=folder, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()) == folder / "models" / "__init__.py"
