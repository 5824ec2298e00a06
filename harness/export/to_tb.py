"""Groups as TensorBoard event files: ``DEST/<sweep or check>/<rung or config>/``, one run folder each.

Written with ``torch.utils.tensorboard`` (TensorBoard's own format; the optional extra ``.[tb]`` installs the
``tensorboard`` package it needs). Each entry's figures are scalars at step = its rung, so TensorBoard's charts
put a sweep's rungs side by side; its settings and tags are hparams with its figures as the hparams' metrics,
written into the entry's own folder (``SummaryWriter.add_hparams`` would open a new folder per call, one run
more for every entry). The group's own figures go to ``DEST/<id>/<kind>``. Aim imports such a folder (``aim convert
tensorboard``); for W&B, ``harness.export.to_wandb`` writes its own runs.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from harness.export.figures import Entry, Group

INSTALL = "pip install tensorboard (or: pip install 'training-harness[tb]')"


def writer_class():
    """``torch.utils.tensorboard.SummaryWriter``; ValueError naming the install when TensorBoard is missing."""
    try:
        from torch.utils.tensorboard import SummaryWriter  # torch and tensorboard: only an export to TensorBoard
    except ImportError as exc:
        raise ValueError(f"export --to tb needs the tensorboard package ({exc}): {INSTALL}") from None
    return SummaryWriter


def export(groups: list[Group], dest: str, experiment: str = "") -> list[str]:
    """Write every group under ``dest`` (``experiment``: not used, TensorBoard has none); one line per group said
    (written, or already there and left alone)."""
    writer = writer_class()
    lines = []
    for group in groups:
        folder = Path(dest) / group.id
        if folder.is_dir() and any(folder.rglob("events.out.tfevents.*")):
            lines.append(f"{group.kind} {group.id}: already in {folder}, left as it is (delete it to export again)")
            continue
        try:
            write_group(writer, folder, group)
        except OSError as exc:
            raise ValueError(f"--to tb {dest!r}: cannot write {str(folder)!r} ({exc.strerror or exc}, "
                             f"{type(exc).__name__}); choose a folder you can write") from None
        lines.append(f"{group.kind} {group.id}: {len(group.entries)} run folder(s) and one of the {group.kind} "
                     f"in {folder}")
    return lines


def write_group(writer_cls, folder: Path, group: Group) -> None:
    """The group's run folders, written beside ``folder`` (``.<id>.partial``) and renamed to it once all are there:
    a folder with event files is a whole export, which an export run again leaves alone, so an export stopped
    part-way (killed, a full disk) must not leave one. A partial folder left by such an export is written anew."""
    partial = folder.with_name(f".{folder.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    own = Entry(name=group.kind, step=0, params=group.params, metrics=group.metrics, tags=group.tags)
    for entry in [own] + group.entries:
        write_entry(writer_cls, partial / entry.slug, entry)
    if folder.is_dir() and not any(p.is_file() for p in folder.rglob("*")):
        shutil.rmtree(folder)  # empty folders only (made by hand, or by an older export that wrote nothing)
    partial.rename(folder)  # an OSError when something else is there: said by the caller, nothing overwritten


def write_entry(writer_cls, folder: Path, entry: Entry) -> None:
    """One run folder: the scalars at the entry's step, and hparams (settings and tags) with them as metrics."""
    from torch.utils.tensorboard.summary import hparams  # as writer_class: only an export to TensorBoard

    with writer_cls(log_dir=str(folder)) as writer:
        for name, value in entry.metrics.items():
            writer.add_scalar(name, value, global_step=entry.step)
        settings = {k: _hparam(v) for k, v in (entry.params | {f"tag/{k}": v for k, v in entry.tags.items()}).items()}
        for summary in hparams(settings, dict(entry.metrics)):
            writer.file_writer.add_summary(summary)


def _hparam(value):
    """An hparam value TensorBoard takes: bool, int, float or str."""
    return value if isinstance(value, (bool, int, float, str)) else str(value)
