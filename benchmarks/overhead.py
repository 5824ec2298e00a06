"""What the harness costs the training it measures (issue 11 asks <= 1%): its throughput against a plain loop.

    python benchmarks/overhead.py [--rounds 5] [--bf16] [--workloads resnet50,unet3d] [--steps 20] [--warmup 3]

For each workload at the smoke size on the CPU (or ``--device cuda``), two kinds of fresh process, in
interleaved rounds (the order flips every round, so a machine getting busier or quieter shows in both):

* the harness, as a user runs it: ``python -m harness run measure.mode=model ...`` (one batch kept on the
  device, so no loader work; the parent, its polls and its sampling included), reading ``samples_per_s``
  from the stored record;
* a plain hand-written loop of the same model, batch, optimizer and precision, built from the same
  builders (``harness.workload.workloads``, ``models/``, ``harness.workload.knobs.build_optimizer``), with the same warm-up,
  the same loss reads (step 0 and every ``log_every_n_steps``) and the same two clock reads around the
  measured steps, and nothing else: no thread, no progress file, no parent.

It prints, per workload, the ratio harness / plain of each round, and their median with the min-max band.
A ratio of 1.0 means the harness costs nothing; >= 0.99 is the target. The machine's load average is
printed with it: on a machine other work keeps busy, the band says how much the rounds disagree, and a
band much wider than 1% cannot tell a 1% overhead from noise.
"""

from __future__ import annotations

import argparse
import json
import os
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


def harness_run(settings: list[str], results: Path) -> dict:
    """One ``python -m harness run``: samples/s and the parent's CPU share in the window, from its stored record."""
    done = subprocess.run([sys.executable, "-m", "harness", "run", *settings, f"results_dir={results}"], cwd=REPO,
                          capture_output=True, text=True, env=_env())
    if done.returncode != 0:
        sys.exit(f"the harness run failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    from harness.store import load_runs

    run = load_runs(results).sort_values("timestamp").iloc[-1]
    parent = run["parent_cpu_pct"]
    return {"samples_per_s": float(run["samples_per_s"]), "step_ms": float(run["step_ms_mean"]),
            "parent_cpu_pct": None if parent is None or parent != parent else float(parent)}


def plain_run(settings: list[str]) -> float:
    """samples/s of the plain loop, in a fresh process of its own."""
    # a session of its own, as the harness's child has: with the kernel's autogroup scheduling a session is a
    # scheduling group, so under other load both sides get the same share of the CPUs
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--plain", json.dumps(settings)], cwd=REPO,
                          capture_output=True, text=True, env=_env(), start_new_session=True)
    if done.returncode != 0:
        sys.exit(f"the plain loop failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["samples_per_s"])


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
    dtype = {"32": None, "bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}[cfg.precision]
    x, y = next(iter(build_loader(cfg, build_dataset(cfg, workload), workload)))
    x, y = x.to(device), y.to(device)
    log_every = cfg.log_every_n_steps

    def step(i: int) -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        if i == 0 or (i + 1) % log_every == 0:
            loss.item()

    return step, device


def time_plain(cfg) -> float:
    """Seconds of the plain loop's measured steps (after the same warm-up the harness does)."""
    import torch

    step, device = plain_step(cfg)
    warmup, steps = cfg.measure.warmup_steps, cfg.measure.steps
    for i in range(warmup):
        step(i)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for i in range(warmup, warmup + steps):
        step(i)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def plain_loop(settings: list[str]) -> dict:
    cfg = _config(settings)
    return {"samples_per_s": cfg.measure.steps * cfg.batch_size / time_plain(cfg)}


# A model so small (one 1x1 convolution, SGD) that a step is ~0.2 ms on a CPU: what the harness's loop adds per step stands out against it.
TINY = [("workload", "custom"), ("workload.model._target_", "torch.nn.Conv1d"), ("workload.model.in_channels", 1),
        ("workload.model.out_channels", 2), ("workload.model.kernel_size", 1), ("workload.input_shape", [1, 8]),
        ("workload.target", "segmentation"), ("size", "smoke"), ("device", "cpu"), ("measure.mode", "model"),
        ("workload.optimizer._target_", "torch.optim.SGD"), ("measure.warmup_steps", 20), ("data.num_workers", 0)]


def loop_cost(rounds: int, steps: int) -> list[float]:
    """Microseconds the harness's measuring loop (``train_and_measure``, as the child runs it) adds to a step over
    the plain loop, per round: both on the tiny model, alternating in this one process (the order flips every
    round), so that the machine's slow minutes and a process's own speed fall on both sides alike."""
    from harness.run.measure import train_and_measure

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


def main(argv: list[str]) -> int:
    if argv[:1] == ["--plain"]:
        print(json.dumps(plain_loop(json.loads(argv[1]))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workloads", default="resnet50,unet3d")
    parser.add_argument("--bf16", action="store_true", help="precision=bf16-mixed instead of fp32")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--loop-rounds", type=int, default=20, help="rounds of the in-process loop-cost check (0: none)")
    parser.add_argument("--loop-steps", type=int, default=2000, help="tiny-model steps per side of a loop-cost round")
    args = parser.parse_args(argv)
    precision = "bf16-mixed" if args.bf16 else "32"
    workloads = args.workloads.split(",")
    ratios: dict[str, list[float]] = {w: [] for w in workloads}
    parent: dict[str, list[float]] = {w: [] for w in workloads}
    step_ms: dict[str, list[float]] = {w: [] for w in workloads}
    print(f"{os.cpu_count()} CPUs, load average at start {_load()}; precision={precision}, "
          f"{args.warmup} warm-up + {args.steps} measured steps, {args.rounds} rounds")
    print("\n1. End to end: the harness as a user runs it against the plain loop, each a fresh process")
    with tempfile.TemporaryDirectory(prefix="harness-overhead-") as tmp:
        for r in range(args.rounds):
            for workload in workloads:
                settings = _settings(workload, precision, args.steps, args.warmup, args.device)
                results = Path(tmp) / f"{workload}-{r}"
                if r % 2 == 0:
                    harness, plain = harness_run(settings, results), plain_run(settings)
                else:
                    plain, harness = plain_run(settings), harness_run(settings, results)
                ratio = harness["samples_per_s"] / plain
                ratios[workload].append(ratio)
                step_ms[workload].append(harness["step_ms"])
                if harness["parent_cpu_pct"] is not None:
                    parent[workload].append(harness["parent_cpu_pct"])
                print(f"round {r + 1} {workload:9s} harness {harness['samples_per_s']:8.2f} samples/s, "
                      f"plain {plain:8.2f} samples/s, ratio {ratio:.3f}; harness parent CPU "
                      f"{_pct(harness['parent_cpu_pct'])} of one CPU  (load {_load()})", flush=True)
    for workload, values in ratios.items():
        if not values:
            continue
        mid, low, high = median_band(values)
        print(f"{workload:9s} harness/plain throughput: median {mid:.3f}, 95% band of the median [{low:.3f}-{high:.3f}]"
              f" (rounds {min(values):.3f}-{max(values):.3f}, {len(values)} rounds): {verdict(low, high, len(values))}")
    cost = []
    if args.loop_rounds > 0:
        print(f"\n2. The measuring loop's own cost per step: train_and_measure against the plain loop on a tiny "
              f"model, {args.loop_steps} steps a side, alternating in one process, {args.loop_rounds} rounds")
        cost = loop_cost(args.loop_rounds, args.loop_steps)
        mid, low, high = median_band(cost)
        print(f"loop cost: median {mid:+.2f} us a step, 95% band [{low:+.2f}, {high:+.2f}] us "
              f"(rounds {min(cost):+.1f} to {max(cost):+.1f})")
    print("\n3. Accounted overhead: the parent's CPU (as if every cycle of it were taken from the child, an upper "
          "bound) plus the loop's cost per step (upper end of its band) over the workload's step time")
    for workload in workloads:
        if not step_ms[workload]:
            continue
        parent_frac = statistics.median(parent[workload]) / 100.0 if parent[workload] else None
        loop_frac = max(0.0, median_band(cost)[2]) / 1000.0 / statistics.median(step_ms[workload]) if cost else 0.0
        if parent_frac is None:
            print(f"{workload:9s} parent CPU not recorded (the parent missed the window's edges): no bound")
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
