"""The GPU campaign's state, per GPU kind: which parts are measured, at which commit, and which must be measured
(again).

``results/<gpu>/plan.json`` holds the campaign's pinned commit (``commit``: what its parts measure; the headline
measures the checkout it runs in) and one entry per part that came back from a GPU machine (``record``): how it
ended, when, the commit it measured, and the fingerprint of the part's own files (``gpu_parts.path_fingerprint``:
its ladder's file, its workloads' configs and models). A part measured at commit X stays done for X: a commit to
the harness's code does not undo it. A part is

    done      measured ok, and its own files are the same at the pinned commit (or here) as at X;
    changed   measured ok at X, but its own files changed between X and the pinned commit: measure it again;
    to do     never measured;
    retry     it failed or was cut at the command's limit, fewer than MAX_ATTEMPTS times on this path;
    blocked   it failed MAX_ATTEMPTS times on this path: a person must look (its log is in results/<gpu>/logs/).

Estimates are corrected by the median of measured / estimated seconds over the recorded parts (``correction``).
``results/<gpu>/PLAN.md`` is the same, rendered for people, every part in priority order.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import tarfile
import tempfile
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from harness import api
from scripts import gpu_parts

REPO = gpu_parts.REPO
MAX_ATTEMPTS = 2
RECORDED_ON = "h100"  # the GPU kind whose recorded parts correct another's estimates while it has none
PENDING = ("changed", "to do", "retry")


def plan_dir(gpu: str) -> Path:
    """results/<gpu>/, or $PLAN_DIR (a copy of the plan elsewhere, for trying things out)."""
    return Path(os.environ.get("PLAN_DIR") or REPO / "results" / gpu)


def load(gpu: str) -> dict:
    path = plan_dir(gpu) / "plan.json"
    plan = json.loads(path.read_text()) if path.exists() else {}
    plan.setdefault("gpu", gpu)
    plan.setdefault("commit", "")
    plan.setdefault("parts", {})
    return plan


def save(plan: dict) -> Path:
    folder = plan_dir(plan["gpu"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "plan.json").write_text(json.dumps(plan, indent=1, sort_keys=True) + "\n")
    (folder / "PLAN.md").write_text(render(plan))
    return folder


def state(part: gpu_parts.Part, entry: dict | None, pin: str = "") -> str:
    """done, changed, to do, retry or blocked (see the module's docstring); ``pin``: the campaign's commit."""
    if not entry:
        return "to do"
    if entry.get("status") == "ok":
        return "changed" if own_files_changed(part, entry, pin) else "done"
    if entry.get("path_fingerprint") != gpu_parts.path_fingerprint(part):
        return "to do"  # it failed on files that are no longer these
    return "retry" if entry.get("attempts", 1) < MAX_ATTEMPTS else "blocked"


def own_files_changed(part: gpu_parts.Part, entry: dict, pin: str = "") -> list[str]:
    """The part's own files that differ between the commit it measured and ``pin`` (this checkout without one);
    without a commit git knows, whether its files' fingerprint differs from theirs here."""
    measured = entry.get("commit") or ""
    changed = changed_files(measured, part.paths, pin) if measured else None
    if changed is None:
        return [] if entry.get("path_fingerprint") == gpu_parts.path_fingerprint(part) else ["(its files' fingerprint)"]
    return changed


def changed_files(commit: str, paths: tuple[str, ...], to: str = "", repo: Path | None = None) -> list[str] | None:
    """The files among ``paths`` that differ between ``commit`` and ``to`` (the working tree when ""); None when
    git cannot tell (no git, or a commit it does not have)."""
    if not paths:
        return []
    found = (_git_diff_commits if to else _git_diff)(str(repo or REPO), commit, to, tuple(paths))
    return None if found is None else list(found)


@lru_cache(maxsize=None)
def _git_diff_commits(repo: str, commit: str, to: str, paths: tuple[str, ...]) -> tuple[str, ...] | None:
    """Between two commits: what git says does not change, so it is asked once."""
    return _git_diff(repo, commit, to, paths)


def _git_diff(repo: str, commit: str, to: str, paths: tuple[str, ...]) -> tuple[str, ...] | None:
    try:
        out = subprocess.run(["git", "diff", "--name-only", commit, *([to] if to else []), "--", *paths], cwd=repo,
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return tuple(out.stdout.split()) if out.returncode == 0 else None


def pending(plan: dict) -> list[gpu_parts.Part]:
    """The parts to measure, in priority order."""
    return [p for p in gpu_parts.catalogue() if state(p, plan["parts"].get(p.name), plan.get("commit", "")) in PENDING]


def correction(plan: dict) -> tuple[float, int]:
    """(the median of measured / estimated seconds over the recorded parts that say both, how many): what the
    model's estimates are multiplied by. A GPU kind with none yet borrows the H100's; (1.0, 0) while no plan has
    one. The headline is left out: its estimate is made of recorded times already."""
    ratios = _ratios(plan)
    if not ratios and plan["gpu"] != RECORDED_ON and plan_dir(RECORDED_ON) != plan_dir(plan["gpu"]):
        ratios = _ratios(load(RECORDED_ON))
    return (statistics.median(ratios), len(ratios)) if ratios else (1.0, 0)


def _ratios(plan: dict) -> list[float]:
    return [e["elapsed_s"] / e["estimate_s"] for name, e in plan["parts"].items()
            if name != "headline" and e.get("elapsed_s") and e.get("estimate_s")]


def _borrowed(plan: dict) -> str:
    return f" on the {RECORDED_ON.upper()}, none on the {plan['gpu'].upper()} yet" if not _ratios(plan) else ""


def corrected_s(part: gpu_parts.Part, factor: float) -> float:
    """A part's estimate corrected by ``factor``; the headline's is made of recorded times already."""
    return float(part.estimate_s) if part.kind == "headline" else factor * part.estimate_s


def pick(parts: list[gpu_parts.Part], budget_s: int = gpu_parts.BATCH_BUDGET_S,
         factor: float = 1.0) -> list[gpu_parts.Part]:
    """The first part, then each later one that still fits the budget by estimate (times ``factor``, the plan's
    correction), so the first pending part is always measured, and a big one is never passed over by the next
    command. A ladder's part never goes before an earlier pending part of its ladder: its rungs build on the
    earlier rungs' outcomes."""
    chosen, total, waiting = [], 0.0, set()
    for part in parts:
        if part.ladder in waiting:
            continue
        if not chosen or total + corrected_s(part, factor) <= budget_s:
            chosen.append(part)
            total += corrected_s(part, factor)
        elif part.ladder:
            waiting.add(part.ladder)
    return chosen


def checkout_pin(plan: dict, commit: str, scratch: Path) -> tuple[Path, str] | None:
    """Where the campaign's parts run: None when this copy is at the pinned commit (or none is pinned), else a
    worktree of the pinned commit under ``scratch`` and the commit; ValueError when git cannot make one."""
    pin = plan.get("commit") or ""
    if not pin or (commit and (commit.startswith(pin) or pin.startswith(commit))):
        return None
    folder = scratch / f"at-{pin[:12]}"
    if not folder.exists():
        made = subprocess.run(["git", "worktree", "add", "--detach", str(folder), pin], cwd=REPO,
                              capture_output=True, text=True)
        if made.returncode != 0:
            raise ValueError(f"the campaign is pinned at {pin[:12]} (results/{plan['gpu']}/plan.json) and this copy is "
                             f"at {commit[:12] or 'a commit git cannot name'}; git cannot check the pin out here "
                             f"({made.stderr.strip()[:200]}): run from a copy at {pin[:12]} with GIT_COMMIT={pin}, "
                             "or pin this one (bash scripts/gpu_measure.sh pin)")
    return folder, pin


# ------------------------------------------------------------------------------------------
# after a slot: the returned tarballs into results/<gpu>/


def tarballs(args: list[str], default_dir: str) -> list[Path]:
    """Each argument: a PART.tar.gz, a folder of them, or a part's name (PART.tar.gz in ``default_dir``)."""
    found = []
    for arg in args:
        path = Path(arg)
        if path.is_dir():
            found += sorted(path.glob("*.tar.gz"))
        elif path.is_file():
            found.append(path)
        else:
            gpu_parts.find(arg)  # a part's name, or ValueError naming the parts
            candidate = Path(default_dir) / f"{arg}.tar.gz"
            if not candidate.is_file():
                raise ValueError(f"no {candidate}: give the folder the slot's files came back in, e.g. "
                                 f"IN=/path/to/files bash scripts/gpu_measure.sh record {arg}")
            found.append(candidate)
    if not found:
        raise ValueError(f"no PART.tar.gz in {' '.join(args) or default_dir}")
    return found


def record(tarball: Path) -> str:
    """Put a part's returned records, log and table under results/<gpu>/ and mark the part in the plan."""
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(tarball) as tar:
        tar.extractall(tmp, filter="data")
        root = Path(tmp)
        stamp_path = root / "stamp.json"
        if not stamp_path.exists():
            raise ValueError(f"{tarball} has no stamp.json: it was not written by scripts/gpu_measure.sh")
        stamp = json.loads(stamp_path.read_text())
        plan = load(stamp["gpu"])
        folder = plan_dir(stamp["gpu"])
        records = sorted((root / "results" / "runs").glob("*.parquet"))
        (folder / "runs").mkdir(parents=True, exist_ok=True)
        (folder / "logs").mkdir(parents=True, exist_ok=True)
        for path in records:
            target = folder / "runs" / path.name
            if not target.exists():  # a finished measurement is never overwritten
                target.write_bytes(path.read_bytes())
        copies = root / "results" / "copies"
        for path in sorted(copies.rglob("*.parquet")):  # a sweep's own file, or a part compaction made
            merge_copies(path, folder / "copies" / path.relative_to(copies))
        part = stamp["part"]
        earlier = (plan["parts"].get(part) or {}).get("measured") or ""
        for name, suffix in ((f"{part}.log", ".log"), ("table.md", ".table.md"), (f"{part}.xml", ".xml")):
            if (root / name).exists():
                keep_log(folder / "logs" / f"{part}{suffix}", (root / name).read_bytes(), earlier)
    marked = plan["parts"][part] = entry(stamp, plan["parts"].get(part), len(records))
    save(plan)
    return (f"{part} ({stamp['gpu']}): {marked['status']}, {len(records)} records, commit "
            f"{marked['commit'][:12] or 'unknown'}, code {marked['code_fingerprint']}")


def keep_log(target: Path, text: bytes, earlier: str) -> None:
    """Write a part's log (or table) to ``target``; an earlier measurement's different one there is kept beside it
    under its date (``PART-2026-11-29.log``; ``earlier``: when that one was measured), never overwritten."""
    if target.exists() and earlier and target.read_bytes() != text:
        stem, _, suffix = target.name.partition(".")
        dated = f"{stem}-{earlier[:16].replace(':', '')}"
        names = (target.with_name(f"{dated}{f'-{n}' if n > 1 else ''}.{suffix}") for n in itertools.count(1))
        kept = next(name for name in names if not name.exists() or name.read_bytes() == target.read_bytes())
        target.rename(kept)  # two slots recorded within one minute: the second kept as -2, never one over the other
    target.write_bytes(text)


def merge_copies(source: Path, target: Path) -> None:
    """A sweep's copies file into the committed store: the rows it does not have yet (by run and sweep round)."""
    rows = pq.read_table(source)
    if target.exists():
        kept = pq.read_table(target)
        have = set(zip(*(kept.column(c).to_pylist() for c in ("run_id", "rung", "round"))))
        new = [i for i, key in enumerate(zip(*(rows.column(c).to_pylist() for c in ("run_id", "rung", "round"))))
               if key not in have]
        rows = pa.concat_tables([kept, rows.take(pa.array(new, type=pa.int64())).cast(kept.schema)])
    target.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(rows, target)


def entry(stamp: dict, previous: dict | None, records: int) -> dict:
    """The plan's entry for a part from its stamp (``previous``: its entry so far, for the attempts)."""
    same_path = previous and previous.get("path_fingerprint") == stamp["path_fingerprint"]
    attempts = previous.get("attempts", 1) + 1 if same_path and previous.get("status") != "ok" else 1
    commit = stamp.get("commit") or ""
    note = "the GPU copy had uncommitted changes" if stamp.get("dirty") else ""
    if not commit and _local_path_fingerprint(stamp) == stamp["path_fingerprint"]:
        commit, note = _head(), (note + "; " if note else "") + "commit: this checkout's (the GPU copy had no git)"
    return {"status": stamp["status"], "measured": stamp["ended"], "commit": commit,
            "code_fingerprint": stamp["code_fingerprint"], "path_fingerprint": stamp["path_fingerprint"],
            "records": records, "sweeps": stamp.get("sweeps", []), "elapsed_s": stamp.get("elapsed_s"),
            "estimate_s": stamp.get("estimate_s"), "attempts": attempts, "failures": stamp.get("failures", []),
            "note": note}


def _local_path_fingerprint(stamp: dict) -> str:
    try:
        return gpu_parts.path_fingerprint(gpu_parts.find(stamp["part"]))
    except ValueError:
        return ""


def resolve(name: str) -> str:
    """A commit's full id (ValueError naming it when git does not know it)."""
    out = subprocess.run(["git", "rev-parse", "--verify", f"{name}^{{commit}}"], cwd=REPO, capture_output=True,
                         text=True)
    if out.returncode != 0:
        raise ValueError(f"no commit {name!r} here: give a commit or tag git knows (git log --oneline)")
    return out.stdout.strip()


@lru_cache(maxsize=1)
def _head() -> str:
    return api.git_state(REPO)[0]


# ------------------------------------------------------------------------------------------
# PLAN.md


def render(plan: dict) -> str:
    """The plan for people: every part in priority order, what is measured at which commit, and what is left."""
    entries, pin = plan["parts"], plan.get("commit", "")
    parts = gpu_parts.catalogue()
    states = {p.name: state(p, entries.get(p.name), pin) for p in parts}
    lines = _summary(plan, parts, states)
    lines += ["| # | part | tier | what | est. s | state | measured | at commit | note |",
              "|---|---|---|---|---|---|---|---|---|"]
    for i, part in enumerate(parts, 1):
        entry = entries.get(part.name) or {}
        lines.append("| " + " | ".join([
            str(i), f"`{part.name}`", gpu_parts.TIER_NAMES[part.tier], part.what.replace("|", "/"),
            str(part.estimate_s), f"**{states[part.name]}**", (entry.get("measured") or "")[:16],
            (entry.get("commit") or "")[:8], _note(part, entry, states[part.name], pin).replace("|", "/")]) + " |")
    lines += ["", "Ladders no lent machine measures (a run needs more than one command's 10 minutes): "
              + "; ".join(f"`{name}`: {why}" for name, why in sorted(gpu_parts.BEYOND_ONE_COMMAND.items())) + "."]
    lines += ["", "Ladders no lent machine of one GPU measures: "
              + "; ".join(f"`{name}`: {why}" for name, why in sorted(gpu_parts.beyond_one_machine().items())) + "."]
    beyond = gpu_parts.totals_beyond_one_command()
    if beyond:
        lines += ["", "Guide totals with no part of their own: "
                  + "; ".join(f"`{name}`: {why}" for name, why in sorted(beyond.items())) + "."]
    retired = sorted(set(entries) - {p.name for p in parts})
    if retired:
        lines += ["", "Entries of parts that no longer exist (the ladders were regrouped or renamed): "
                  + ", ".join(f"`{n}` ({entries[n].get('status')}, {entries[n].get('measured', '')[:10]})"
                              for n in retired) + "."]
    return "\n".join(lines) + "\n"


def order(plan: dict) -> list[str]:
    """The plan's order by tier, for the terminal: each tier's parts, what is pending and its corrected estimate."""
    factor, recorded = correction(plan)
    pin = plan.get("commit", "")
    lines, left_s = [], 0.0
    for tier, name in enumerate(gpu_parts.TIER_NAMES):
        parts = [p for p in gpu_parts.catalogue() if p.tier == tier]
        left = [p for p in parts if state(p, plan["parts"].get(p.name), pin) in PENDING]
        left_s += sum(corrected_s(p, factor) for p in left)
        shown = ", ".join(p.name for p in parts[:4]) + (f", ... ({len(parts) - 4} more)" if len(parts) > 4 else "")
        lines.append(f"{tier + 1}. {name}: {len(left)} of {len(parts)} parts pending, "
                     f"~{sum(corrected_s(p, factor) for p in left):.0f} s: {shown}")
    return [f"{plan['gpu']}: the campaign in order" + (f", pinned at {pin[:12]}" if pin else "")
            + f"; pending ~{left_s:.0f} s ({left_s / 3600:.1f} h) by estimate x {factor:.2f} "
            f"(the median measured/estimated time of {recorded} recorded parts{_borrowed(plan)})", *lines]


def _summary(plan: dict, parts, states: dict[str, str]) -> list[str]:
    """PLAN.md's head: how a slot is used, the pinned commit, the counts and the campaign's corrected estimate."""
    gpu, pin = plan["gpu"], plan.get("commit", "")
    left = [p for p in parts if states[p.name] in PENDING]
    counts = ", ".join(f"{sum(s == k for s in states.values())} {k}" for k in ("done", "changed", "to do", "retry",
                                                                              "blocked"))
    factor, recorded = correction(plan)
    raw, corrected = sum(p.estimate_s for p in left), sum(corrected_s(p, factor) for p in left)
    lines = [
        f"# GPU campaign: {gpu}", "",
        f"Every part of `scripts/gpu_parts.py`, in priority order (tiers: {', '.join(gpu_parts.TIER_NAMES)}). A lent "
        f"{gpu} machine's slot starts with `bash scripts/gpu_measure.sh headline` (one command of at most 9 minutes), "
        f"then `bash scripts/gpu_measure.sh next` while time is left (the first pending parts that fit one command, "
        f"{gpu_parts.BATCH_BUDGET_S} s by corrected estimate); back here, `bash scripts/gpu_measure.sh record FOLDER` "
        f"puts what came back under results/{gpu}/ and updates this file and plan.json. Regenerate it with "
        "`bash scripts/gpu_measure.sh plan`.", "",
        (f"The campaign's parts measure commit {pin[:12]} (pinned: `bash scripts/gpu_measure.sh pin [COMMIT]`). "
         if pin else "No commit is pinned (`bash scripts/gpu_measure.sh pin [COMMIT]`): parts measure the checkout "
         "they run in. ") + "A part measured at a commit stays done for it; it is **changed** only when its own files "
        "(its ladder's file, its workloads' configs and models) differ between that commit and "
        + ("the pinned one." if pin else "this checkout."), "",
        f"{len(parts)} parts: {counts}. Pending: {len(left)} parts, ~{raw} s by the model's estimate"
        + (f"; corrected by {factor:.2f}, the median measured/estimated time of {recorded} recorded parts"
           f"{_borrowed(plan)}: "
           f"**~{corrected:.0f} s ({corrected / 3600:.1f} h)** (the headline's estimate is made of recorded "
           "times already)." if recorded else "."), "",
    ]
    chosen = pick(left, factor=factor)
    if chosen:
        lines += [f"Next command measures: {', '.join(p.name for p in chosen)} "
                  f"(~{sum(corrected_s(p, factor) for p in chosen):.0f} s corrected).", ""]
    return lines


def _note(part: gpu_parts.Part, entry: dict, what: str, pin: str) -> str:
    notes = [entry["note"]] if entry.get("note") else []
    if what == "changed":
        changed = own_files_changed(part, entry, pin)
        notes.append("its own files changed since: " + ", ".join(changed[:4]) + (" ..." if len(changed) > 4 else ""))
    elif what == "done" and entry.get("commit") and not (pin or _head()).startswith(entry["commit"]):
        notes.append(f"its own files unchanged since {entry['commit'][:8]}")
    if what in ("retry", "blocked"):
        notes.append(f"{entry.get('status')} {entry.get('attempts', 1)}x: " + "; ".join(entry.get("failures", [])[:2]))
    if entry.get("elapsed_s") and what == "done":
        notes.append(f"took {entry['elapsed_s']:.0f} s")
    return "; ".join(n for n in notes if n)


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
