"""What the harness costs the training it measures (the aim: <= 1%): its throughput against a plain loop.

    python benchmarks/overhead.py [--rounds 5] [--inproc-rounds 100] [--bf16] [--workloads resnet50,unet3d]
                                  [--steps N] [--inproc-steps N] [--sequential] [--control] [--loop-rounds 20]

The two sides, per workload at the smoke size (``measure.mode=model``: one batch kept on the device, so no loader
work):

* the harness, as a user runs it: ``python -m harness run ...``, its parent (polls, sampling, progress display)
  included, reading ``samples_per_s``, ``measured_s`` and ``window_start_unix`` from the stored record;
* a plain hand-written loop of the same model, batch, optimizer and precision, built from the same builders,
  with the same warm-up and the same loss reads (step 0 and every ``log_every_n_steps``), and nothing else: no
  thread, no progress file, no parent.

It measures four ways, because on a shared machine no single one resolves 1%:

1. End to end, fresh processes. Paired (a CPU with >= 2 CPUs): each side runs pinned to one half of the CPUs
   (the harness's parent with its child) while a reference plain loop steps on the other half, keeping each
   step's end time; a side's speed is its throughput over the reference's within its own measured window, so
   the machine's speed of that moment (which wanders by 10-30% over seconds on a shared host, on both CPUs at
   once) divides out. A round: both sides on the first half, then on the second (a faster CPU favours neither);
   its ratio is harness speed / plain speed, geometric means. ``--control`` adds an A/A round (the plain loop in
   the harness's place): the method's own noise and bias. Sequential (``--sequential``, and on CUDA, where both
   sides would share the device): one fresh process after the other, the order flipping every round.
2. In one process, on one model: the harness's measuring loop (``train_and_measure``, the function its child
   runs, writing the child's markers, while a poller process does what the parent does: its own wait loop and
   display) against the plain loop on the same model, optimizer and batch shape, alternating every second or
   two. Fresh processes differ by a few % in speed (a model built again lands elsewhere in memory); one model
   on both sides removes that, and fine alternation removes the machine's drift.
3. The measuring loop's own cost per step, in microseconds: the same in-process alternation on a tiny model.
4. Accounted: the parent's CPU share (``parent_cpu_pct``, charged in full) plus the loop's cost.

Each ratio is printed per round, with the median, a 95% bootstrap band of the median (rounds resampled), and a
verdict only from >= 5 rounds: ">= 0.99 shown" when the whole band is above 0.99, "below 0.99", or
"inconclusive".
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _env() -> dict:
    """This environment with the repository first on the import path (what PYTHONPATH already held is kept)."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, PYTHONPATH=path)


def _settings(workload: str, precision: str, steps: int, warmup: int, device: str) -> list[str]:
    return [f"workload={workload}", "size=smoke", f"device={device}", f"precision={precision}", "measure.mode=model",
            f"measure.steps={steps}", f"measure.warmup_steps={warmup}"]


DEFAULT_STEPS = {"resnet50": 40, "unet3d": 200}  # ~10 s windows on one CPU of this machine (300 / 48 ms a step)
BLOCK_STEPS = {"resnet50": 10, "unet3d": 50}  # in-process blocks of ~1.5 s on both CPUs (150 / 30 ms a step)


def _pinned(cpus: set[int] | None):
    """For ``preexec_fn``: the new process (and all it starts) runs on ``cpus`` only."""
    return None if cpus is None else (lambda: os.sched_setaffinity(0, cpus))


def cpu_halves() -> tuple[set[int], set[int]] | None:
    """This process's CPUs split in two equal, disjoint halves (an odd one left out); None below 2 CPUs."""
    cpus = sorted(os.sched_getaffinity(0))
    half = len(cpus) // 2
    return (set(cpus[:half]), set(cpus[half:2 * half])) if half else None


def harness_run(settings: list[str], results: Path, cpus: set[int] | None = None) -> dict:
    """One ``python -m harness run``: samples/s, its window and the parent's CPU share in it, from its stored record."""
    done = subprocess.run([sys.executable, "-m", "harness", "run", *settings, f"results_dir={results}"], cwd=REPO,
                          capture_output=True, text=True, env=_env(), preexec_fn=_pinned(cpus))
    if done.returncode != 0:
        sys.exit(f"the harness run failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    from harness.store import load_runs

    run = load_runs(results).sort_values("timestamp").iloc[-1]
    parent = run["parent_cpu_pct"]
    return {"samples_per_s": float(run["samples_per_s"]), "step_ms": float(run["step_ms_mean"]),
            "parent_cpu_pct": None if parent is None or parent != parent else float(parent),
            "window": (float(run["window_start_unix"]), float(run["measured_s"])),
            "step_s": float(run["measured_s"]) / int(run["measured_steps"])}


def plain_run(settings: list[str], cpus: set[int] | None = None) -> dict:
    """The plain loop's fixed window (the harness's warm-up and steps), in a fresh process of its own: samples/s,
    the window (UNIX start, seconds) and seconds a step."""
    # a session of its own, as the harness's child has: with the kernel's autogroup scheduling a session is a
    # scheduling group, so under other load both sides get the same share of the CPUs
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--plain", json.dumps(settings)], cwd=REPO,
                          capture_output=True, text=True, env=_env(), start_new_session=True, preexec_fn=_pinned(cpus))
    if done.returncode != 0:
        sys.exit(f"the plain loop failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return {**out, "window": tuple(out["window"]), "step_ms": out["step_s"] * 1000.0, "parent_cpu_pct": None}


FOLLOW_MAX_S = 1800.0  # a follower nobody stops ends by itself


class Follower:
    """A plain loop in its own process on ``cpus``, stepping from the moment it is ready until :meth:`stop`,
    keeping each step's end time: its speed can then be read over any window that fell inside."""

    def __init__(self, settings: list[str], cpus: set[int] | None):
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--follow", json.dumps(settings)],
                                     cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
                                     start_new_session=True, preexec_fn=_pinned(cpus))
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            self.proc.kill()
            sys.exit(f"the plain loop did not start:\n{self.proc.stderr.read()[-3000:]}")

    def stop(self) -> dict:
        """Its steps: {"first": the first step's start, "ends": every step's end}, UNIX seconds."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGUSR1)
        out, err = self.proc.communicate(timeout=600)
        if self.proc.returncode != 0:
            sys.exit(f"the plain loop failed (exit {self.proc.returncode}):\n{err[-3000:]}")
        return json.loads(out.strip().splitlines()[-1])


MIN_STEPS_IN_WINDOW = 5


def seconds_per_step_within(steps: dict, window: tuple[float, float]) -> float:
    """The follower's mean step time over the steps that began and ended inside ``window`` (UNIX start, length)."""
    start, end = window[0], window[0] + window[1]
    ends = steps["ends"]
    inside = [i for i, e in enumerate(ends) if e <= end and (ends[i - 1] if i else steps["first"]) >= start]
    if len(inside) < MIN_STEPS_IN_WINDOW:
        raise ValueError(f"only {len(inside)} plain steps fell inside the {window[1]:.1f} s window "
                         f"(at least {MIN_STEPS_IN_WINDOW}): measure more steps")
    first, last = inside[0], inside[-1]
    return (ends[last] - (ends[first - 1] if first else steps["first"])) / len(inside)


def against_reference(settings: list[str], results: Path, kind: str, cpus: set[int], reference_cpus: set[int]) -> dict:
    """One side of a paired round: ``kind`` ("harness", or "plain": the plain loop's fixed window) on ``cpus`` while a
    reference plain loop steps on ``reference_cpus``. Adds "speed": the side's throughput over the reference's in
    the side's window (the machine's speed at that moment divides out)."""
    reference = Follower(settings, reference_cpus)
    try:
        side = harness_run(settings, results, cpus) if kind == "harness" else plain_run(settings, cpus)
    finally:
        steps = reference.stop()
    return {**side, "speed": seconds_per_step_within(steps, side["window"]) / side["step_s"]}


def paired_round(settings: list[str], results: Path, halves: tuple[set[int], set[int]], flip: bool,
                 measured: str = "harness") -> tuple[float, list[dict], list[dict]]:
    """One round: ``measured`` (the harness; "plain" for the A/A control) and the plain loop, each once on either
    half against a reference on the other. Returns (measured/plain throughput: the geometric mean of the two halves'
    speed ratios, the measured side's runs, the plain side's runs). ``flip`` puts the plain loop first."""
    a, b = halves
    roles = ("plain", "measured") if flip else ("measured", "plain")
    runs: dict[str, list[dict]] = {"measured": [], "plain": []}
    for cpus, reference in ((a, b), (b, a)):
        for role in roles:
            kind = measured if role == "measured" else "plain"
            runs[role].append(against_reference(settings, results, kind, cpus, reference))
    speed = {role: math.prod(r["speed"] for r in rs) ** (1 / len(rs)) for role, rs in runs.items()}
    return speed["measured"] / speed["plain"], runs["measured"], runs["plain"]


def _config(settings: list):
    """A resolved RunConfig from ``key=value`` strings or (key, value) pairs."""
    import torch

    from harness import config as config_mod

    cfg = config_mod.RunConfig()
    for item in settings:
        key, value = item.split("=", 1) if isinstance(item, str) else item
        config_mod.set_key(cfg, key, value)
    return config_mod.resolve(cfg, cuda_available=torch.cuda.is_available())


def plain_step(cfg):
    """A training step as one would write it by hand, on what the harness would build for ``cfg``: (step, device)."""
    import torch

    from harness.workload.build import build_all
    from harness.workload.data import build_dataset, build_loader
    from harness.workload.knobs import build_optimizer, guard_cpu_bf16_conv3d

    workload = cfg.workload
    device = torch.device(cfg.device)
    torch.manual_seed(cfg.seed)
    model, loss_fn, _ = build_all(cfg)
    model = model.to(device)
    guard_cpu_bf16_conv3d(model, cfg)  # part of the model the harness trains on a CPU in bf16 (docs/cpu-bf16-conv3d.md)
    model.train()
    loss_fn = loss_fn.to(device)
    optimizer = build_optimizer(cfg, workload, model.parameters())
    x, y = next(iter(build_loader(cfg, build_dataset(cfg, workload), workload)))
    return hand_step(cfg, model, loss_fn, optimizer, x.to(device), y.to(device)), device


def hand_step(cfg, model, loss_fn, optimizer, x, y):
    """The step itself, as written by hand: zero the gradients, forward under autocast, backward, optimizer step,
    and the loss read at step 0 and every ``log_every_n_steps`` (the harness's logging sync)."""
    import torch

    dtype = {"32": None, "bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}[cfg.precision]
    device_type, log_every = x.device.type, cfg.log_every_n_steps

    def step(i: int) -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type, dtype=dtype, enabled=dtype is not None):
            loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        if i == 0 or (i + 1) % log_every == 0:
            loss.item()

    return step


def time_plain(cfg, window: list | None = None) -> float:
    """Seconds of the plain loop's measured steps (after the same warm-up the harness does); ``window`` gets the
    window's UNIX start."""
    import torch

    step, device = plain_step(cfg)
    warmup, steps = cfg.measure.warmup_steps, cfg.measure.steps
    gc.collect()  # as the harness's child does before its warm-up: the set-up's debt to the collector paid here
    for i in range(warmup):
        step(i)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for i in range(warmup, warmup + steps):
        step(i)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    if window is not None:
        window.append(time.time() - seconds)
    return seconds


def plain_loop(settings: list[str]) -> dict:
    cfg = _config(settings)
    window: list = []
    seconds = time_plain(cfg, window)
    return {"samples_per_s": cfg.measure.steps * cfg.batch_size / seconds, "window": [window[0], seconds],
            "step_s": seconds / cfg.measure.steps}


def follow(settings: list[str]) -> dict:
    """The follower's side: warm up, say "ready", step until SIGUSR1 (or the parent's death), keep step ends."""
    cfg = _config(settings)
    step, _ = plain_step(cfg)  # a CPU run: the loss reads are its syncs, as in the harness
    warmup = cfg.measure.warmup_steps
    for i in range(warmup):
        step(i)
    stop: list = []
    signal.signal(signal.SIGUSR1, lambda *_: stop.append(True))
    try:  # Linux: end with the benchmark, never outlive it
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGUSR1)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    print("ready", flush=True)
    ends = []
    i = warmup
    first = t = time.perf_counter()
    while not stop and t - first < FOLLOW_MAX_S:
        step(i)
        i += 1
        t = time.perf_counter()
        ends.append(t)
    offset = time.time() - time.perf_counter()
    return {"first": first + offset, "ends": [e + offset for e in ends]}


class _Alive:
    """For the poller: the measured process (the benchmark itself) stays alive until it ends the poller; its end
    is never seen (a pipe nobody writes), so the poller blocks as the parent does on a child's pidfd."""

    pid = None

    def __init__(self):
        self.exit_fd, self._writer = os.pipe()

    def poll(self):
        return None


def poll(pid: int, job: str, channel_fd: int | None = None) -> None:
    """The harness parent's watch over its child, for the in-process comparison: its own wait loop (progress
    markers on the channel, psutil sampling at the configured interval outside a CPU window, the progress display at
    its refresh rate on a terminal), pointed at ``pid``, until killed. The benchmark stops (SIGSTOP) and resumes it
    around the harness's side."""
    from rich.console import Console

    from harness import config as config_mod
    from harness.commands.progress import RunProgress
    from harness.run.child import channel
    from harness.run.parent import isolate
    from harness.run import monitor

    try:  # Linux: end with the benchmark, never outlive it
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    interval = config_mod.RunConfig().measure.sample_interval_s
    console = Console(file=open(os.devnull, "w"), force_terminal=True, width=120)  # noqa: SIM115 - until killed
    print("ready", flush=True)
    markers = channel.Markers(socket.socket(fileno=channel_fd)) if channel_fd is not None else None
    with RunProgress(console, "overhead") as progress:
        isolate._wait(_Alive(), Path(job), time.monotonic(), math.inf, progress.update,
                      isolate._Watch(monitor.Sampler(pid), interval), markers)


def in_process(settings: list[str], rounds: int, harness_ms: list[float] | None = None,
               poller_on: bool = True) -> list[float]:
    """Harness / plain throughput per round, both sides in this one process, training the SAME model, optimizer,
    loader and batch shape (a rebuilt model lands elsewhere in memory, which here moves a step's time by up to 5%):

    * the harness's side is ``train_and_measure``, the function its child runs, writing the child's progress
      markers, while a poller process does what the harness's parent does (``poll``); the poller is stopped
      outside the harness's side;
    * the plain side is the hand-written step, with the same warm-up, the poller stopped.

    A round is one of each, in an order that flips every round; they alternate every second or two, so the
    machine's speed, which wanders over seconds here, falls on both alike. ``harness_ms`` gets the harness's
    mean step time of every round."""
    import torch

    from harness.run.child import measure
    from harness.workload.data import build_dataset, build_loader

    cfg = _config(settings)
    workload, device = cfg.workload, torch.device(cfg.device)
    torch.manual_seed(cfg.seed)
    prep = measure.prepare(cfg, workload, device)
    loader = build_loader(cfg, build_dataset(cfg, workload), workload)
    x, y = next(iter(loader))
    x, y = x.to(device, memory_format=prep.memory_format), y.to(device)
    step = hand_step(cfg, prep.model, prep.loss_fn, prep.optimizer, x, y)
    warmup, steps = cfg.measure.warmup_steps, cfg.measure.steps

    def plain() -> float:
        for i in range(warmup + steps):
            if i == warmup:
                if device.type == "cuda":  # the window opens on an idle device, as the harness's does
                    torch.cuda.synchronize(device)
                start = time.perf_counter()
            step(i)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return (time.perf_counter() - start) / steps

    from harness.run.child import channel

    ours, theirs = socket.socketpair()  # the progress channel: the child's end here, the parent's in the poller
    with tempfile.TemporaryDirectory(prefix="harness-overhead-job-") as job:
        def progress(phase: str, **info) -> None:  # the child's marker writer
            payload = {"phase": phase, "time": time.time(), **info}
            measure.write_json(Path(job) / "progress.json", payload)
            channel.tell(ours, payload, wait=phase == "measure" and poller_on)  # a stopped poller cannot answer

        poller = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--poll", str(os.getpid()), job,
                                   str(theirs.fileno())], cwd=REPO, stdout=subprocess.PIPE, env=_env(), text=True,
                                  pass_fds=(theirs.fileno(),))
        theirs.close()
        real = measure.prepare, measure.build_dataset, measure.build_loader
        measure.prepare = lambda *args, **kwargs: prep  # the harness's side trains the plain side's model
        # ... and takes its batches from the one loader built above: a loader and a data set built again every
        # round, on one side only, slowed the steps after them (resnet50: 0.957 of the plain loop with them, 0.997
        # without, 30 rounds each), a cost of this benchmark's set-up, not of the measuring loop
        measure.build_dataset = lambda *args, **kwargs: None
        measure.build_loader = lambda *args, **kwargs: loader
        try:
            if poller.stdout.readline().strip() != "ready":
                sys.exit("the poller did not start")
            poller.send_signal(signal.SIGSTOP)
            out = []
            for r in range(rounds):
                seconds = {}
                for side in (("harness", "plain") if r % 2 == 0 else ("plain", "harness")):
                    if side == "harness":
                        if poller_on:
                            poller.send_signal(signal.SIGCONT)
                        m, _ = measure.train_and_measure(cfg, workload, progress)
                        poller.send_signal(signal.SIGSTOP)
                        seconds[side] = m.measured_s / len(m.step_ms)
                        if harness_ms is not None:
                            harness_ms.append(1000.0 * seconds[side])
                    else:
                        seconds[side] = plain()
                out.append(seconds["plain"] / seconds["harness"])
            return out
        finally:
            measure.prepare, measure.build_dataset, measure.build_loader = real
            poller.kill()
            poller.wait()


# A model so small (one 1x1 convolution, SGD) that a step is ~0.2 ms on a CPU: what the harness's loop adds per
# step stands out against it.
TINY = [("workload", "custom"), ("workload.model._target_", "torch.nn.Conv1d"), ("workload.model.in_channels", 1),
        ("workload.model.out_channels", 2), ("workload.model.kernel_size", 1), ("workload.input_shape", [1, 8]),
        ("workload.target", "segmentation"), ("size", "smoke"), ("device", "cpu"), ("measure.mode", "model"),
        ("workload.optimizer._target_", "torch.optim.SGD"), ("measure.warmup_steps", 20), ("data.num_workers", 0)]


def loop_cost(rounds: int, steps: int) -> list[float]:
    """Microseconds the harness's measuring loop (``train_and_measure``, as the child runs it) adds to a step over
    the plain loop, per round: both on the tiny model, alternating in this one process (the order flips every
    round), so that the machine's slow minutes and a process's own speed fall on both sides alike."""
    from harness.run.child.measure import train_and_measure

    cfg = _config(TINY + [("measure.steps", steps)])
    quiet = lambda *args, **kwargs: None  # noqa: E731 - the progress markers: the child writes a file per phase
    out = []
    for r in range(rounds):
        sides = {}
        for side in (("harness", "plain") if r % 2 == 0 else ("plain", "harness")):
            if side == "harness":
                m, _ = train_and_measure(cfg, cfg.workload, quiet)
                sides[side] = m.measured_s / len(m.step_ms)
            else:
                sides[side] = time_plain(cfg) / steps
        out.append((sides["harness"] - sides["plain"]) * 1e6)
    return out


def median_band(values: list[float], draws: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """The median and a 95% bootstrap band of it (rounds resampled: the round is the unit, not the step)."""
    import random

    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(draws))
    return statistics.median(values), medians[int(0.025 * draws)], medians[int(0.975 * draws) - 1]


MIN_ROUNDS = 5  # fewer rounds than this give no verdict: a bootstrap of two or three values says nothing


def verdict(low: float, high: float, rounds: int, target: float = 0.99) -> str:
    if rounds < MIN_ROUNDS:
        return f"no verdict from {rounds} round(s) (at least {MIN_ROUNDS})"
    if low >= target:
        return f">= {target} shown"
    if high < target:
        return f"below {target}"
    return f"inconclusive: the band straddles {target}"


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.1f} {five:.1f} {fifteen:.1f}"


def _cpus(cpus: set[int]) -> str:
    ordered = sorted(cpus)
    if len(ordered) > 1 and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"CPUs {ordered[0]}-{ordered[-1]}"
    return ("CPU " if len(ordered) == 1 else "CPUs ") + ",".join(map(str, ordered))


def _summary(label: str, values: list[float]) -> None:
    mid, low, high = median_band(values)
    print(f"{label}: median {mid:.3f}, 95% band of the median [{low:.3f}-{high:.3f}] "
          f"(rounds {min(values):.3f}-{max(values):.3f}, {len(values)} rounds): {verdict(low, high, len(values))}")


def main(argv: list[str]) -> int:
    if argv[:1] == ["--plain"]:
        print(json.dumps(plain_loop(json.loads(argv[1]))))
        return 0
    if argv[:1] == ["--poll"]:
        poll(int(argv[1]), argv[2], int(argv[3]) if len(argv) > 3 else None)
        return 0
    if argv[:1] == ["--follow"]:
        print(json.dumps(follow(json.loads(argv[1]))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 6; 12 with --as-users)")
    parser.add_argument("--workloads", default="resnet50,unet3d")
    parser.add_argument("--bf16", action="store_true", help="precision=bf16-mixed instead of fp32")
    parser.add_argument("--steps", type=int, default=None,
                        help=f"measured steps a run (default: {DEFAULT_STEPS}, 20 for other workloads)")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up steps (default 3; 5 with --as-users)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sequential", action="store_true",
                        help="run the two sides one after the other instead of at once on disjoint CPUs")
    parser.add_argument("--control", action="store_true",
                        help="paired mode: add an A/A round (the plain loop in the harness's place) per round")
    parser.add_argument("--inproc-rounds", type=int, default=100,
                        help="rounds of the in-process comparison (0: none)")
    parser.add_argument("--inproc-steps", type=int, default=None,
                        help=f"measured steps a side of an in-process round (default: {BLOCK_STEPS}, 20 for others)")
    parser.add_argument("--loop-rounds", type=int, default=20,
                        help="rounds of the in-process loop-cost check (0: none)")
    parser.add_argument("--loop-steps", type=int, default=2000, help="tiny-model steps per side of a loop-cost round")
    parser.add_argument("--as-users", action="store_true",
                        help="only the end-to-end comparison users make: `harness run` against a plain script of "
                             "their own, fresh processes on all CPUs, ABBA order (benchmarks/end_to_end.py)")
    # here, not at the top: end_to_end imports the user script's torch, which the poller process (this file
    # with --poll, standing in for the harness's parent) must not load
    import end_to_end

    end_to_end.add_options(parser)
    args = parser.parse_args(argv)
    if args.as_users:
        end_to_end.check_options(parser, args)
        end_to_end.as_users(args.workloads.split(","), args.rounds or 12, args.steps or 30,
                 5 if args.warmup is None else args.warmup, _env(), _summary, args.mode, args.data, args.flops)
        return 0
    args.rounds = 6 if args.rounds is None else args.rounds
    args.warmup = 3 if args.warmup is None else args.warmup
    precision = "bf16-mixed" if args.bf16 else "32"
    workloads = args.workloads.split(",")
    halves = cpu_halves()
    sequential = args.sequential or args.device != "cpu" or halves is None
    ratios: dict[str, list[float]] = {w: [] for w in workloads}
    controls: dict[str, list[float]] = {w: [] for w in workloads}
    parent: dict[str, list[float]] = {w: [] for w in workloads}
    step_ms: dict[str, list[float]] = {w: [] for w in workloads}
    steps = {w: args.steps or DEFAULT_STEPS.get(w, 20) for w in workloads}
    print(f"{len(os.sched_getaffinity(0))} CPUs, load average at start {_load()}; precision={precision}, "
          f"{args.warmup} warm-up + {', '.join(f'{w} {n}' for w, n in steps.items())} measured steps, "
          f"{args.rounds} rounds")
    if args.rounds <= 0:
        pass
    elif sequential:
        print("\n1. End to end, sequential: the harness as a user runs it against the plain loop, each a fresh "
              "process, one after the other")
    else:
        a, b = halves
        print(f"\n1. End to end, paired: the harness as a user runs it, and the plain loop, each pinned to one half "
              f"of the CPUs (the harness's parent with its child) while a reference plain loop steps on the other "
              f"half; each side's speed is its throughput over the reference's in its own measured window. A round: "
              f"both sides on {_cpus(a)}, then on {_cpus(b)}; ratio = harness speed / plain speed (geometric means)")
    with tempfile.TemporaryDirectory(prefix="harness-overhead-") as tmp:
        for r in range(args.rounds):
            for workload in workloads:
                settings = _settings(workload, precision, steps[workload], args.warmup, args.device)
                results = Path(tmp) / f"{workload}-{r}"
                if sequential:
                    if r % 2 == 0:
                        harness, plain = harness_run(settings, results), plain_run(settings)
                    else:
                        plain, harness = plain_run(settings), harness_run(settings, results)
                    ratio = harness["samples_per_s"] / plain["samples_per_s"]
                    shown = [harness]
                    detail = (f"harness {harness['samples_per_s']:8.2f} samples/s, plain {plain['samples_per_s']:8.2f}"
                              f" samples/s, ratio {ratio:.3f}")
                else:
                    ratio, shown, plains = paired_round(settings, results, halves, flip=r % 2 == 1)
                    detail = (f"harness {shown[0]['step_ms']:6.1f} / {shown[1]['step_ms']:6.1f} ms a step, speed "
                              f"{shown[0]['speed']:.3f} / {shown[1]['speed']:.3f}; plain {plains[0]['step_ms']:6.1f} / "
                              f"{plains[1]['step_ms']:6.1f} ms, speed {plains[0]['speed']:.3f} / "
                              f"{plains[1]['speed']:.3f}; ratio {ratio:.3f}")
                    if args.control:
                        aa, _, _ = paired_round(settings, results, halves, flip=r % 2 == 1, measured="plain")
                        controls[workload].append(aa)
                        detail += f"; A/A control {aa:.3f}"
                ratios[workload].append(ratio)
                step_ms[workload] += [h["step_ms"] for h in shown]
                parent[workload] += [h["parent_cpu_pct"] for h in shown if h["parent_cpu_pct"] is not None]
                cpu = ", ".join(_pct(h["parent_cpu_pct"]) for h in shown)
                print(f"round {r + 1} {workload:9s} {detail}; harness parent CPU {cpu} of one CPU  (load {_load()})",
                      flush=True)
    for workload, values in ratios.items():
        if values:
            _summary(f"{workload:9s} harness/plain throughput", values)
        if controls[workload]:
            mid, low, high = median_band(controls[workload])
            print(f"{workload:9s} A/A control, plain/plain: median {mid:.3f}, 95% band of the median "
                  f"[{low:.3f}-{high:.3f}] ({len(controls[workload])} rounds): "
                  + ("1 inside the band: no bias shown" if low <= 1.0 <= high else "1 outside the band: the method "
                     "itself is biased by this much"))
    inproc_ms: dict[str, list[float]] = {w: [] for w in workloads}
    if args.inproc_rounds > 0:
        print(f"\n2. In one process, on the same model: the harness's measuring loop (the child's function, its "
              f"markers, a poller doing what the parent does) against the plain loop, alternating every second or "
              f"two, {args.inproc_rounds} rounds; the warm-up before each side is {args.warmup} steps")
        for workload in workloads:
            block = args.inproc_steps or BLOCK_STEPS.get(workload, 20)
            values = in_process(_settings(workload, precision, block, args.warmup, args.device), args.inproc_rounds,
                                inproc_ms[workload])
            _summary(f"{workload:9s} harness/plain throughput, {block} steps a side", values)
    cost = []
    if args.loop_rounds > 0:
        print(f"\n3. The measuring loop's own cost per step: train_and_measure against the plain loop on a tiny "
              f"model, {args.loop_steps} steps a side, alternating in one process, {args.loop_rounds} rounds")
        cost = loop_cost(args.loop_rounds, args.loop_steps)
        mid, low, high = median_band(cost)
        print(f"loop cost: median {mid:+.2f} us a step, 95% band [{low:+.2f}, {high:+.2f}] us "
              f"(rounds {min(cost):+.1f} to {max(cost):+.1f})")
    print("\n4. Accounted overhead: the parent's CPU (as if every cycle of it were taken from the child, an upper "
          "bound) plus the loop's cost per step (upper end of its band) over the workload's step time")
    for workload in workloads:
        step_ms[workload] = step_ms[workload] or inproc_ms[workload]
        if not step_ms[workload]:
            continue
        parent_frac = statistics.median(parent[workload]) / 100.0 if parent[workload] else None
        loop_frac = max(0.0, median_band(cost)[2]) / 1000.0 / statistics.median(step_ms[workload]) if cost else 0.0
        if parent_frac is None:
            why = ("the parent missed the window's edges" if ratios[workload]
                   else "it comes from the end-to-end runs, and --rounds 0 ran none")
            print(f"{workload:9s} parent CPU not recorded ({why}): no bound")
            continue
        total = parent_frac + loop_frac
        print(f"{workload:9s} parent {100 * parent_frac:.3f}% + loop {100 * loop_frac:.4f}% of a "
              f"{statistics.median(step_ms[workload]):.0f} ms step = {100 * total:.3f}%: harness/plain >= "
              f"{1 - total:.4f} ({'meets' if 1 - total >= 0.99 else 'misses'} >= 0.99)")
    print(f"\nload average at end {_load()} on {os.cpu_count()} CPUs")
    return 0


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}%"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
