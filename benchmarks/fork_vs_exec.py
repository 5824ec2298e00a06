"""A/A: runs forked from the warm launcher against runs started as fresh interpreters, of the same settings.

    python benchmarks/fork_vs_exec.py [--rounds 12] [key=value ...]

Each round measures one config twice with ``isolate.execute``, what a sweep calls for a rung: once forked from the
zygote of a ``launcher.warm()`` session kept open for the whole benchmark (as a sweep keeps it), once as a fresh
interpreter (outside the session), in ABBA order (forked first in odd rounds, fresh first in even ones). A round's
ratio is the forked run's samples/s over the fresh one's. Printed: every round, the median ratio with a
distribution-free 95% band of the median (its order-statistic interval) and the sign count. The fork changes how
a run starts, never what it measures: the band should hold 1 and lie within +-2%. The default config is the
phase2 baseline at the CPU size (unet3d, smoke); ``key=value`` settings change it as on the command line.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from overhead_parts.stats import MIN_ROUNDS, median_band  # noqa: E402


def _config(settings: list[str], results: Path):
    from harness import config as config_mod
    from harness.run.parent import runner

    cfg = config_mod.RunConfig()
    for item in [*settings, f"results_dir={results}"]:
        key, value = item.split("=", 1)
        config_mod.set_key(cfg, key, value)
    return runner.ready(cfg, log=lambda text: None)


def one_run(cfg, env: dict, env_key: str, forked: bool) -> tuple[float, str]:
    """(samples/s, how it started) of one run of ``cfg``; exits on a run that did not end ok."""
    from harness.run.parent import isolate

    record = isolate.execute(cfg, env, env_key)
    if record.status != "ok" or not record.samples_per_s:
        sys.exit(f"a {'forked' if forked else 'fresh'} run ended {record.status}: {(record.error or '')[-500:]}")
    return float(record.samples_per_s), str(record.launched_by)


def rounds_of(cfg, rounds: int) -> list[float]:
    from harness.run.parent import launcher, runner

    env, env_key = runner.environment(cfg.device)
    ratios = []
    with launcher.warm():
        for r in range(rounds):
            speeds = {}
            for forked in ((True, False) if r % 2 == 0 else (False, True)):
                with contextlib.nullcontext() if forked else launcher.fresh():
                    speeds[forked], how = one_run(cfg, env, env_key, forked)
                label = "forked" if forked else "fresh "
                print(f"round {r + 1:2d} {label} {speeds[forked]:8.2f} samples/s (launched by {how})", flush=True)
            ratios.append(speeds[True] / speeds[False])
            print(f"round {r + 1:2d} forked/fresh {ratios[-1]:.3f} ({'forked' if r % 2 == 0 else 'fresh'} first)",
                  flush=True)
    return ratios


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("settings", nargs="*", help="key=value settings of the run (default: unet3d at smoke size)")
    args = parser.parse_args(argv)
    if args.rounds < MIN_ROUNDS:
        parser.error(f"--rounds {args.rounds}: at least {MIN_ROUNDS} rounds give a 95% band of the median")
    with tempfile.TemporaryDirectory(prefix="harness-fork-vs-exec-") as tmp:
        cfg = _config(args.settings or ["workload=unet3d", "size=smoke"], Path(tmp))
        print(f"A/A: {cfg.workload.name} ({cfg.size}) on {cfg.device}, forked from the warm launcher against a fresh "
              f"interpreter, {args.rounds} rounds in ABBA order")
        ratios = rounds_of(cfg, args.rounds)
    mid, low, high = median_band(ratios)
    below = sum(v < 1 for v in ratios)
    inside = low >= 0.98 and high <= 1.02 and low <= 1 <= high
    print(f"forked/fresh: median {mid:.3f}, 95% band of the median [{low:.3f}-{high:.3f}] ({below} of {len(ratios)} "
          f"rounds below 1): " + ("no difference shown (the band holds 1 and lies within +-2%)" if inside else
                                  "the band does not lie within +-2% around 1"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
