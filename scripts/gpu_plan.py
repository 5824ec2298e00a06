"""The GPU campaign's state, per GPU kind: which parts are measured, at which commit and code fingerprint, and
which must be measured (again).

``results/<gpu>/plan.json`` holds one entry per part that came back from a GPU machine (``record``): how it ended,
when, the commit and the harness's code fingerprint (harness/run/parent/env.py) it was measured at, and the fingerprint
of the files its measurement depends on (``gpu_parts.path_fingerprint``). A part is

    done      measured ok, and its measured path is what it was then;
    stale     measured, but a file its measurement depends on changed since: measure it again;
    to do     never measured;
    retry     it failed or was cut at the command's limit, fewer than MAX_ATTEMPTS times on this path;
    blocked   it failed MAX_ATTEMPTS times on this path: a person must look (its log is in results/<gpu>/logs/).

``results/<gpu>/PLAN.md`` is the same, rendered for people, every part in priority order.
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from scripts import gpu_parts

REPO = gpu_parts.REPO
MAX_ATTEMPTS = 2
PENDING = ("stale", "to do", "retry")


def plan_dir(gpu: str) -> Path:
    """results/<gpu>/, or $PLAN_DIR (a copy of the plan elsewhere, for trying things out)."""
    return Path(os.environ.get("PLAN_DIR") or REPO / "results" / gpu)


def load(gpu: str) -> dict:
    path = plan_dir(gpu) / "plan.json"
    plan = json.loads(path.read_text()) if path.exists() else {}
    plan.setdefault("gpu", gpu)
    plan.setdefault("parts", {})
    return plan


def save(plan: dict) -> Path:
    folder = plan_dir(plan["gpu"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "plan.json").write_text(json.dumps(plan, indent=1, sort_keys=True) + "\n")
    (folder / "PLAN.md").write_text(render(plan))
    return folder


def state(part: gpu_parts.Part, entry: dict | None) -> str:
    """done, stale, to do, retry or blocked (see the module's docstring)."""
    if not entry:
        return "to do"
    if entry.get("path_fingerprint") != gpu_parts.path_fingerprint(part):
        return "stale"
    if entry.get("status") == "ok":
        return "done"
    return "retry" if entry.get("attempts", 1) < MAX_ATTEMPTS else "blocked"


def pending(plan: dict) -> list[gpu_parts.Part]:
    """The parts to measure, in priority order."""
    return [p for p in gpu_parts.catalogue() if state(p, plan["parts"].get(p.name)) in PENDING]


def pick(parts: list[gpu_parts.Part], budget_s: int = gpu_parts.BATCH_BUDGET_S) -> list[gpu_parts.Part]:
    """The first part, then each later one that still fits the budget by estimate (so the first pending part is
    always measured, and a big one is never passed over by the next command). A ladder's part never goes before
    an earlier pending part of its ladder: its rungs build on the earlier rungs' outcomes."""
    chosen, total, waiting = [], 0, set()
    for part in parts:
        if part.ladder in waiting:
            continue
        if not chosen or total + part.estimate_s <= budget_s:
            chosen.append(part)
            total += part.estimate_s
        elif part.ladder:
            waiting.add(part.ladder)
    return chosen


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
        part = stamp["part"]
        for name, suffix in ((f"{part}.log", ".log"), ("table.md", ".table.md"), (f"{part}.xml", ".xml")):
            if (root / name).exists():
                (folder / "logs" / f"{part}{suffix}").write_bytes((root / name).read_bytes())
    marked = plan["parts"][part] = entry(stamp, plan["parts"].get(part), len(records))
    save(plan)
    return (f"{part} ({stamp['gpu']}): {marked['status']}, {len(records)} records, commit "
            f"{marked['commit'][:12] or 'unknown'}, code {marked['code_fingerprint']}")


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


def _head() -> str:
    from harness.run.parent.env import git_state

    return git_state(REPO)[0]


# ------------------------------------------------------------------------------------------
# PLAN.md


def render(plan: dict) -> str:
    """The plan for people: every part in priority order, what is measured and what is left."""
    from harness.run.parent.fingerprint import code_fingerprint

    gpu, entries = plan["gpu"], plan["parts"]
    parts = gpu_parts.catalogue()
    states = {p.name: state(p, entries.get(p.name)) for p in parts}
    left = [p for p in parts if states[p.name] in PENDING]
    counts = ", ".join(f"{sum(s == k for s in states.values())} {k}" for k in ("done", "stale", "to do", "retry",
                                                                              "blocked"))
    lines = [
        f"# GPU campaign: {gpu}", "",
        f"Every part of `scripts/gpu_parts.py`, in priority order (tiers: {', '.join(gpu_parts.TIER_NAMES)}). On a "
        f"lent {gpu} machine `bash scripts/gpu_measure.sh next` measures the first pending parts that fit one command "
        f"({gpu_parts.BATCH_BUDGET_S} s by estimate); back here, `bash scripts/gpu_measure.sh record FOLDER` puts "
        f"what came back under results/{gpu}/ and updates this file and plan.json. Regenerate it with "
        "`bash scripts/gpu_measure.sh plan`.", "",
        f"Rendered at commit {(_head() or 'unknown')[:12]}, code fingerprint {code_fingerprint()} "
        "(harness/run/parent/fingerprint.py). A part is stale when a file its measurement depends on changed since it "
        "was measured.",
        "", f"{len(parts)} parts: {counts}. Pending: {len(left)} parts, ~{sum(p.estimate_s for p in left)} s "
        f"by estimate.", "",
    ]
    chosen = pick(left)
    if chosen:
        lines += [f"Next command measures: {', '.join(p.name for p in chosen)} "
                  f"(~{sum(p.estimate_s for p in chosen)} s).", ""]
    lines += ["| # | part | tier | what | est. s | state | measured | commit | code | note |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for i, part in enumerate(parts, 1):
        entry = entries.get(part.name) or {}
        lines.append("| " + " | ".join([
            str(i), f"`{part.name}`", gpu_parts.TIER_NAMES[part.tier], part.what.replace("|", "/"),
            str(part.estimate_s), f"**{states[part.name]}**", (entry.get("measured") or "")[:16],
            (entry.get("commit") or "")[:8], entry.get("code_fingerprint", "")[:8],
            _note(part, entry, states[part.name]).replace("|", "/")]) + " |")
    lines += ["", "Ladders no lent machine measures (a run needs more than one command's 10 minutes): "
              + "; ".join(f"`{name}`: {why}" for name, why in sorted(gpu_parts.BEYOND_ONE_COMMAND.items())) + "."]
    retired = sorted(set(entries) - {p.name for p in parts})
    if retired:
        lines += ["", "Entries of parts that no longer exist (the ladders were regrouped or renamed): "
                  + ", ".join(f"`{n}` ({entries[n].get('status')}, {entries[n].get('measured', '')[:10]})"
                              for n in retired) + "."]
    return "\n".join(lines) + "\n"


def _note(part: gpu_parts.Part, entry: dict, what: str) -> str:
    notes = [entry["note"]] if entry.get("note") else []
    if what == "stale":
        changed = _changed(entry.get("commit", ""), part.paths)
        notes.append("measured path changed" + (f": {', '.join(changed[:4])}" + (" ..." if len(changed) > 4 else "")
                                                if changed else ""))
    if what in ("retry", "blocked"):
        notes.append(f"{entry.get('status')} {entry.get('attempts', 1)}x: " + "; ".join(entry.get("failures", [])[:2]))
    if entry.get("elapsed_s") and what == "done":
        notes.append(f"took {entry['elapsed_s']:.0f} s")
    return "; ".join(n for n in notes if n)


def _changed(commit: str, paths: tuple[str, ...]) -> list[str]:
    """The files among ``paths`` that differ between ``commit`` and this checkout ([] when git cannot tell)."""
    if not commit or not paths:
        return []
    try:
        out = subprocess.run(["git", "diff", "--name-only", commit, "--", *paths], cwd=REPO, capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    return out.stdout.split() if out.returncode == 0 else []


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
