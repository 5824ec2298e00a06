"""The default comparison's four printed sections, each measured and printed in turn: (1) end to end, fresh
processes; (2) in one process, on one model; (3) the measuring loop's own cost per step; (4) accounted: the
parent's CPU plus the loop's cost. And the step hook's own cost (``--hook-cost``)."""

from __future__ import annotations

import math
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from . import fresh, hook_cost, inproc
from .common import BLOCK_STEPS, cpus_label, load, pct, settings
from .stats import MIN_ROUNDS, median_band, summary


@dataclass
class Plan:
    """What the default comparison runs, from its command line."""

    workloads: list[str]
    precision: str
    rounds: int
    steps: dict[str, int]
    warmup: int
    device: str
    sequential: bool
    halves: tuple[set[int], set[int]] | None
    control: bool


@dataclass
class EndToEnd:
    """Section 1's results per workload: the rounds' ratios, A/A controls, parent CPU shares and harness steps."""

    ratios: dict[str, list[float]] = field(default_factory=dict)
    controls: dict[str, list[float]] = field(default_factory=dict)
    parent: dict[str, list[float]] = field(default_factory=dict)
    step_ms: dict[str, list[float]] = field(default_factory=dict)


def end_to_end(plan: Plan) -> EndToEnd:
    """Section 1: ``plan.rounds`` rounds of every workload, fresh processes, paired or one after the other."""
    out = EndToEnd(*({w: [] for w in plan.workloads} for _ in range(4)))
    _end_to_end_title(plan)
    with tempfile.TemporaryDirectory(prefix="harness-overhead-") as tmp:
        for r in range(plan.rounds):
            for workload in plan.workloads:
                _end_to_end_round(plan, workload, r, Path(tmp) / f"{workload}-{r}", out)
    for workload, values in out.ratios.items():
        if values:
            summary(f"{workload:9s} harness/plain throughput", values)
        if out.controls[workload]:
            _control_line(workload, out.controls[workload])
    return out


def _end_to_end_title(plan: Plan) -> None:
    if plan.rounds <= 0:
        return
    if plan.sequential:
        print("\n1. End to end, sequential: the harness as a user runs it against the plain loop, each a fresh "
              "process, one after the other")
        return
    a, b = plan.halves
    print(f"\n1. End to end, paired: the harness as a user runs it, and the plain loop, each pinned to one half "
          f"of the CPUs (the harness's parent with its child) while a reference plain loop steps on the other "
          f"half; each side's speed is its throughput over the reference's in its own measured window. A round: "
          f"both sides on {cpus_label(a)}, then on {cpus_label(b)}; ratio = harness speed / plain speed (geometric "
          f"means)")


def _end_to_end_round(plan: Plan, workload: str, r: int, results: Path, out: EndToEnd) -> None:
    """One round of one workload, its line printed and its figures kept in ``out``."""
    run_settings = settings(workload, plan.precision, plan.steps[workload], plan.warmup, plan.device)
    flip = r % 2 == 1
    if plan.sequential:
        ratio, shown, detail = fresh.sequential_round(run_settings, results, flip)
    else:
        ratio, shown, plains = fresh.paired_round(run_settings, results, plan.halves, flip=flip)
        detail = (f"harness {shown[0]['step_ms']:6.1f} / {shown[1]['step_ms']:6.1f} ms a step, speed "
                  f"{shown[0]['speed']:.3f} / {shown[1]['speed']:.3f}; plain {plains[0]['step_ms']:6.1f} / "
                  f"{plains[1]['step_ms']:6.1f} ms, speed {plains[0]['speed']:.3f} / "
                  f"{plains[1]['speed']:.3f}; ratio {ratio:.3f}")
        if plan.control:
            aa, _, _ = fresh.paired_round(run_settings, results, plan.halves, flip=flip, measured="plain")
            out.controls[workload].append(aa)
            detail += f"; A/A control {aa:.3f}"
    out.ratios[workload].append(ratio)
    out.step_ms[workload] += [h["step_ms"] for h in shown]
    out.parent[workload] += [h["parent_cpu_pct"] for h in shown if h["parent_cpu_pct"] is not None]
    cpu = ", ".join(pct(h["parent_cpu_pct"]) for h in shown)
    print(f"round {r + 1} {workload:9s} {detail}; harness parent CPU {cpu} of one CPU  (load {load()})", flush=True)


def _control_line(workload: str, controls: list[float]) -> None:
    mid, low, high = median_band(controls)
    print(f"{workload:9s} A/A control, plain/plain: median {mid:.3f}, 95% band of the median "
          f"[{low:.3f}-{high:.3f}] ({len(controls)} rounds): "
          + (f"no band from fewer than {MIN_ROUNDS} rounds" if math.isnan(low) else "1 inside the band: no bias "
             "shown" if low <= 1.0 <= high else "1 outside the band: the method itself is biased by this much"))


def in_process(plan: Plan, rounds: int, block_steps: int | None) -> dict[str, list[float]]:
    """Section 2: every workload's in-process rounds; the harness's mean step time of each round, per workload."""
    inproc_ms: dict[str, list[float]] = {w: [] for w in plan.workloads}
    if rounds <= 0:
        return inproc_ms
    print(f"\n2. In one process, on the same model and batch: the harness's measuring loop (the child's function, "
          f"its markers, a poller doing what the parent does) against the plain loop, in blocks of a second or two, "
          f"A B B A, {rounds} rounds after one unkept; before each block a garbage collection and {plan.warmup} "
          f"warm-up steps")
    for workload in plan.workloads:
        block = block_steps or BLOCK_STEPS.get(workload, 20)
        counts = inproc.Counts()
        values = inproc.in_process(settings(workload, plan.precision, block, plan.warmup, plan.device), rounds,
                                   inproc_ms[workload], counts=counts)
        summary(f"{workload:9s} harness/plain throughput, {block} steps a block, 2 blocks a side", values)
        faults_line(counts.faults)
        print(f"          the poller's CPU inside the harness's windows: "
              f"{pct(100.0 * counts.poller_cpu_s / max(counts.harness_window_s, 1e-9))} of one CPU (the parent's "
              f"own cost, in the ratio)")
    return inproc_ms


def faults_line(faults: dict[str, list[float]]) -> None:
    """Each side's minor page faults a measured step, in the unkept round's blocks and over the kept ones (median,
    most): the heap's state, a count that does not depend on the load; a side far above the other trained in
    another heap state."""
    warm = inproc.WARM_BLOCKS
    print("          minor page faults a measured step: " + "; ".join(
        f"{side} median {statistics.median(v[warm:]):.0f}, most {max(v[warm:]):.0f} "
        f"({sum(x > 1000 for x in v[warm:])} of {len(v) - warm} blocks above 1000; unkept round "
        f"{', '.join(f'{x:.0f}' for x in v[:warm])})" for side, v in faults.items()))


def loop_cost(rounds: int, steps: int) -> list[float]:
    """Section 3: the measuring loop's own cost, microseconds a step, per round (none for 0 rounds)."""
    if rounds <= 0:
        return []
    print(f"\n3. The measuring loop's own cost per step: train_and_measure against the plain loop on a tiny "
          f"model, {steps} steps a side, alternating in one process, {rounds} rounds")
    cost = inproc.loop_cost(rounds, steps)
    cost_line("loop cost", cost)
    return cost


def cost_line(label: str, cost: list[float]) -> None:
    """Microseconds a step, per round: the median with its band and the rounds' range."""
    mid, low, high = median_band(cost)
    print(f"{label}: median {mid:+.2f} us a step, 95% band [{low:+.2f}, {high:+.2f}] us "
          f"(rounds {min(cost):+.1f} to {max(cost):+.1f})")


def accounted(plan: Plan, e2e: EndToEnd, inproc_ms: dict[str, list[float]], cost: list[float]) -> None:
    """Section 4: the parent's CPU (charged in full) plus the loop's cost (its band's upper end) over a step."""
    print("\n4. Accounted overhead: the parent's CPU (as if every cycle of it were taken from the child, an upper "
          "bound) plus the loop's cost per step (upper end of its band) over the workload's step time")
    for workload in plan.workloads:
        step_ms = e2e.step_ms[workload] or inproc_ms[workload]
        if not step_ms:
            continue
        parent = e2e.parent[workload]
        if not parent:
            why = ("the parent missed the window's edges" if e2e.ratios[workload]
                   else "it comes from the end-to-end runs, and --rounds 0 ran none")
            print(f"{workload:9s} parent CPU not recorded ({why}): no bound")
            continue
        step = statistics.median(step_ms)
        parent_frac = statistics.median(parent) / 100.0
        loop_high = median_band(cost)[2] if cost else 0.0
        if math.isnan(loop_high):
            print(f"{workload:9s} the loop's cost has no band from fewer than {MIN_ROUNDS} rounds: no bound")
            continue
        loop_frac = max(0.0, loop_high) / 1000.0 / step
        total = parent_frac + loop_frac
        print(f"{workload:9s} parent {100 * parent_frac:.3f}% + loop {100 * loop_frac:.4f}% of a "
              f"{step:.0f} ms step = {100 * total:.3f}%: harness/plain >= "
              f"{1 - total:.4f} ({'meets' if 1 - total >= 0.99 else 'misses'} >= 0.99)")


def step_hook_cost(rounds: int, steps: int) -> list[float]:
    """``--hook-cost``: the step hook's own cost, microseconds a step, per round, and the ratio of step times."""
    print(f"The step hook's own cost per step: a user's step (workload.step) doing exactly loss_fn(model(x), y) "
          f"against the default step, both through train_and_measure on a tiny model (one 1x1 convolution), "
          f"{steps} steps a side, alternating in one process, {rounds} rounds; load average at start {load()}")
    measured = hook_cost.hook_cost(rounds, steps)
    cost = hook_cost.differences_us(measured)
    cost_line("hook cost", cost)
    ratios = hook_cost.ratios(measured)
    mid, low, high = median_band(ratios)
    print(f"hook/default step time: median {mid:.4f}, 95% band of the median [{low:.4f}-{high:.4f}] (rounds "
          f"{min(ratios):.4f}-{max(ratios):.4f}); the default step {hook_cost.default_step_us(measured):.1f} us")
    return cost
