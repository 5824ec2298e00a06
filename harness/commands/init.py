"""``python -m harness init``: start your repository's own configs.

    python -m harness init

Writes ``harness-conf/`` in the current folder: a workload to point at your model and data
(``workload/my_model.yaml``) and a ladder of changes to measure on it (``ladder/my_ladder.yaml``), both commented,
both running as written (torchvision's ResNet-18 on random images) until you edit them. Every command run from this
folder finds them (``harness-conf/`` is put on Hydra's search path, as ``--config-dir harness-conf`` would), and
writes its results to ``results/`` here. Refuses, in one line, when ``harness-conf`` is already there. No torch, no
Hydra.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness import shell
from harness.commands import common_args
from harness.conf import PROJECT_DIR

WORKLOAD = "my_model"
LADDER = "my_ladder"

WORKLOAD_YAML = f"""\
# Your model as a workload of the harness: what to train, on what samples, at which sizes.
# As written it trains torchvision's ResNet-18 on random images, so that the harness runs at once; point it at
# your own code on the lines marked EDIT. Your modules must be importable from where you run the harness
# (installed, on PYTHONPATH, or in this folder). Every field: the harness's README, "Your own model".
#   python -m harness run workload={WORKLOAD}
name: {WORKLOAD}
description: "my model ({PROJECT_DIR}/workload/{WORKLOAD}.yaml)"
model:
  _target_: torchvision.models.resnet18  # EDIT: your model's class or function, e.g. mypkg.nets.MyNet
  num_classes: 10                        # EDIT: its constructor's arguments (these are resnet18's)
loss: null  # null: cross-entropy (class, segmentation), MSE (regression); or {{_target_: mypkg.losses.MyLoss}}
optimizer:
  _target_: torch.optim.AdamW
  _partial_: true  # the harness calls it with the model's parameters
  lr: 1.0e-3
target: class             # EDIT: class (an index per sample), segmentation (one per position) or regression
num_classes: 10           # EDIT: the classes the targets take
synthetic: tensors  # random inputs of input_shape and random targets, until you give your own data below
# dataset:                         # EDIT: your data instead: a map-style dataset of (input, target) pairs
#   _target_: mypkg.data.MyDataset  # a class or function, called with the arguments below and no others
#   _partial_: true
#   root: /path/to/your/data
unit: images  # what units_per_s counts
units_per_sample: 1
# EDIT input_shape: one sample, channels first: [C, H, W], [C, D, H, W] or [C, L]; one for every size, or a
# top-level `input_shape: [3, 224, 224]` for all of them (with your own dataset, leave it out: its first item's is read)
sizes:  # size=auto, the default: full on a GPU, smoke on a CPU (size=smoke for a quick try anywhere)
  full: {{batch_size: 32, input_shape: [3, 224, 224], warmup_steps: 10, steps: 50, epoch_steps: 100}}
  smoke: {{batch_size: 4, input_shape: [3, 32, 32], warmup_steps: 2, steps: 10, epoch_steps: 10}}
"""

LADDER_YAML = f"""\
# Your ladder: one change a rung, each measured against the rung before, every run in a fresh process.
#   python -m harness sweep +ladder={LADDER}
# A rung sets any setting of `python -m harness run --help`; `claim: [low, high]` (x faster than the rung
# before) and its `source` give the rung a verdict: confirms, inconclusive, falls short, exceeds or reverses.
description: "my ladder: bf16 autocast, then channels_last, then 2 loader workers"
workload: {WORKLOAD}  # EDIT: the workload it climbs (workload=NAME on the command line picks another)
base:  # the baseline's settings (rung 0); every rung starts from the one before
  precision: "32"
  data.num_workers: 0
rungs:
  - set: {{precision: bf16-mixed}}
    claim: [1.5, 2]                     # EDIT: what your guide promises, or leave the claim out
    source: "my notes: bf16 autocast"   # where the claim comes from
  - set: {{channels_last: true}}
  - set: {{data.num_workers: 2}}
"""

FILES = {f"workload/{WORKLOAD}.yaml": WORKLOAD_YAML, f"ladder/{LADDER}.yaml": LADDER_YAML}


def main(command: str, argv: list[str]) -> int:
    parser = common_args.parser(command, f"write {PROJECT_DIR}/ here: a workload and a ladder of your own to edit, "
                                         "found by every command run from this folder")
    return common_args.run(parser, argv, run_init)


def run_init(args: argparse.Namespace) -> int:
    """Write the folder and say what is in it and what to run next; ValueError (exit 2) when it is there."""
    folder = write_project(Path.cwd())
    print(f"wrote {PROJECT_DIR}/ in {folder.parent}: your own configs, found by every command run from this folder")
    for rel in FILES:
        print(f"  {PROJECT_DIR}/{rel}")
    print("next: edit the lines marked EDIT to point at your model and data, then")
    print(f"  {shell.command('run', f'workload={WORKLOAD}', 'size=smoke')}")
    print(f"  {shell.command('sweep', f'+ladder={LADDER}')}")
    print("results go to results/ in this folder; to keep them out of git:")
    print("  echo results/ >> .gitignore")
    return 0


def write_project(where: Path) -> Path:
    """``where/harness-conf/`` with the workload and the ladder (ValueError naming the path when it exists)."""
    folder = where / PROJECT_DIR
    if folder.exists():
        raise ValueError(f"{folder} already exists: edit the files in it, or move it away to start again")
    for rel, text in FILES.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return folder
