"""The GPU campaign's driver behind scripts/gpu_measure.sh (read its header for the commands).

On the GPU machine a part's runs write to a scratch folder outside $OUT (records, and the datasets the runs
read: a NIfTI dataset alone is ~130 MB, and a slot returns files of at most 16 MiB); the part's new records, its
log, table and stamp (what was measured, when, at which code fingerprint and commit) are packed into
$OUT/PART.tar.gz, which is checked against the 16 MiB before the part ends. Every part's store is seeded with the
records already committed under results/<gpu>/runs/, so a ladder split over parts (or slots) builds each rung on
the last one that ran ok and reuses what is measured, as one sweep would. A command stops its part at
STOP_AFTER_S (550 s) whatever happens, so that what was measured is packed within the machine's 10 minutes.

The machine's lease (``LEASE_S``: its seconds left when the command began, which the slot's standing command
passes) bounds it further: no part starts that its corrected estimate says cannot finish within the lease less
LEASE_MARGIN_S, the parts it leaves are named with the command that runs them next, and a part cut anyway at that
point keeps (packs) what it measured.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness import api  # noqa: E402
from scripts import gpu_headline, gpu_parts, gpu_plan  # noqa: E402
from scripts.gpu_pack import RETURN_LIMIT_BYTES, pack_part, tar_command  # noqa: E402

STOP_AFTER_S = 550  # after the command began (its wheel install included)
LEASE_MARGIN_S = 45  # of the machine's lease (LEASE_S): the last part's check, table and tarball, and the return
SCRATCH = "/tmp/harness-gpu"
JOURNAL = "journal.jsonl"  # in SCRATCH: the stamps of the parts this machine ran, for `next` before `record`


@dataclass
class Context:
    """Where a command's parts run and write."""

    py: str
    out: Path
    scratch: Path
    gpu: str
    dry: bool = False
    results_from: str = ""
    started: float = 0.0
    timeout_s: int = 0  # each run's limit instead of the part's (a slower machine than the GPU's)
    commit: str = ""  # the commit measured (the campaign's pinned one, for every part but the headline)
    repo: Path = REPO  # where the measuring commands run: this copy, or a worktree at the pinned commit
    factor: float = 1.0  # the plan's correction of the estimates (what recorded parts took over their estimates)
    lease_s: float = 0.0  # the machine's time left when the command began (LEASE_S; 0: not known, the command's own)

    @property
    def budget_s(self) -> float:
        """What the command may spend measuring, by estimate: the command's, within the machine's lease."""
        return min(gpu_parts.BATCH_BUDGET_S, self.lease_s - LEASE_MARGIN_S) if self.lease_s \
            else gpu_parts.BATCH_BUDGET_S

    @property
    def stop_at(self) -> float:
        """When a part still measuring is stopped (``time.monotonic()``), so that what it measured is packed in
        time: the command's limit, or the lease less its margin, whichever is sooner."""
        return self.started + (min(STOP_AFTER_S, self.lease_s - LEASE_MARGIN_S) if self.lease_s else STOP_AFTER_S)

    @property
    def results(self) -> Path:  # one store for every part of the command (and of the slot, while the machine lives)
        return self.scratch / "results"

    def pack(self, part: gpu_parts.Part) -> Path:
        return self.scratch / "pack" / part.name


def command_age_s(cap_s: float = 120.0) -> float:
    """How long ago the GPU machine's command began, so that its wheel install counts against its 10 minutes: the
    age of this process (a shell that exec'd it keeps its start) or of its parent shell, whichever is older, each
    ignored above ``cap_s`` (an interactive shell, or the machine's own agent); 0 when /proc cannot tell."""
    try:
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        ages = []
        for pid in (os.getpid(), os.getppid()):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            ages.append(uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"))  # field 22: start, in ticks after boot
    except (OSError, ValueError, IndexError):
        return 0.0
    return max([a for a in ages if 0 <= a <= cap_s] or [0.0])


def gpu_key() -> tuple[str, str]:
    """("h100", "NVIDIA H100 80GB HBM3"): $GPU, or the first GPU nvidia-smi names ("cpu" when there is none)."""
    name = ""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30)
        name = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
    except (OSError, subprocess.SubprocessError):
        pass
    if os.environ.get("GPU"):
        return os.environ["GPU"], name
    for kind in ("H100", "H200", "A100", "L40S", "A10G", "B200"):
        if kind in name.upper():
            return kind.lower(), name
    return ("".join(c for c in name.lower() if c.isalnum()) or "cpu"), name


def commands(part: gpu_parts.Part, ctx: Context) -> list[list[str]]:
    """The measuring commands of ``part``, as they run (from the repository root)."""
    py, results, timeout = ctx.py, f"results_dir={ctx.results}", f"timeout_s={ctx.timeout_s or part.timeout_s}"
    if part.kind == "headline":
        return gpu_headline.commands(py, ctx.results, gpu_headline.estimate(ctx.gpu))
    if part.kind == "ladder":
        rungs = f"{part.rungs[0]}-{part.rungs[-1]}" if len(part.rungs) > 1 else str(part.rungs[0])
        return [[py, "scripts/gpu_part.py", "ladder", part.ladder, rungs, str(part.rounds[0]),
                 gpu_parts.sweep_id(part, ctx.gpu, ctx.repo), results, timeout, *part.args]]
    if part.kind == "total":
        return [[py, "scripts/gpu_part.py", "total", part.ladder, f"0-{len(part.rounds) - 1}",
                 gpu_parts.sweep_id(part, ctx.gpu, ctx.repo), results, timeout, *part.args]]
    if part.kind in ("noise", "diagnose"):
        return [[py, "-m", "harness", part.kind, *part.args, timeout, results]]
    if part.kind == "run":
        return [[py, "-m", "harness", "run", *part.args, f"precision={p}", "size=full", timeout, results]
                for p in ("32", "bf16-mixed")]
    if part.kind == "tests":
        # in one process, without pyproject's -n auto: the GPU image has no pytest-xdist, and its tests share the GPU
        return [[py, "-m", "pytest", "-o", "addopts=-ra --strict-markers", *part.args, "-q", "-p", "no:cacheprovider",
                 f"--junitxml={ctx.pack(part)}/{part.name}.xml", "tests/test_gpu.py"]]
    return [[py, "-c", "import torch, sys; print(sys.version); print(torch.__version__, torch.version.cuda, "
             "torch.cuda.is_available() and torch.cuda.get_device_name(0))"], ["nvidia-smi"]]


def after(part: gpu_parts.Part, ctx: Context) -> list[list[str]]:
    """The check and the table of a part that writes records."""
    if part.kind in ("tests", "env"):
        return []
    before = f"{ctx.pack(part)}/before.txt"
    check = [ctx.py, "scripts/gpu_part.py", "check", str(ctx.results), before]
    if part.kind == "run":
        return [check]
    if part.kind == "headline":  # every record ok; the table of the phase2 sweep it measured
        return [check + ["strict"], [ctx.py, "scripts/gpu_part.py", "table", str(ctx.results), before, "phase2"]]
    sweep = gpu_parts.sweep_id(part, ctx.gpu, ctx.repo) if part.kind in ("ladder", "total") else "latest"
    return [check, [ctx.py, "-m", "harness", "table", "--results", str(ctx.results), "--sweep", sweep]]


def is_table(argv: list[str]) -> bool:
    """Whether a step of ``after`` prints a table (its output is table.md; its exit code only shows)."""
    return argv[2:4] == ["harness", "table"] or argv[1:3] == ["scripts/gpu_part.py", "table"]


def show(argv: list[str], to: str = "") -> str:
    """A command as a shell would take it ($OUT, in a dry run without it, left for the shell to fill in)."""
    import shlex

    def quote(arg: str) -> str:
        return f'"$OUT"{shlex.quote(arg[4:])}' if arg.startswith("$OUT/") else shlex.quote(arg)

    return "+ " + " ".join(quote(a) for a in argv) + (f" > {quote(to)}" if to else "")


def dry_run(part: gpu_parts.Part, ctx: Context) -> list[str]:
    """What running ``part`` does, one line a step; the measuring and packing steps as commands that run as shown."""
    seed = REPO / "results" / ctx.gpu / "runs"
    pin = "" if part.kind == "headline" else gpu_plan.load(ctx.gpu).get("commit", "")
    ctx = replace(ctx, commit=pin) if pin else ctx
    steps = after(part, ctx)
    lines = [f"# {part.name}: {part.what} (estimate {part.estimate_s} s, {part.runs} run(s)"
             + (f", each stopped at {part.timeout_s} s)" if part.timeout_s else ")")]
    if pin:
        lines.append(f"# at the campaign's pinned commit {pin[:12]} (a worktree of it where this copy is elsewhere)")
    lines += [f"# seed {ctx.results}/runs/ with the records under {seed.relative_to(REPO)}/"
              + (f" and {ctx.results_from}" if ctx.results_from else "")] if steps else []
    lines += [show(c) for c in commands(part, ctx)]
    lines += [show(c, f"{ctx.pack(part)}/table.md" if is_table(c) else "") for c in steps]
    lines += [f"# new records -> {ctx.pack(part)}/results/runs/, stamp -> {ctx.pack(part)}/stamp.json" if steps
              else f"# stamp -> {ctx.pack(part)}/stamp.json", show(tar_command(part, ctx)),
              f"# ({part.name}.tar.gz is checked against the {RETURN_LIMIT_BYTES // 2**20} MiB a slot returns)"]
    return lines


# ------------------------------------------------------------------------------------------
# running parts


def fits(part: gpu_parts.Part, elapsed_s: float, ctx: Context, first: bool) -> bool:
    """Whether ``part`` may start ``elapsed_s`` after the command began: it finishes within the command's budget by
    its corrected estimate, and the command is not past its stop. The command's first part always starts, unless
    the machine's lease is known: then it starts when it finishes within the lease (its own stop bounds it within
    the command; the headline is sized to the command's budget, which the seconds the command spent before it, its
    wheels' install, would otherwise push it past)."""
    if ctx.started + elapsed_s >= ctx.stop_at:
        return False
    need = elapsed_s + gpu_plan.corrected_s(part, ctx.factor)
    if first:
        return not ctx.lease_s or need <= ctx.lease_s - LEASE_MARGIN_S
    return need <= ctx.budget_s


def left_line(left: list[str], ctx: Context) -> str:
    why = (f"the machine's lease ({ctx.lease_s:.0f} s when the command began) leaves no time to finish them"
           if ctx.lease_s else "to fit this command")
    return (f"not started, {why}: {' '.join(left)} (run them in the next: "
            f"bash scripts/gpu_measure.sh batch {' '.join(left)})")


def run_parts(parts: list[gpu_parts.Part], ctx: Context) -> int:
    """Run the parts in order while each still fits (``fits``; once one does not, none after it starts: the order is
    the plan's, by value); 0 when every part that ran ended ok."""
    status, left = 0, []
    for part in parts:
        if left or not fits(part, time.monotonic() - ctx.started, ctx, part is parts[0]):
            left.append(part.name)
            continue
        status |= run_part(part, ctx)
    if left:
        print(left_line(left, ctx))
    return status


def dry_fit(parts: list[gpu_parts.Part], ctx: Context) -> tuple[list[gpu_parts.Part], list[str]]:
    """``run_parts``'s choice made by estimate: the parts it would start, and the names of those it would leave."""
    started, left, elapsed = [], [], time.monotonic() - ctx.started
    for part in parts:
        if left or not fits(part, elapsed, ctx, part is parts[0]):
            left.append(part.name)
            continue
        started.append(part)
        elapsed += gpu_plan.corrected_s(part, ctx.factor)
    return started, left


def at_pin(part: gpu_parts.Part, ctx: Context) -> Context:
    """The context ``part`` runs in: the campaign's pinned commit (a worktree of it when this copy is elsewhere),
    but for the headline, which measures this copy. ValueError when the pin cannot be checked out here."""
    if part.kind == "headline":
        return ctx
    pinned = gpu_plan.checkout_pin(gpu_plan.load(ctx.gpu), ctx.commit, ctx.scratch)
    return replace(ctx, repo=pinned[0], commit=pinned[1]) if pinned else ctx


def run_part(part: gpu_parts.Part, ctx: Context) -> int:
    """Run one part, check it, pack it into OUT/PART.tar.gz; 0 when it ended ok."""
    try:
        ctx = at_pin(part, ctx)
    except ValueError as exc:
        print(f"{part.name}: not measured: {exc}", file=sys.stderr)
        return 1

    pack = ctx.pack(part)
    shutil.rmtree(pack, ignore_errors=True)
    (pack / "results" / "runs").mkdir(parents=True)
    (ctx.results / "runs").mkdir(parents=True, exist_ok=True)
    try:
        seeded = seed(ctx) if after(part, ctx) else 0
    except (OSError, tarfile.TarError) as exc:
        print(f"could not seed the store from {ctx.results_from or 'results/' + ctx.gpu}: {exc}", file=sys.stderr)
        seeded = -1
    before = {p.name for p in (ctx.results / "runs").glob("*.parquet")}
    copies_before = _copies_state(ctx.results)
    (pack / "before.txt").write_text("\n".join(sorted(before)) + "\n")
    commit, dirty = api.git_state(REPO)
    stamp = {"part": part.name, "gpu": ctx.gpu, "gpu_name": gpu_key()[1], "started": gpu_plan.now(),
             "code_fingerprint": api.code_fingerprint(), "path_fingerprint": gpu_parts.path_fingerprint(part),
             "commit": ctx.commit or commit, "dirty": dirty and ctx.repo == REPO, "estimate_s": part.estimate_s,
             "commands": [show(c)[2:] for c in commands(part, ctx)], "seeded_records": seeded}
    t0 = time.monotonic()
    with open(pack / f"{part.name}.log", "ab") as log:
        _say(log, f"# {part.name}: {part.what} (estimate {part.estimate_s} s)\n")
        codes = [_execute(c, log, ctx.stop_at, cwd=ctx.repo) for c in commands(part, ctx)]
        cut = None in codes
        for c in [] if cut else after(part, ctx):  # the check counts; the table only shows
            table = is_table(c)
            code = _execute(c, log, ctx.stop_at + 30, pack / "table.md" if table else None, ctx.repo)
            codes += [] if table else [1 if code is None else code]
    new = sorted(p for p in (ctx.results / "runs").glob("*.parquet") if p.name not in before)
    for path in new:
        shutil.copy2(path, pack / "results" / "runs" / path.name)
    copied = [name for name, state in _copies_state(ctx.results).items() if copies_before.get(name) != state]
    for name in copied:  # a sweep's copies of earlier runs: without them its table here lacks those rungs
        (pack / "results" / "copies" / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ctx.results / "copies" / name, pack / "results" / "copies" / name)
    failed = [c for c in codes if c not in (0, None)]
    stamp.update(ended=gpu_plan.now(), elapsed_s=round(time.monotonic() - t0, 1), records=[p.name for p in new],
                 status="cut" if cut else ("failed" if failed else "ok"), sweeps=_sweeps(new),
                 failures=_failures(pack / f"{part.name}.log"))
    (pack / "before.txt").unlink()
    (pack / "stamp.json").write_text(json.dumps(stamp, indent=1) + "\n")
    with open(ctx.scratch / JOURNAL, "a") as journal:  # the next command on this machine knows it is done
        journal.write(json.dumps(stamp) + "\n")
    if part.kind == "headline" and (pack / "table.md").exists():  # the table, readable without unpacking
        ctx.out.mkdir(parents=True, exist_ok=True)
        shutil.copy2(pack / "table.md", ctx.out / "headline.md")
    packed = pack_part(part, ctx)
    print(f"{part.name}: {stamp['status']}, {len(new)} new records, {stamp['elapsed_s']:.0f} s "
          f"(estimate {part.estimate_s} s)" + ("" if packed else "; NOT PACKED"), flush=True)
    return 0 if stamp["status"] == "ok" and packed else 1


def _copies_state(results: Path) -> dict[str, tuple[int, int]]:
    """Each file of copies of a store (one a sweep, appended to; compaction's parts in compacted/), by its path
    under copies/, with its size and change time."""
    folder = results / "copies"
    return {p.relative_to(folder).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in folder.rglob("*.parquet") if not p.name.startswith(".")}


def seed(ctx: Context) -> int:
    """Copy the records this GPU kind already has (results/<gpu>/runs/, and RESULTS_FROM) into the scratch store."""
    sources = [REPO / "results" / ctx.gpu / "runs"]
    if ctx.results_from:
        src = Path(ctx.results_from)
        if src.is_file():
            unpacked = ctx.scratch / "from"
            shutil.rmtree(unpacked, ignore_errors=True)
            with tarfile.open(src) as tar:
                tar.extractall(unpacked, filter="data")
            src = unpacked / "results"
        sources.append(src / "runs")
    copied = 0
    for folder in sources:
        for path in folder.glob("*.parquet"):
            target = ctx.results / "runs" / path.name
            if not target.exists():
                shutil.copy2(path, target)
                copied += 1
    return copied


def _execute(argv: list[str], log, deadline: float, stdout_to: Path | None = None, cwd: Path = REPO) -> int | None:
    """Run a command from the repository root, its output into the log and this terminal (or ``stdout_to``);
    its exit code, or None when it was stopped at ``deadline`` (SIGTERM to its process group, SIGKILL 20 s later)."""
    _say(log, show(argv, str(stdout_to or "")) + "\n")
    sink = open(stdout_to, "wb") if stdout_to else None
    try:
        proc = subprocess.Popen(argv, cwd=cwd, stdout=sink or subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
    except OSError as exc:
        _say(log, f"exit 127: could not start {argv[0]}: {exc}\n")
        return 127
    pump = threading.Thread(target=_pump, args=(proc.stdout, log), daemon=True) if proc.stdout else None
    if pump:
        pump.start()
    try:
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _say(log, f"stopped at the command's limit (its {STOP_AFTER_S} s, or the machine's lease less "
                  f"{LEASE_MARGIN_S} s): {argv[0]} ... (what it measured is packed)\n")
        _stop(proc)
        code = None
    if pump:
        pump.join(timeout=10)
    if sink:
        sink.close()
    if code:
        _say(log, f"exit {code}: {' '.join(argv)}\n")
    return code


def _pump(stream, log) -> None:
    for line in iter(stream.readline, b""):
        _say(log, line)


def _say(log, text) -> None:
    data = text if isinstance(text, bytes) else text.encode()
    sys.stdout.buffer.write(data)
    sys.stdout.flush()
    log.write(data)
    log.flush()


def _stop(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _sweeps(paths: list[Path]) -> list[str]:
    if not paths:
        return []
    return sorted({s for s in api.load_run_files(paths)["sweep_id"].fillna("") if s})


def _failures(log: Path) -> list[str]:
    """The lines of the log that say what failed (for the plan)."""
    lines = log.read_text(errors="replace").splitlines()
    return [ln.strip()[:240] for ln in lines if "FAILS THE PART" in ln or ln.startswith(("exit ", "stopped at",
                                                                                          "FAILED ", "ERROR "))][:10]


# ------------------------------------------------------------------------------------------
# the command line


def context(dry: bool) -> Context:
    """The command's settings from the environment; ValueError for an OUT that would take the datasets."""
    out, scratch = os.environ.get("OUT", ""), Path(os.environ.get("SCRATCH") or SCRATCH).resolve()
    if not out and not dry:
        raise ValueError("no output folder: give OUT_DIR or set $OUT (what a GPU machine brings back)")
    out_path = Path(out).resolve() if out else Path("$OUT")  # a dry run without OUT prints it as it will run
    if out and (scratch == out_path or out_path in scratch.parents):
        raise ValueError(f"SCRATCH={scratch} is inside OUT={out_path}: the runs' datasets and stores would be sent "
                         "back; choose a SCRATCH outside OUT")
    gpu = gpu_key()[0]
    limit, lease = os.environ.get("TIMEOUT_S", ""), os.environ.get("LEASE_S", "")
    if limit and not limit.isdigit():
        raise ValueError(f"TIMEOUT_S={limit!r} is not valid: give whole seconds, e.g. TIMEOUT_S=600")
    if lease and not (lease.isdigit() and int(lease) > LEASE_MARGIN_S):
        raise ValueError(f"LEASE_S={lease!r} is not valid: give the machine's whole seconds left, more than "
                         f"{LEASE_MARGIN_S}, e.g. LEASE_S=420")
    return Context(py=os.environ.get("PYTHON") or "python3", out=out_path, scratch=scratch, gpu=gpu, dry=dry,
                   results_from=str(Path(os.environ["RESULTS_FROM"]).resolve()) if os.environ.get("RESULTS_FROM")
                   else "", started=time.monotonic() - command_age_s(), timeout_s=int(limit or 0),
                   commit=gpu_headline.measured_commit(), factor=gpu_plan.correction(gpu_plan.load(gpu))[0],
                   lease_s=float(lease or 0))


def selected(names: list[str], ctx: Context) -> list[gpu_parts.Part]:
    """Parts by name; ``all``: every part; ``next``: what `next` would run now on this GPU kind."""
    if names in ([], ["all"]):
        return list(gpu_parts.catalogue())
    if names == ["next"]:
        return gpu_plan.pick(gpu_plan.pending(with_journal(gpu_plan.load(ctx.gpu), ctx)), int(ctx.budget_s),
                             factor=ctx.factor)
    return [gpu_parts.find(n) for n in names]


def with_journal(plan: dict, ctx: Context) -> dict:
    """The plan as it will be once what this machine already ran (a command before, same slot) is recorded."""
    path = ctx.scratch / JOURNAL
    for line in path.read_text().splitlines() if path.exists() else []:
        stamp = json.loads(line)
        if stamp.get("gpu") == plan["gpu"]:
            plan["parts"][stamp["part"]] = gpu_plan.entry(stamp, plan["parts"].get(stamp["part"]),
                                                          len(stamp.get("records", [])))
    return plan


def plans(what: str, rest: list[str]) -> int:
    """``plan [GPU ...]``: render the plans again; ``pin [COMMIT]``: pin every plan's campaign at COMMIT (HEAD)."""
    pin = ""
    if what == "pin":
        pin = gpu_plan.resolve(rest[0] if rest else "HEAD")
        rest = []
    for gpu in rest or ["h100", "h200"]:
        plan = gpu_plan.load(gpu)
        if pin:
            plan["commit"] = pin
        print("\n".join(gpu_plan.order(plan)))
        print(f"wrote {gpu_plan.save(plan)}/PLAN.md" + (f" (pinned at {pin[:12]})" if pin else ""))
    return 0


def main(argv: list[str]) -> int:
    what, rest = (argv[0], argv[1:]) if argv else ("", [])
    try:
        if what == "list":
            for p in gpu_parts.catalogue():
                print(f"{p.name:<40} {gpu_parts.TIER_NAMES[p.tier]:<20} {p.estimate_s:>4} s  {p.what}")
            return 0
        if what in ("plan", "pin"):
            return plans(what, rest)
        if what == "record":
            for tarball in gpu_plan.tarballs(rest, os.environ.get("IN", ".")):
                try:
                    print(gpu_plan.record(tarball))
                except (OSError, KeyError, json.JSONDecodeError, tarfile.TarError) as exc:
                    raise ValueError(f"cannot record {tarball}: {type(exc).__name__}: {exc}") from None
            print("now commit them: git add results/ && git commit -m 'GPU parts measured'")
            return 0
        if what not in ("dry-run", "run", "next", "headline") or (what == "run" and not rest):
            raise ValueError(f"unknown command {' '.join(argv)!r}: choose list, headline, dry-run [PART ...|all|next], "
                             "run PART ..., next, record FOLDER|PART.tar.gz|PART ..., plan [GPU ...] or pin [COMMIT]")
        dry = what == "dry-run" or os.environ.get("DRY_RUN") == "1"
        ctx = context(dry)
        parts = selected(["headline"] if what == "headline" else rest if what in ("dry-run", "run") else ["next"], ctx)
        if dry and what == "headline":
            print("\n".join(gpu_headline.summary(ctx.gpu)))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if what == "next" or rest == ["next"]:
        names = " ".join(p.name for p in parts)
        print(f"GPU {ctx.gpu}: next " + (f"{names} (~{sum(p.estimate_s for p in parts)} s by estimate)" if parts
                                         else f"nothing pending (see results/{ctx.gpu}/PLAN.md)"), flush=True)
    if dry:
        shown, left = dry_fit(parts, ctx) if ctx.lease_s else (parts, [])
        for part in shown:
            print("\n".join(dry_run(part, ctx)))
        if left:
            print(left_line(left, ctx))
        return 0
    return run_parts(parts, ctx) if parts else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
