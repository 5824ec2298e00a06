"""Baseline files: a sweep's records saved under a name, for ``check`` to compare later sweeps with.

A baseline is a copy of a sweep's records (``<results>/baselines/NAME.parquet``, the run store's
schema); ``python -m harness baseline save|list`` writes and lists them.
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path

import pandas as pd

from harness.analysis.gate.check import BadInput, load_sweep, require_ok, select_sweep, with_hardware
from harness.store import SCHEMA_VERSION, load_parquet_files, records_from_frame, write_records

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def baselines_dir(results_dir: str | os.PathLike) -> Path:
    """The folder of the saved baselines."""
    return Path(results_dir) / "baselines"


def saved_baselines(results_dir: str | os.PathLike) -> list[str]:
    """The names of the saved baselines, sorted."""
    folder = baselines_dir(results_dir)
    return sorted(p.stem for p in folder.glob("*.parquet")) if folder.is_dir() else []


def baseline_path(value: str, results_dir: str | os.PathLike) -> Path:
    """A baseline given by name (``main-h200``) or by path (anything with a / or ending .parquet)."""
    if value.endswith(".parquet") or "/" in value or os.sep in value:
        path = Path(value)
    else:
        path = baselines_dir(results_dir) / f"{value}.parquet"
    if not path.is_file():
        names = ", ".join(saved_baselines(results_dir)) or "none"
        raise BadInput(f"baseline {value!r} not found (no file {path}); saved baselines in "
                       f"{baselines_dir(results_dir)}: {names}")
    return path


def load_baseline(path: Path) -> pd.DataFrame:
    """Read a baseline file, refusing corrupt files, other schema versions and baselines with no ok record."""
    try:
        with warnings.catch_warnings(record=True) as caught:  # the store skips unreadable files with a warning
            warnings.simplefilter("always")
            frame = load_parquet_files([str(path)])
        if frame.empty and caught:
            raise ValueError(str(caught[0].message).split(": ", 1)[-1])
    except Exception as exc:  # pyarrow raises several types for truncated / foreign files
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BadInput(f"baseline file {path} is not a readable baseline ({reason}); "
                       f"save it again with `python -m harness baseline save NAME --force`") from None
    versions = sorted({int(v) for v in frame["schema_version"].dropna()})
    if not versions or max(versions) > SCHEMA_VERSION:  # older files read fine: new columns come back empty
        raise BadInput(f"baseline file {path} has schema_version {versions or 'missing'}, but this harness "
                       f"reads schema_version {SCHEMA_VERSION} and older; save a new baseline with this version")
    if not (frame["status"] == "ok").any():
        raise BadInput(f"baseline file {path} has no records with status ok; nothing to compare with")
    return frame


def write_baseline(frame: pd.DataFrame, path: Path) -> None:
    """Write records with the store's schema atomically: a temp file in the same folder, then a rename."""
    write_records(records_from_frame(frame), path)


def save_baseline(name: str, sweep: str, results_dir: str, force: bool = False) -> Path:
    """Copy the records of ``sweep`` to ``<results>/baselines/NAME.parquet``; refuse to overwrite unless ``force``."""
    if not NAME_RE.match(name):
        raise BadInput(f"baseline name {name!r} is not valid; use letters, digits, '.', '_' and '-' (e.g. main-h200)")
    path = baselines_dir(results_dir) / f"{name}.parquet"
    if path.exists() and not force:
        raise BadInput(f"baseline {name!r} already exists ({path}); pass --force to overwrite it")
    frame = select_sweep(load_sweep(results_dir, sweep), sweep)
    require_ok(frame, f"sweep {frame['sweep_id'].iloc[0]!r}")
    write_baseline(frame, path)
    return path


def list_baselines(results_dir: str) -> str:
    """One line per saved baseline: name, sweep, record counts, hardware, torch version."""
    names = saved_baselines(results_dir)
    if not names:
        return f"no baselines in {baselines_dir(results_dir)}; save one with `python -m harness baseline save NAME`"
    lines = []
    for name in names:
        path = baselines_dir(results_dir) / f"{name}.parquet"
        try:
            frame = load_parquet_files([str(path)])
        except Exception as exc:  # list the rest even if one file is broken
            lines.append(f"{name}  (unreadable: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__})")
            continue
        sweeps = ",".join(dict.fromkeys(frame["sweep_id"].fillna("")))
        hw = "; ".join(sorted(set(with_hardware(frame)["_hw"]))) if len(frame) else "-"
        torch = ",".join(sorted(set(frame["torch_version"].fillna("")) - {""})) or "-"
        lines.append(f"{name}  sweep {sweeps}  {int((frame['status'] == 'ok').sum())}/{len(frame)} ok  "
                     f"{hw}  torch {torch}")
    return "\n".join(lines)
