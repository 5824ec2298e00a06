"""The ladder file a search leaves behind (``climb``'s best settings, ``fit``'s sizes that fit): its base, its name,
the file written where ``+ladder=NAME`` finds it, and the words of the command line it does not hold."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from harness import config as config_mod
from harness import shell
from harness.config import ladder as ladder_mod
from harness.config import workload as workloads_mod
from harness.config.workload import WorkloadSpec
from harness.fileio import write_text_atomic
from harness.names import CUSTOM, target_of

NOT_IN_LADDER = ("results_dir", "timeout_s", "workload")  # start settings the written ladder leaves out
NOT_IN_LADDER_PREFIXES = ("sweep.", "debug.", "workload.")  # (the ladder names its workload in its own field)


def ladder_base(settings: dict) -> dict:
    """The start settings that differ from the defaults (user overrides and config groups), as a ladder's base."""
    given = config_mod.flatten(config_mod.record_dict(config_mod.from_dict(settings)))
    defaults = config_mod.flatten(config_mod.record_dict(config_mod.RunConfig()))
    return {k: v for k, v in given.items() if v != defaults.get(k) and k not in NOT_IN_LADDER
            and not k.startswith(NOT_IN_LADDER_PREFIXES)}


def ladder_name(workload: WorkloadSpec, device: str, base: dict, prefix: str = "climb") -> str:
    """``climb-WORKLOAD-DEVICE`` (``prefix``: the command that writes it), plus a short hash of the start settings
    when they are not the defaults. A workload that is not a built-in as shipped is named by its model's target for
    ``custom`` (two models climbed in one results folder must not write one file), and the hash covers its fields
    too."""
    if workloads_mod.is_builtin(workload):
        name, hashed = workload.name, base
    else:
        shown = target_of(workload.model_node) if workload.name == CUSTOM else ""
        name = re.sub(r"[^A-Za-z0-9._-]", "_", shown or workload.name)
        fields = {k: v for k, v in workload.hashed().items() if k != "source_sha"}  # an edit of the file: same climb
        hashed = {"base": base, "workload": fields}
    out = f"{prefix}-{name}-{device}"
    if hashed:
        out += "-" + hashlib.sha256(json.dumps(hashed, sort_keys=True, default=str).encode()).hexdigest()[:6]
    return out


def write_ladder(mapping: dict, name: str, results_dir: str, config_dirs: tuple[str, ...] = (),
                 by: str = "climb") -> Path:
    """Write ``<results_dir>/ladders/NAME.yaml`` atomically and check that it loads as a ladder (its workload may
    live in a config folder the command was given: ``config_dirs``; ``by``: the command that writes it)."""
    import yaml

    folder = Path(results_dir) / ladder_mod.USER_LADDERS
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    header = f"# Written by `python -m harness {by}`; a re-run of the {by} rewrites it.\n"
    write_text_atomic(path, header + yaml.safe_dump(mapping, sort_keys=False, width=120), durable=True)
    ladder_mod.load(name, results_dir, config_dirs)  # a ladder the climb writes must load: a bug, not user input
    return path


def workload_words(given: list[str]) -> list[str]:
    """The words of ``given`` that the written ladder does not hold: the workload and its fields, the config
    folders, where the results go, the timeout, debug and Hydra's own settings."""
    return shell.select(given, lambda key: key in NOT_IN_LADDER or key.startswith(("workload.", "debug.", "hydra")))


def workload_only(given: list[str]) -> list[str]:
    """The words of ``given`` that make its workload: ``workload=NAME``, its fields, the config folders."""
    return shell.select(given, lambda key: key == "workload" or key.startswith(("workload.", "hydra.searchpath")))
