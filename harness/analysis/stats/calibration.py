"""Which noise calibration a sweep may use, and which ones it skipped and why (plain Python at the core).

A calibration (``python -m harness noise``: the same settings N times in fresh processes) measures the
process-to-process CV of *those settings on that machine at that time*. The old rule took the newest
calibration of the same environment, else of the same hardware, whatever its workload or size, even one
whose own report said NOT FIT TO MEASURE, even one made after the sweep. The rule here:

* **Matched by environment, workload and size**: the same ``env_key`` (software, code, threads), the same
  workload and the same size. A 2-core CPU running a smoke-size ResNet is not a full-size UNet on it.
* **Made before the sweep**: its last run finished before the sweep's first run started. A calibration
  made afterwards did not see the machine the sweep saw; it is skipped and said so.
* **The newest** made before the sweep speaks for the machine's state, fit or not: an unfit one (busy, too
  noisy) blocks the older ones, for the machine it measured is the one the sweep runs on. Taking the newest
  *fit* one instead chose, near the 10% cut, whichever calibration happened to draw a low CV: the CV used was
  40-74% of the true variance and a one-round sweep asserted a change on 7-8% of A/A rungs (docs/statistics.md).
* **Fit**: at least 2 ok runs, CV below ``noise_model.UNFIT_CV`` (10%), no run on a busy machine
  (``busy.busy_reason``), runs not at two speeds (``bimodal.bimodal`` at 1%: the reason says "bimodal" and what
  to do), no outlier run (``noise_model.outliers``: Grubbs' test at 1%). An unfit newest one
  leaves the sweep with no calibration, and says so, with the older fit one it blocked.
* Every skipped one is reported, so a table can say "skipped calibration noise-...: CV 17.1% >= 10%".
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass

import numpy as np

from harness import shell
from harness.analysis.stats import bimodal, busy, noise_model
from harness.names import CUSTOM
from harness.store import load_runs, utc_timestamp

MATCHED = ("size", "device", "results_dir")  # what the noise command sets itself, beside the workload


@dataclass(frozen=True)
class Candidate:
    """One calibration sweep as the rule sees it: where and when it ran, and its runs."""

    sweep_id: str
    env_key: str
    workload: str
    size: str
    started: str  # UTC timestamps as the store writes them (ISO 8601; compared on their first 19 characters)
    finished: str
    samples_per_s: tuple[float, ...]  # its ok runs
    busy: tuple[str, ...] = ()  # busy reasons of its runs (empty strings for quiet ones)


@dataclass(frozen=True)
class Skipped:
    sweep_id: str
    reason: str

    def note(self) -> str:
        return f"skipped calibration {self.sweep_id}: {self.reason}"


@dataclass(frozen=True)
class Choice:
    """The calibration chosen (``noise_model.DEFAULT`` when none fits) and the newer ones skipped."""

    noise: noise_model.Noise
    skipped: tuple[Skipped, ...] = ()

    def notes(self) -> list[str]:
        return [s.note() for s in self.skipped]


def _time(stamp: str) -> str:
    return str(stamp)[:19]


def unfit_reason(candidate: Candidate) -> str | None:
    """Why a calibration cannot be trusted (None when it can): too few runs, CV >= 10%, busy, an outlier."""
    values = [v for v in candidate.samples_per_s if v is not None and math.isfinite(v) and v > 0]
    if len(values) < 2:
        return f"{len(values)} ok run(s), a CV needs 2 or more"
    busy_runs = [b for b in candidate.busy if b]
    if busy_runs:
        return f"busy ({busy_runs[0]}" + (f"; {len(busy_runs)} runs busy)" if len(busy_runs) > 1 else ")")
    two = bimodal.bimodal(values)
    if two:
        return f"{two.describe()}: {bimodal.ADVICE}"
    cv = float(np.std(np.log(values), ddof=1))
    if cv >= noise_model.UNFIT_CV:
        return f"CV {cv:.1%} >= {noise_model.UNFIT_CV:.0%} (too noisy to measure speedups)"
    odd = noise_model.outliers(values)
    if odd:
        return f"run {odd[0]} is an outlier ({values[odd[0]]:.2f} samples/s vs median {np.median(values):.2f})"
    return None


def choose_calibration(candidates, env_key: str, workload: str, size: str, sweep_started: str) -> Choice:
    """The calibration a sweep of ``workload`` at ``size`` in environment ``env_key``, whose first run started
    at ``sweep_started`` ("" when unknown: no limit), may use: the newest of the same environment, workload and
    size made before it, if it is fit; plus every one skipped, with the reason (those made after the sweep, an
    unfit newest one, and the older fit one it blocked)."""
    same = [c for c in candidates if c.env_key == env_key and c.workload == workload and c.size == size]
    skipped, blocker = [], None
    for c in sorted(same, key=lambda c: (_time(c.finished), c.sweep_id), reverse=True):
        if sweep_started and _time(c.finished) >= _time(sweep_started):
            skipped.append(Skipped(c.sweep_id, f"made after this sweep started ({_time(c.finished)})"))
            continue
        reason = unfit_reason(c)
        if blocker is not None:
            if reason is None:  # the one the old rule would have taken
                skipped.append(Skipped(c.sweep_id, f"older than {blocker}, which was unfit: the machine's state "
                                                   "since is that one's"))
                break
            continue
        if reason:
            skipped.append(Skipped(c.sweep_id, reason))
            blocker = c.sweep_id
            continue
        values = [v for v in c.samples_per_s if v is not None and math.isfinite(v) and v > 0]
        cv = max(float(np.std(np.log(values), ddof=1)), noise_model.MIN_CV)
        apart = noise_model.outliers(values, noise_model.APART_LEVEL)
        noise = noise_model.Noise(cv=cv, df=len(values) - 1, sweep_id=c.sweep_id, runs=len(values),
                                  match="environment, workload and size",
                                  apart=f"run {apart[0]} stands apart (Grubbs at 10%)" if apart else "")
        return Choice(noise, tuple(skipped))
    return Choice(noise_model.DEFAULT, tuple(skipped))


# ------------------------------------------------------------------------------------------
# from the store's records (pandas frames, duck-typed: only the columns are read)


def candidates_from_frame(frame) -> list[Candidate]:
    """One Candidate per calibration sweep (ladder ``noise``) in a store frame; ok runs only count as runs,
    every run's busy reason counts."""
    if "ladder" not in frame or not len(frame):
        return []
    cal = frame[frame["ladder"] == noise_model.NOISE_LADDER]
    out = []
    for sweep_id, runs in cal.groupby("sweep_id", sort=False):
        first = runs.iloc[0]
        stamps = sorted(str(t) for t in runs["timestamp"] if isinstance(t, str) and t)
        ok = runs[(runs["status"] == "ok") & runs["samples_per_s"].notna()]
        reasons = tuple(busy.busy_reason(row) or "" for _, row in ok.iterrows())
        out.append(Candidate(str(sweep_id), str(first["env_key"]), str(first["workload"]), str(first["size"]),
                             stamps[0] if stamps else "", stamps[-1] if stamps else "",
                             tuple(float(v) for v in ok["samples_per_s"]), reasons))
    return out


def calibration_for(frame, records) -> Choice:
    """The drop-in for ``noise_model.noise_for``: the calibration for ``records`` (one sweep) among the
    calibration sweeps in ``frame`` (``calibration_frame`` loads them), with the skipped ones."""
    if not len(records):
        return Choice(noise_model.DEFAULT)
    first = records.iloc[0]
    stamps = sorted(str(t) for t in records["timestamp"] if isinstance(t, str) and t)
    return choose_calibration(candidates_from_frame(frame), str(first["env_key"]), str(first["workload"]),
                              str(first["size"]), stamps[0] if stamps else "")


def calibration_now(results_dir, env_key: str, workload: str, size: str) -> noise_model.Noise:
    """The noise of the calibration (``python -m harness noise``) of environment ``env_key``, ``workload`` and
    ``size`` in the store at ``results_dir`` made before now (:func:`choose_calibration`), for a session that starts
    now (a sweep's rounds, a climb); ``noise_model.DEFAULT`` where there is none, or no results folder yet."""
    try:
        frame = load_runs(results_dir, where={"ladder": noise_model.NOISE_LADDER, "env_key": [env_key]})
    except ValueError:
        return noise_model.DEFAULT
    return choose_calibration(candidates_from_frame(frame), env_key, workload, size, utc_timestamp()).noise


def noise_command(workload: str, size: str, device: str, results_dir: str, words=()) -> str:
    """The ``python -m harness noise`` command that calibrates what a sweep (a climb, a check) of ``workload`` at
    ``size`` on ``device`` is matched with (:func:`choose_calibration`), stored in ``results_dir``. ``words``: the
    settings it was given (the workload's, a config folder, ...), kept but for those it sets itself. "" for the
    inline workload when no words name it: ``workload=custom`` alone names no model."""
    words = shell.without(words, MATCHED)
    if "workload" not in map(shell.given_key, words):
        if workload == CUSTOM:
            return ""
        words = [shell.override("workload", workload), *words]
    return shell.command("noise", *words, *_matched(size, device, results_dir))


def calibrate_hint(workload: str, size: str, device: str, results_dir: str, words=()) -> str:
    """How to calibrate, in a note: ``run`` and :func:`noise_command`, or in words where no command names the
    workload (the inline one, from its records alone)."""
    command = noise_command(workload, size, device, results_dir, words)
    if command:
        return f"run {command}"
    return ("run the noise command with this sweep's workload settings and "
            + " ".join(shlex.quote(w) for w in _matched(size, device, results_dir)))


def _matched(size: str, device: str, results_dir: str) -> list[str]:
    return [shell.override(k, v) for k, v in zip(MATCHED, (size, device, results_dir))]


def calibration_frame(results_dir, frame):
    """``frame`` (one sweep, read alone) plus every calibration sweep of its environments in the store: the
    rule needs the skipped ones too (to say why), not only the newest."""
    import pandas as pd


    envs = sorted(set(frame["env_key"].dropna())) if "env_key" in frame else []
    if not envs:
        return frame
    calibrations = load_runs(results_dir, where={"ladder": noise_model.NOISE_LADDER, "env_key": envs})
    if not len(calibrations):
        return frame
    return pd.concat([frame, calibrations], ignore_index=True).drop_duplicates("run_id")


def shaky(noise: noise_model.Noise) -> str:
    """Why one round must not lean on this calibration alone ("" when it may): its CV above
    ``noise_model.SHAKY_CV`` (6%), or one of its runs standing apart. Near the 10% cut the calibrations used are
    those that drew low, and heavy-tailed runs make a CV of a few runs unreliable: with two rounds the sweep's own
    residuals test the calibration (the F test of ``blocks.fit``) before it is pooled."""
    if not noise.calibrated:
        return ""
    if noise.cv > noise_model.SHAKY_CV:
        return f"its CV {noise.cv:.1%} is above {noise_model.SHAKY_CV:.0%}"
    return noise.apart


def for_rounds(noise: noise_model.Noise, rounds: int) -> tuple[noise_model.Noise, str]:
    """The calibration a judgement of ``rounds`` rounds may lean on: none for one round with a shaky calibration
    (``shaky``), with the note that says so; else ``noise`` itself and ""."""
    why = shaky(noise)
    if rounds >= 2 or not why:
        return noise, ""
    return noise_model.DEFAULT, (f"calibration {noise.sweep_id} is not enough for a verdict from one round ({why}): "
                                 "two rounds decide, the sweep's own runs testing the calibration (its F test)")
