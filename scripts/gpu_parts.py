"""The GPU campaign's parts: what each one measures, in which order, how long it should take, and its commands.

A part is what one command of a lent GPU machine runs: at most 10 minutes, and only files of at most 16 MiB come
back. Every ladder in conf/ladder/ is in parts of its own (its rungs, in order, grouped so that each group's
estimate fits ``PART_BUDGET_S``), beside the headline, each guide total's own part, the noise calibration, the GPU
test tier and a few single runs.

Priority (``Part.tier``, then the order below), by what a slot's verdicts are worth: the headline
(scripts/gpu_headline.py: phase2 as the README runs it, decided, in one command), then each guide's premise check
(``diagnose +ladder=...`` of the A100, DETR, SEResNet and phase2 baselines, scripts/gpu_premises.py: does the base
wait on its data as the guide says?) before the totals that rest on it, then one part per guide total (the guide's
baseline rung against its last rung, in ABBA rounds: every guide's headline claim gets a verdict before its per-rung
ladder), the memory ladders (those run under ``memory.limit_gb``) at their cap, the GPU test tier (before the first
compile ladder), the noise calibration (before the ladders it calibrates), then the ladders with a guide's total
claim, the ladders of single knobs a guide claims, two more rounds of the guide-total ladders (three runs a rung:
the H100 measured a 17% run-to-run CV), the harness's own ladders, and the slow GPU tests and single runs.

Estimates are seconds on one H100 or H200 at full size, from a deliberately pessimistic model (``estimate_run_s``):
a fresh process's start-up, compile, and warm-up + measured steps, each step as long as the slower of the GPU's
work and the loader's (their sum with no loader workers), plus validation and loader restarts. The phase2 ladder
took ~140 s a round on the H100; the model says ~215 s. The plan corrects them by what recorded parts took
(scripts/gpu_plan.py).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from functools import lru_cache
from math import ceil, prod
from pathlib import Path

from harness import api
from harness.api import QUEUE_MAX_STEPS
from scripts import gpu_headline
from scripts.gpu_premises import PREMISES
from scripts.gpu_width import over_card, width_scale

REPO = Path(__file__).resolve().parent.parent
LADDER_DIR = api.ladder_dir()  # conf/ladder/, wherever the harness keeps it
CONF_DIR = LADDER_DIR.parent

DEVICE_GPUS = 1  # the lent machines have one GPU: rungs asking for more are recorded `skipped` at once
DEVICE_CPUS = 16
PART_BUDGET_S = 480  # a part of several runs; one run alone may take up to BATCH_BUDGET_S
BATCH_BUDGET_S = 540  # what one command packs by estimate (its limit is 600 s: room for start-up and packing)
PART_OVERHEAD_S = 30  # a part's own start, check, table and tarball
RUN_TIMEOUT_MIN_S, RUN_TIMEOUT_CAP_S = 120, 500
SKIP_S = 5  # a rung recorded `skipped` before any process starts

(TIER_HEADLINE, TIER_PREMISES, TIER_TOTALS, TIER_MEMORY, TIER_TESTS, TIER_NOISE, TIER_GUIDE_TOTAL, TIER_GUIDE_KNOBS,
 TIER_REPEATS, TIER_HARNESS, TIER_EXTRA) = range(11)
TIER_NAMES = ("headline", "premise checks", "guide totals", "memory ladders", "tests", "noise", "guide-total ladders",
              "guide knobs", "more rounds", "harness ladders", "extra")
FIRST = ("phase2",)  # first of its tier: the headline's ladder, whose sweep its parts join at the same commit
# How a run starts (the launcher, what it preloads, the child's start-up): the headline's duty cycle and phase split
# measure them, so a change to them makes the headline's measurement another one's (the other parts' verdicts are
# about their ladders, not the start)
START_PATHS = ("harness/run/parent/zygote.py", "harness/run/parent/launcher.py", "harness/run/parent/launch.py",
               "harness/run/child/startup.py", "harness/workload/trimmed_imports.py")
TOTAL_BUDGET_S = 270  # a guide total's part: two fit one command
TOTAL_MAX_ROUNDS = 4
REPEAT_ROUNDS = (1, 2)  # with round 0: three runs a rung, each round its own parts

# Settings a ladder's parts add. The A100 volume ladder reads its NIfTI files from disk itself (its base: the guide's
# situation, one worker, batch 1, no augmentation: the guide mentions none); on the GPU it is measured with fewer
# files and steps, as each step waits for its data there.
LADDER_OVERRIDES = {
    "a100_volume": ("data.num_items=8", "measure.warmup_steps=2", "measure.steps=15"),
    # its rungs 3-9 are BasicUNet at 55x its own compute (width_scale): 10+ s a step of 4 in FP32, so 60 steps a run
    # would not fit a command; 20 steps do (a window of 20 s or more of 10 s steps on those rungs)
    "connectomics_fastest": ("measure.warmup_steps=5", "measure.steps=15"),
    # the language-model ladder's 14 rungs (two of them compiling) in two parts of ~5 minutes: short windows
    "lm": ("measure.warmup_steps=5", "measure.steps=20"),
}

# Ladders no lent machine measures, and why: one run needs more than one command's 10 minutes. PLAN.md lists them.
BEYOND_ONE_COMMAND = {
    "resnet50_storage": "the ImageNet guide's FSx-bound start at full size: 16-32 workers, each 84-127 s a batch "
                        "(0.33 s an image), hand over their batches in waves; a window of two waves (32-64 steps, "
                        "170-255 s) after the first wave is 6-9 minutes a run, and its compile rungs (6-7) add up "
                        "to 400 s: 14 minutes, past one command's 10, and a ladder is measured whole. It is measured "
                        "at the CPU size (1-2 workers, 20 steps: many waves a window)",
}


@dataclass(frozen=True)
class Cost:
    """A workload at its full size on one H100/H200, pessimistic: GPU seconds a sample (fp32) and loader seconds a
    sample (one worker making it: generated, or read and decoded)."""

    compute_s: float
    item_s: float


WORKLOAD_COST = {
    "unet3d": Cost(0.03, 0.03),  # measured: 31-36 s a run, step 68 ms at batch 4 with one worker
    "basic_unet3d": Cost(0.05, 0.03),
    "mednext": Cost(0.15, 0.04),
    "resnet50": Cost(0.002, 0.006),
    "detr": Cost(0.025, 0.1),  # CLAHE and motion blur per item
    "seresnet_speech": Cost(0.004, 0.01),  # a spectrogram per item (1D: the frequency bins as channels)
    "gpt": Cost(0.02, 0.0005),  # GPT-2 small, 1024 tokens a sample: ~0.75 TFLOP, pessimistic at FP32 (not measured)
}
# Built 2D (``workload.model.spatial_dims: 2``: the spectrogram a one-channel image, as ``seresnet`` at the full size):
# an estimate, not a measurement. Counted FLOPs (torch's FlopCounterMode, forward + backward at 257x401): 46.5 GFLOP a
# training sample, 24x the 1D model's 1.94; at the pace the unet3d estimate implies (0.186 TFLOP a sample in 0.03 s:
# ~6 TFLOP/s, the slower of it and resnet50's ~12), 7.5 ms a sample, rounded up. The loader's work is the same.
WORKLOAD_COST_2D = {
    "seresnet_speech": Cost(0.008, 0.01),
}
STARTUP_S = 35
COMPILE_S = {"off": 0, "default": 120, "reduce-overhead": 180, "max-autotune": 400}
AUGMENT_3D_S = {"flip": 0.01, "noise": 0.05, "rotate": 0.4, "elastic": 1.2}  # a sample, at full size
DISK_READ_S = 0.15  # a NIfTI volume read and decompressed (page cache dropped)
DATASET_ITEM_S = 1.5  # writing one NIfTI volume of a disk dataset, once per machine


@dataclass(frozen=True)
class Part:
    """One command's worth of measuring. ``kind``: ladder, noise, tests, run, diagnose or env."""

    name: str
    kind: str
    tier: int
    what: str
    estimate_s: int
    runs: int = 1
    timeout_s: int = 0  # each run's limit (0: the command's own)
    ladder: str = ""
    rungs: tuple[int, ...] = ()
    rounds: tuple[int, ...] = (0,)
    args: tuple[str, ...] = ()  # extra settings, or the pytest / harness arguments of other kinds
    paths: tuple[str, ...] = field(default=(), compare=False)  # files whose content the measurement depends on


# ------------------------------------------------------------------------------------------
# time estimates


def estimate_run_s(settings: dict, cap_workers: bool = False) -> float:
    """Pessimistic seconds for one run of ``settings`` (flat keys, as a ladder rung's at full size) on one GPU."""
    preset = api.workload(settings.get("workload", "unet3d")).sizes["full"]
    workers = int(settings.get("data.num_workers") or 0)
    if int(settings.get("devices") or 1) > DEVICE_GPUS or int(settings.get("nodes") or 1) > 1 \
            or (cap_workers and workers > DEVICE_CPUS):  # more GPUs or nodes than a lent machine: skipped at once
        return SKIP_S
    batch = int(settings.get("batch_size") or preset.batch_size)
    steps = int(settings.get("measure.warmup_steps") or preset.warmup_steps) + \
        int(settings.get("measure.steps") or preset.steps)
    compute, item = step_costs(settings)
    if over_card(settings):  # it ends `oom` in its first step
        return STARTUP_S + compute + item * batch
    lanes = min(workers, int(settings["cpus"])) if settings.get("cpus") else workers
    data = item * batch / max(1, lanes)
    step = compute + data if workers == 0 else max(compute, data)
    every = int(settings.get("val.every_n_steps") or 0)
    val_items = (steps // every + 1) * int(settings.get("val.steps") or 2) * batch if every else 0
    val = val_items * (item / max(1, int(settings.get("val.num_workers") or 0)) + compute / batch / 3)
    epoch = int(settings.get("data.epoch_steps") or preset.epoch_steps)
    restarts = steps // epoch if workers and not settings.get("data.persistent_workers") else 0
    # the warm-up then eats what the workers queued during its slowest step (the first), at compute speed, beyond
    # the warm-up steps after it (data-bound: until dry, then the rest of that wave)
    warmup = int(settings.get("measure.warmup_steps") or preset.warmup_steps)
    queued = ceil(workers * int(settings.get("data.prefetch_factor") or 2)
                  / int(settings.get("accumulate_grad_batches") or 1))
    # (a dry step's wave at its pace; a queue over QUEUE_MAX_STEPS is not eaten)
    eat = max(0, queued - (warmup - 1)) * compute + max(0, workers - 1) * step if queued <= QUEUE_MAX_STEPS else 0.0
    return (STARTUP_S + 0.5 * workers + COMPILE_S[str(settings.get("compile", "off"))] + steps * step + eat + val
            + restarts * (2 + 0.3 * workers))


def step_costs(settings: dict) -> tuple[float, float]:
    """Pessimistic GPU seconds of a step's compute and loader seconds of one item (its read, wait and augmentations),
    for ``settings`` (flat keys, as a ladder rung's at full size)."""
    name = settings.get("workload", "unet3d")
    two_d = settings.get("workload.model.spatial_dims") == 2 and name in WORKLOAD_COST_2D
    spec, cost = api.workload(name), (WORKLOAD_COST_2D if two_d else WORKLOAD_COST)[name]
    batch = int(settings.get("batch_size") or spec.sizes["full"].batch_size)
    patch = settings.get("data.patch_size")  # a sequence's sample: [1, length] (a size's `sequence`)
    scale = prod(patch) / prod(spec.sample_shape("full")[1:]) if patch else 1.0
    compute = cost.compute_s * batch * scale * width_scale(settings) * \
        (0.7 if str(settings.get("precision", "32")) != "32" else 1.0)
    item = cost.item_s * scale + _augment_s(settings) + float(settings.get("data.read_latency_ms") or 0) / 1000
    return compute, item + (DISK_READ_S if settings.get("data.source") == "disk" else 0.0)


def waiting_share(settings: dict) -> float:
    """The share of a data-bound step the loop waits for its batch, from :func:`step_costs`: the loader's time for a
    batch over its workers, less the compute it overlaps (0 where the model sets the pace)."""
    compute, item = step_costs(settings)
    workers = max(1, int(settings.get("data.num_workers") or 0))
    lanes = min(workers, int(settings["cpus"])) if settings.get("cpus") else workers
    data = item * int(settings.get("batch_size") or 1) / lanes
    return max(0.0, 1.0 - compute / data)


def _augment_s(settings: dict) -> float:
    """Loader seconds a sample for the 3D augmentations switched on (2D ones cost next to nothing)."""
    preset = settings.get("data.augment", "none")
    on = {"flip": preset in ("light", "heavy"), "noise": preset in ("light", "heavy"),
          "rotate": preset == "heavy", "elastic": preset == "heavy"}
    for key in on:
        if settings.get(f"data.{key}") is not None:
            on[key] = bool(settings[f"data.{key}"])
    if api.workload(settings.get("workload", "unet3d")).spatial_dims != 3:
        return 0.002 * any(on.values())
    return sum(AUGMENT_3D_S[k] for k, v in on.items() if v)


def overrides_dict(args: tuple[str, ...]) -> dict:
    """``key=value`` settings as flat keys with YAML values, as the harness reads them."""
    import yaml

    return {k: yaml.safe_load(v) for k, _, v in (a.partition("=") for a in args)}


def rung_estimates(ladder_name: str) -> list[float]:
    """Each rung's estimate, with the ladder's part settings; a rung skipped here (more GPUs or workers than the
    machine has) is not built on, as a sweep does not build on it."""
    lad = _ladder(ladder_name)
    extra = overrides_dict(LADDER_OVERRIDES.get(ladder_name, ()))
    out, dropped = [], set()
    for rung in lad.rungs:
        est = estimate_run_s({**lad.settings(rung.index, "full", frozenset(dropped)), **extra}, lad.cap_workers_at_cpus)
        if est == SKIP_S:
            dropped.add(rung.index)
        out.append(est)
    return out


def _dataset_s(ladder_name: str) -> float:
    """Writing the disk dataset a ladder reads (once per machine; counted in each of its parts)."""
    lad = _ladder(ladder_name)
    settings = {**lad.settings(len(lad.rungs) - 1, "full"), **overrides_dict(LADDER_OVERRIDES.get(ladder_name, ()))}
    return DATASET_ITEM_S * int(settings.get("data.num_items") or 16) if settings.get("data.source") == "disk" else 0


@lru_cache(maxsize=None)
def _ladder(name: str):
    return api.load_ladder(name)


def ladder_names() -> list[str]:
    """Every ladder shipped in conf/ladder/."""
    return sorted(p.stem for p in LADDER_DIR.glob("*.yaml"))


@lru_cache(maxsize=None)
def beyond_one_machine() -> dict[str, str]:
    """Ladders every rung of which asks for more GPUs or nodes than a lent machine has, and why: each run would be
    recorded `skipped` at once, so they get no part (PLAN.md lists them)."""
    out = {}
    for name in ladder_names():
        if name not in BEYOND_ONE_COMMAND and all(est == SKIP_S for est in rung_estimates(name)):
            settings = _ladder(name).settings(0, "full")
            out[name] = (f"every rung asks for {settings.get('devices') or 1} GPUs on {settings.get('nodes') or 1} "
                         f"node(s); the lent machines have {DEVICE_GPUS}")
    return out


def measured_ladders() -> list[str]:
    """The ladders a lent machine measures: all but ``BEYOND_ONE_COMMAND`` and :func:`beyond_one_machine`'s."""
    return [name for name in ladder_names() if name not in BEYOND_ONE_COMMAND and name not in beyond_one_machine()]


# ------------------------------------------------------------------------------------------
# the parts


def ladder_parts(name: str, round_: int = 0, tier: int | None = None) -> list[Part]:
    """One round of a ladder's rungs in order, in as few consecutive groups as fit ``PART_BUDGET_S`` each."""
    lad = _ladder(name)
    estimates = rung_estimates(name)
    overhead = PART_OVERHEAD_S + _dataset_s(name)
    groups, total = [[]], overhead
    for index, est in enumerate(estimates):
        if groups[-1] and total + est > PART_BUDGET_S:
            groups.append([])
            total = overhead
        groups[-1].append(index)
        total += est
    base = name if round_ == 0 else f"{name}-round{round_ + 1}"  # counted from 1, as people count runs
    parts = []
    for rungs in groups:
        suffix = "" if len(groups) == 1 else f"-r{rungs[0]}" + (f"-{rungs[-1]}" if len(rungs) > 1 else "")
        span = "every rung" if len(groups) == 1 else (f"rung {rungs[0]}" if len(rungs) == 1 else
                                                      f"rungs {rungs[0]}-{rungs[-1]}") + f" of {len(lad.rungs)}"
        worst = max(estimates[r] for r in rungs)
        parts.append(Part(
            name=base + suffix, kind="ladder", tier=_tier(lad) if tier is None else tier,
            what=(span + (f", round {round_ + 1}" if round_ else "") + f": {lad.description}"
                  + _over_card_text(name, rungs)),
            estimate_s=ceil(overhead + sum(estimates[r] for r in rungs)), runs=len(rungs),
            timeout_s=_timeout(worst), ladder=name, rungs=tuple(rungs), rounds=(round_,),
            args=LADDER_OVERRIDES.get(name, ()), paths=ladder_paths(name)))
    return parts


def _over_card_text(name: str, rungs: list[int]) -> str:
    """The rungs of a part likely over the card (estimated as a run that ends `oom` at once), in words."""
    lad, extra = _ladder(name), overrides_dict(LADDER_OVERRIDES.get(name, ()))
    flags = [f"rung {r} {why}" for r in rungs if (why := over_card({**lad.settings(r, "full"), **extra}))]
    return f" ({'; '.join(flags)})" if flags else ""


def _timeout(estimate: float) -> int:
    """A run's limit: well above its estimate, within what one command holds."""
    return min(RUN_TIMEOUT_CAP_S, max(RUN_TIMEOUT_MIN_S, ceil(1.6 * estimate)))


def _tier(lad) -> int:
    if any("memory.limit_gb" in lad.settings(r.index, "full") for r in lad.rungs):
        return TIER_MEMORY  # at its cap: the card it emulates
    if lad.total_claim is not None:
        return TIER_GUIDE_TOTAL
    return TIER_GUIDE_KNOBS if lad.guide else TIER_HARNESS


def other_parts() -> list[Part]:
    """The parts that are not a ladder's: the headline, noise calibration, the GPU tests, single runs, the
    environment."""
    unet = estimate_run_s({"workload": "unet3d"})
    tests = ("tests/test_gpu.py", "tests/conftest.py")
    headline = gpu_headline.estimate(gpu_headline.RECORDED_ON)
    parts = [
        Part("headline", "headline", TIER_HEADLINE, "phase2 as the README runs it (forked, repeats=auto, decided), "
             "a compile + TF32 run, a two-rung forked sweep, env", headline.total_s,
             timeout_s=gpu_headline.RUN_TIMEOUT_S, paths=ladder_paths("phase2") + START_PATHS),
        Part("noise", "noise", TIER_NOISE, "noise calibration: 5 identical runs of the default workload (unet3d)",
             ceil(PART_OVERHEAD_S + 5 * unet), 5, _timeout(unet), args=("noise.runs=5",),
             paths=workload_paths(("unet3d",))),
        Part("tests", "tests", TIER_TESTS, "the GPU test tier without its slow checks (21 tests; 12 of them took ~155 s on the "
             "H100)",
             300, args=("-m", "gpu and not slow"), paths=tests),
        Part("tests-slow-compile", "tests", TIER_EXTRA, "slow GPU tests: CUDA-graph compile with the step marker",
             360, args=("-m", "gpu and slow", "-k", "not hang"), paths=tests),
        Part("tests-slow-hang", "tests", TIER_EXTRA, "slow GPU tests: two hangs, each killed at its 60 s timeout",
             300, args=("-m", "gpu and slow", "-k", "hang"), paths=tests),
    ]
    for workload in ("unet3d", "basic_unet3d", "mednext", "resnet50"):
        runs = [estimate_run_s({"workload": workload, "precision": p}) for p in ("32", "bf16-mixed")]
        parts.append(Part(f"runs-{workload}", "run", TIER_EXTRA, f"one {workload} run in 32 and one in bf16-mixed",
                          ceil(PART_OVERHEAD_S + sum(runs)), 2, 240, args=(f"workload={workload}",),
                          paths=workload_paths((workload,))))
    parts += [premise_part(p) for p in PREMISES]  # each guide's baseline at the full size: does it wait as it says?
    parts.append(Part("env", "env", TIER_EXTRA, "python, torch, CUDA and nvidia-smi", 20))
    return parts


def premise_part(premise) -> Part:
    """A guide's premise check: ``diagnose +ladder=NAME`` (three runs of the ladder's baseline) at the full size."""
    settings = {**_ladder(premise.ladder).settings(0, "full"), **overrides_dict(premise.args)}
    run = estimate_run_s(settings)
    files = DATASET_ITEM_S * int(settings.get("data.num_items") or 16) if settings.get("data.source") == "disk" else 0
    return Part(premise.part, "diagnose", TIER_PREMISES, premise.question, ceil(PART_OVERHEAD_S + files + 3 * run), 3,
                premise.timeout_s or _timeout(run), args=(f"+ladder={premise.ladder}", *premise.args),
                paths=ladder_paths(premise.ladder))


def total_parts() -> list[Part]:
    """One part per guide total but phase2's (the headline's): the ladder's baseline rung against its last rung (all
    of the guide's changes), alternating A B | B A round after round, as many rounds as fit ``TOTAL_BUDGET_S`` (at
    least two where one command holds them)."""
    parts = []
    for name in measured_ladders():
        lad = _ladder(name)
        if lad.total_claim is None or name in FIRST:
            continue
        estimates, last = rung_estimates(name), len(lad.rungs) - 1
        pair, overhead = estimates[0] + estimates[last], PART_OVERHEAD_S + _dataset_s(name)
        rounds = total_rounds(pair, overhead)
        if not rounds:
            continue
        parts.append(Part(
            f"total-{name}", "total", TIER_TOTALS, f"the guide's total: rung 0 against rung {last}, "
            + (f"{rounds} rounds in ABBA order" if rounds > 1 else "one round") + f": {lad.description}",
            ceil(overhead + rounds * pair), 2 * rounds,
            _timeout(max(estimates[0], estimates[last])), ladder=name, rungs=(0, last), rounds=tuple(range(rounds)),
            args=LADDER_OVERRIDES.get(name, ()), paths=ladder_paths(name)))
    return parts


def total_rounds(pair_s: float, overhead_s: float) -> int:
    """Rounds of a guide total's two runs: those that fit ``TOTAL_BUDGET_S``, at least two (an A B B A) where they
    fit a part (``PART_BUDGET_S``: by the plan's correction two such parts fit one command), one where only that
    fits, none where not even one does."""
    rounds = min(TOTAL_MAX_ROUNDS, max(2, int((TOTAL_BUDGET_S - overhead_s) // pair_s)))
    while rounds and overhead_s + rounds * pair_s > PART_BUDGET_S:
        rounds -= 1
    return rounds


def totals_beyond_one_command() -> dict[str, str]:
    """The guide totals with no part of their own, and why (PLAN.md lists them)."""
    have = {p.ladder for p in total_parts()}
    out = {}
    for name in measured_ladders():
        if _ladder(name).total_claim is not None and name not in FIRST and name not in have:
            pair = rung_estimates(name)[0] + rung_estimates(name)[-1]
            out[name] = (f"its baseline and last rung take ~{pair:.0f} s by estimate, more than one command holds; "
                         "its per-rung parts measure the total")
    return out


@lru_cache(maxsize=None)
def catalogue() -> tuple[Part, ...]:
    """Every part, in priority order: by tier; in a tier the cheaper ladder first (more verdicts a slot), each
    ladder's parts in rung order; phase2's ladder first of its tier."""
    parts = [p for name in measured_ladders() for p in ladder_parts(name)] + other_parts() + total_parts()
    parts += [p for name in measured_ladders() if _ladder(name).total_claim is not None
              for round_ in REPEAT_ROUNDS for p in ladder_parts(name, round_, TIER_REPEATS)]
    first = {name: i for i, name in enumerate(FIRST)}
    cost: dict[str, int] = {}
    for p in parts:
        cost[p.ladder or p.name] = cost.get(p.ladder or p.name, 0) + p.estimate_s
    return tuple(sorted(parts, key=lambda p: (p.tier, first.get(p.ladder or p.name, len(first)),
                                              cost[p.ladder or p.name], p.ladder or p.name, p.rounds, p.rungs)))


def find(name: str) -> Part:
    """The part ``name``; ValueError naming the parts there are."""
    for part in catalogue():
        if part.name == name:
            return part
    raise ValueError(f"unknown part {name!r}; the parts are: {' '.join(p.name for p in catalogue())}")


# ------------------------------------------------------------------------------------------
# what a measurement depends on


def workload_paths(workloads: tuple[str, ...]) -> tuple[str, ...]:
    """A workload's own files: its config and the model files it names (not the harness's code: a commit to the
    measuring code does not make a part's measurement another one's)."""
    paths = []
    for name in workloads:
        config = CONF_DIR / "workload" / f"{name}.yaml"
        models = {f"harness_models/{m}.py" for m in re.findall(r"harness_models\.(\w+)\.", config.read_text())}
        paths += [config.relative_to(REPO).as_posix(), *sorted(models)]
    return tuple(dict.fromkeys(paths))


def ladder_paths(name: str) -> tuple[str, ...]:
    """A ladder's own files: its file and its workloads'."""
    lad = _ladder(name)
    workloads = [lad.workload] + [r.value_for("full") for r in lad.rungs if r.key == "workload"]
    own = (LADDER_DIR / f"{name}.yaml").relative_to(REPO).as_posix()
    return (own,) + workload_paths(tuple(dict.fromkeys(workloads)))


def fingerprint(paths: tuple[str, ...], extra: str = "", root: Path = REPO) -> str:
    """A hash of the files' contents under ``root`` (a missing file counts as missing), and of ``extra``."""
    digest = hashlib.sha256(extra.encode() + b"\0")
    for rel in paths:
        path = root / rel
        digest.update(rel.encode() + b"\0" + (path.read_bytes() if path.is_file() else b"<missing>") + b"\0")
    return digest.hexdigest()[:16]


def path_fingerprint(part: Part, root: Path = REPO) -> str:
    """The part's own files and extra settings, as they are under ``root`` (a ladder's parts share it): attempts on
    one path count together."""
    return fingerprint(part.paths, " ".join(part.args) if part.kind in ("ladder", "total") else "", root)


def sweep_id(part: Part, gpu: str, root: Path = REPO) -> str:
    """The sweep a ladder part's records join: one per ladder, GPU and state of the ladder's own files (its file,
    its workloads', its parts' settings) in the copy measured (``root``), whichever part (command, slot) and commit
    measures its rounds: a round measured at a later commit that did not touch them joins the earlier rounds'
    sweep. A guide total's part has its own."""
    kind = "total-" if part.kind == "total" else ""
    return f"{part.ladder}-{kind}{gpu}-{path_fingerprint(part, root)[:8]}"

