"""Groups as Weights & Biases offline runs: one run per rung or config, grouped by its sweep or check.

``wandb.init(mode="offline", dir=DEST)`` writes each run under ``DEST/wandb/offline-run-*``, with the settings as
its config, the decided figures as its summary (W&B's place for a run's final values) and the verdict as tags;
``wandb sync DEST/wandb/offline-run-*`` uploads them when a team wants them on its server, as W&B's docs advise
for machines without its service. No account or network is needed to export. A group already exported under
DEST (its mark in ``DEST/harness-exported/``) is left as it is. The optional extra ``.[wandb]`` installs the client.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from harness.export.figures import Entry, Group

INSTALL = "pip install wandb (or: pip install 'training-harness[wandb]')"


def wandb_module():
    """The ``wandb`` package; ValueError naming the install when it is missing."""
    try:
        import wandb  # W&B: only an export to it
    except ImportError as exc:
        raise ValueError(f"export --to wandb needs the wandb package ({exc}): {INSTALL}") from None
    return wandb


def export(groups: list[Group], dest: str, experiment: str = "harness") -> list[str]:
    """Every entry of every group as an offline run of project ``experiment`` under ``dest``; a line per group."""
    wandb = wandb_module()
    Path(dest).mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("WANDB_SILENT", "true")
    lines = []
    try:
        for group in groups:
            mark = exported_mark(dest, group)
            if mark.exists():
                lines.append(f"{group.kind} {group.id}: already in {Path(dest) / 'wandb'}, left as it is "
                             f"(delete {mark} to export again)")
                continue
            own = Entry(name=group.kind, step=0, params=group.params, metrics=group.metrics, tags=group.tags)
            folders = [log_run(wandb, dest, experiment, group, entry) for entry in [own] + group.entries]
            mark.parent.mkdir(parents=True, exist_ok=True)
            mark.write_text("\n".join(folders) + "\n")
            lines.append(f"{group.kind} {group.id}: {len(folders)} offline run(s) under {Path(dest) / 'wandb'}; "
                         f"upload with: wandb sync {' '.join(folders)}")
    finally:
        wandb.teardown()  # the W&B service process ends with the export
    return lines


def exported_mark(dest: str, group: Group) -> Path:
    """``DEST/harness-exported/<id>``: written once a group's runs are all written, listing their folders. No Python
    reader of W&B's offline run files exists (its Go core writes them), so this is how an export run again (a
    nightly ``--sweep all``) knows what is there already and adds only what is new, as the other trackers do."""
    return Path(dest) / "harness-exported" / (re.sub(r"[^A-Za-z0-9._=-]+", "_", group.id).strip("_") or group.kind)


def log_run(wandb, dest: str, project: str, group: Group, entry: Entry) -> str:
    """One offline run: config the settings, summary the figures, tags the verdict; its folder."""
    verdict = entry.tags.get("verdict", "")
    run = wandb.init(mode="offline", dir=dest, project=project, group=group.id, job_type=group.kind,
                     name=f"{group.id} {entry.name}", config=dict(entry.params),
                     tags=[t[:64] for t in (group.kind, verdict) if t and t != "-"], reinit="create_new")
    try:
        run.summary.update(dict(entry.metrics) | {f"tag/{k}": v for k, v in entry.tags.items()})
    finally:
        run.finish()
    return str(Path(run.dir).parent)
