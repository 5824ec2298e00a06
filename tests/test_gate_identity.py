"""What a stored-baseline check compares a config by: its settings (``settings_hash``), not the user's code under
it, which the check names when it changed; a "nothing comparable" message names what differs. Synthetic records
(no runs) in the default tier; the slow tier measures a user's model before and after an edit that slows it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from harness.analysis.gate import identity
from harness.config import workload as workloads
from harness import config as config_mod
from harness.store import load_runs
from tests.conftest import ONE_ROUND, REPO, TINY_STEPS_ARGS
from tests.test_regress import check, row_status, save, sweep

BEFORE = json.dumps({"models/convnet.py": "1111111111111111", "models/blocks.py": "2222222222222222"})
AFTER = json.dumps({"models/convnet.py": "3333333333333333", "models/blocks.py": "2222222222222222"})


def test_a_change_of_the_users_code_is_compared_under_the_same_config_and_named(tmp_path, capsys):
    sweep(tmp_path, "s1", {"cache-before": 100.0}, day=1, settings_hash="settings-a", user_code_files=BEFORE,
          user_code_fingerprint="aaaaaaaaaaaaaaaa")
    assert save(tmp_path) == 0
    sweep(tmp_path, "s2", {"cache-after": 80.0}, day=2, seed=1, settings_hash="settings-a", user_code_files=AFTER,
          user_code_fingerprint="bbbbbbbbbbbbbbbb")
    code, rows = row_status(capsys, tmp_path)
    assert code == 1 and list(rows) == ["settings-a"]  # one config, compared: not "new" beside "missing"
    row = rows["settings-a"]
    assert row["status"] == "regressed" and row["ratio"] == pytest.approx(0.8, rel=1e-6)
    assert "your code changed: models/convnet.py" in row["software"]  # the file that changed, not the other
    assert check(tmp_path) == 1
    assert "your code changed: models/convnet.py" in capsys.readouterr().out


def test_the_same_code_says_no_code_changed_and_old_records_match_by_their_config_hash(tmp_path, capsys):
    sweep(tmp_path, "s1", {"cfg-old": 100.0}, day=1)  # records older than settings_hash: theirs is ""
    assert save(tmp_path) == 0
    sweep(tmp_path, "s2", {"cfg-old": 100.0}, day=2, seed=1, settings_hash="cfg-old")
    code, rows = row_status(capsys, tmp_path)
    assert list(rows) == ["cfg-old"] and rows["cfg-old"]["status"] not in ("new", "missing")
    assert not [s for s in rows["cfg-old"]["software"] if "code" in s]


def test_code_changes_fall_back_to_the_fingerprints_and_name_the_harnesss_own():
    import pandas as pd

    base = pd.DataFrame({"user_code_files": [""], "user_code_fingerprint": ["aaaa"], "code_fingerprint": ["h1"]})
    cur = pd.DataFrame({"user_code_files": [""], "user_code_fingerprint": ["bbbb"], "code_fingerprint": ["h2"]})
    assert identity.code_changes(base, cur) == ["your code aaaa -> bbbb", "harness code h1 -> h2"]
    assert identity.code_changes(base, base) == []


def test_nothing_comparable_names_the_setting_that_differs_not_the_identical_hardware(tmp_path, capsys):
    sweep(tmp_path, "s1", {"cfg-a": 100.0}, day=1, config_json=json.dumps({"measure": {"steps": 20}, "seed": 0}))
    assert save(tmp_path) == 0
    sweep(tmp_path, "s2", {"cfg-b": 100.0}, day=2, config_json=json.dumps({"measure": {"steps": 5}, "seed": 0}))
    capsys.readouterr()
    assert check(tmp_path) == 2
    err = capsys.readouterr().err
    assert "nothing comparable" in err and "current hardware" not in err
    assert "the settings differ: measure.steps (baseline 20, current 5)" in err and "seed" not in err


def test_nothing_comparable_on_other_hardware_still_names_the_hardware(tmp_path, capsys):
    sweep(tmp_path, "s1", {"cfg-a": 100.0}, day=1)
    assert save(tmp_path) == 0
    sweep(tmp_path, "s2", {"cfg-a": 100.0}, day=2, cpu_model="Other CPU")
    capsys.readouterr()
    assert check(tmp_path) == 2
    err = capsys.readouterr().err
    assert "current hardware ['cpu Other CPU (8 cores)']" in err


def test_the_settings_hash_leaves_out_the_users_code_alone():
    spec = workloads.builtin("custom")
    spec.model, spec.input_shape = {"_target_": "torchvision.models.resnet18"}, [3, 32, 32]
    cfg = config_mod.from_dict({"workload": spec, "size": "smoke", "device": "cpu"})
    assert config_mod.settings_hash(cfg) == config_mod.config_hash(cfg)  # no code of the user's: one identity
    edited = config_mod.from_dict({"workload": {**spec.__dict__, "source_sha": "0123456789abcdef"}, "size": "smoke",
                                   "device": "cpu"})
    assert config_mod.config_hash(edited) != config_mod.config_hash(cfg)  # the cache: measured anew
    assert config_mod.settings_hash(edited) == config_mod.settings_hash(cfg)  # the gate: the same config
    slower = config_mod.from_dict({"workload": spec, "size": "smoke", "device": "cpu", "seed": 1})
    assert config_mod.settings_hash(slower) != config_mod.settings_hash(cfg)


CONVNET = """\
import time

import torch


class ConvNet(torch.nn.Module):
    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.head = torch.nn.Linear(4, num_classes)

    def forward(self, x):
        return self.head(self.conv(x).mean(dim=(2, 3)))
"""
WORKLOAD = """\
name: mine
model: {_target_: models.convnet.ConvNet, num_classes: 10}
target: class
num_classes: 10
synthetic: tensors
unit: images
units_per_sample: 1
sizes:
  full: {batch_size: 2, input_shape: [3, 16, 16], warmup_steps: 1, steps: 3, epoch_steps: 10}
  smoke: {batch_size: 2, input_shape: [3, 16, 16], warmup_steps: 1, steps: 3, epoch_steps: 10}
"""
LADDER = """\
description: two rungs of a user's model
workload: mine
base: {precision: "32"}
rungs:
  - set: {channels_last: true}
"""


@pytest.mark.slow
def test_check_baseline_compares_every_config_across_an_edit_of_the_users_model(tmp_path):
    """The user's model made slower by an edit: every config is compared (none new or missing) and the check names
    the file; measured again unchanged, nothing of the user's code is named."""
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "__init__.py").write_text("")
    (tmp_path / "models" / "convnet.py").write_text(CONVNET)
    for rel, text in (("workload/mine.yaml", WORKLOAD), ("ladder/mini.yaml", LADDER)):
        (tmp_path / "harness-conf" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "harness-conf" / rel).write_text(text)
    env = dict(os.environ, PYTHONPATH=str(REPO))

    def harness(*args: str) -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, "-m", "harness", *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=900)
        assert done.returncode in (0, 1, 5, 6), done.stdout[-2000:] + done.stderr[-2000:]
        return done

    def checked(name: str) -> tuple[int, dict]:
        done = harness("check", "--baseline", name, "--sweep", "latest", "--format", "json")
        return done.returncode, {r["config_hash"]: r for r in json.loads(done.stdout)["rows"]}

    sweep_args = ("sweep", "+ladder=mini", "size=smoke", *TINY_STEPS_ARGS, *ONE_ROUND)
    harness(*sweep_args)
    harness("baseline", "save", "gate0")
    slower = CONVNET.replace("        return self.head", "        time.sleep(0.05)\n        return self.head")
    (tmp_path / "models" / "convnet.py").write_text(slower)
    harness(*sweep_args)
    code, rows = checked("gate0")
    # one run a side: undecided, unless the drop is plain (5: the machine was busy, which decides nothing)
    assert code in (1, 5, 6) and len(rows) == 2
    assert {r["status"] for r in rows.values()} <= {"regressed", "undecided", "warned", "busy"}
    assert all("your code changed: models/convnet.py" in r["software"] for r in rows.values())
    harness("baseline", "save", "gate1")
    harness(*sweep_args, "sweep.rerun=true")
    code, rows = checked("gate1")
    assert code in (0, 5, 6) and len(rows) == 2
    assert {r["status"] for r in rows.values()} <= {"unchanged", "undecided", "improved", "warned", "busy"}
    assert not [s for r in rows.values() for s in r["software"] if "your code" in s]  # (the harness's may)
    runs = load_runs(tmp_path / "results")
    assert runs["settings_hash"].nunique() == 2 and runs["config_hash"].nunique() == 4  # two configs, two codes


def test_a_baseline_older_than_the_settings_identity_matches_by_config_hash_and_a_code_change_is_said(tmp_path,
                                                                                                     capsys):
    def spec(sha: str) -> str:
        return json.dumps({"workload": {"name": "mine", "source_sha": sha}, "sweep": {"repeats": 3}})

    sweep(tmp_path, "s1", {"cfg-code1": 100.0}, day=1, config_json=spec("aaaa"))  # no settings_hash: older
    assert save(tmp_path) == 0
    sweep(tmp_path, "s2", {"cfg-code1": 100.0}, day=2, seed=1, config_json=spec("aaaa"), settings_hash="settings-a")
    code, rows = row_status(capsys, tmp_path)
    assert list(rows) == ["cfg-code1"] and rows["cfg-code1"]["status"] not in ("new", "missing")  # as before
    sweep(tmp_path, "s3", {"cfg-code2": 100.0}, day=3, seed=2, settings_hash="settings-a",
          config_json=json.dumps({"workload": {"name": "mine", "source_sha": "bbbb"}, "sweep": {"repeats": 1}}))
    capsys.readouterr()
    assert check(tmp_path) == 2
    err = capsys.readouterr().err
    assert "the settings differ: none but your code (workload.source_sha baseline \"aaaa\", current \"bbbb\")" in err
    assert "current hardware" not in err and "save a new baseline" in err
