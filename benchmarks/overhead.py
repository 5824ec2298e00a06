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


def harness_run(settings: list[str], results: Path) -> float:
    """samples/s of one ``python -m harness run``, from the record it stored."""
    done = subprocess.run([sys.executable, "-m", "harness", "run", *settings, f"results_dir={results}"], cwd=REPO,
                          capture_output=True, text=True, env=_env())
    if done.returncode != 0:
        sys.exit(f"the harness run failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    from harness.store import load_runs

    runs = load_runs(results).sort_values("timestamp")
    return float(runs["samples_per_s"].iloc[-1])


def plain_run(settings: list[str]) -> float:
    """samples/s of the plain loop, in a fresh process of its own."""
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--plain", json.dumps(settings)], cwd=REPO,
                          capture_output=True, text=True, env=_env())
    if done.returncode != 0:
        sys.exit(f"the plain loop failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["samples_per_s"])


def plain_loop(settings: list[str]) -> dict:
    """A training loop as one would write it by hand, on what the harness would build for these settings."""
    import torch

    from harness import config as config_mod
    from harness.workload.data import build_dataset, build_loader
    from harness.workload.knobs import build_optimizer, guard_cpu_bf16_conv3d
    from harness.workload.build import build_all

    cfg = config_mod.RunConfig()
    for item in settings:
        key, value = item.split("=", 1)
        config_mod.set_key(cfg, key, value)
    cfg = config_mod.resolve(cfg, cuda_available=torch.cuda.is_available())
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

    def step(i: int) -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        if i == 0 or (i + 1) % cfg.log_every_n_steps == 0:
            loss.item()

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
    took = time.perf_counter() - start
    return {"samples_per_s": steps * cfg.batch_size / took}


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
    args = parser.parse_args(argv)
    precision = "bf16-mixed" if args.bf16 else "32"
    ratios: dict[str, list[float]] = {w: [] for w in args.workloads.split(",")}
    print(f"{os.cpu_count()} CPUs, load average at start {_load()}; precision={precision}, "
          f"{args.warmup} warm-up + {args.steps} measured steps, {args.rounds} rounds")
    with tempfile.TemporaryDirectory(prefix="harness-overhead-") as tmp:
        for r in range(args.rounds):
            for workload in ratios:
                settings = _settings(workload, precision, args.steps, args.warmup, args.device)
                results = Path(tmp) / f"{workload}-{r}"
                if r % 2 == 0:
                    harness, plain = harness_run(settings, results), plain_run(settings)
                else:
                    plain, harness = plain_run(settings), harness_run(settings, results)
                ratios[workload].append(harness / plain)
                print(f"round {r + 1} {workload:9s} harness {harness:8.2f} samples/s, plain {plain:8.2f} samples/s, "
                      f"ratio {harness / plain:.3f}  (load {_load()})", flush=True)
    for workload, values in ratios.items():
        print(f"{workload:9s} harness/plain throughput: median {statistics.median(values):.3f} "
              f"(min {min(values):.3f}, max {max(values):.3f}, {len(values)} rounds)")
    print(f"load average at end {_load()} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
