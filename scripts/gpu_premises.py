"""Each guide's premise check in the GPU plan: ``python -m harness diagnose +ladder=NAME`` at the full size (the loader
alone, the model alone, the full step, each in its own process) on the baseline that the guide's totals start from,
ordered before them (scripts/gpu_parts.py: the premise tier comes before the totals'). A guide's recommendations
rest on where its baseline waits; the check measures where the stand-in's does. The headline (phase2 as the README
runs it) stays first of all: its records already read its baseline (the device busy the whole step, the host waiting
too); phase2's check comes before the connectomics guide's other totals."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Premise:
    part: str  # the part's name
    ladder: str  # the ladder whose baseline (rung 0) is diagnosed
    question: str  # what the part asks, in the guide's words
    args: tuple[str, ...] = ()  # settings on top of the baseline: fewer files and steps where each step waits
    timeout_s: int = 0  # each run's limit (0: from its estimate)


PREMISES = (
    Premise("a100-diagnose", "a100_volume",
            "diagnose the A100 ladder's base (NIfTI from disk, one worker, batch 1): waiting 83-94%?",
            ("data.num_items=8", "measure.warmup_steps=2", "measure.steps=12"), 160),
    Premise("detr-diagnose", "detr_guide",
            "diagnose the DETR guide's baseline (4 workers, CLAHE and motion blur per item, FP16): does the GPU wait "
            "for data, as its #2 'GPU waits less for data' assumes?"),
    Premise("seresnet-diagnose", "seresnet",
            "diagnose the SEResNet guide's baseline (the 2D model, no workers, a spectrogram per item): is the GPU "
            "starved, as its #1 'prevents GPU starvation' (4-8x) assumes?"),
    Premise("phase2-diagnose", "phase2",
            "diagnose the connectomics guide's baseline (fp32, batch 4, one worker): data-bound, compute-bound or "
            "both (the H100 headline's records: device busy 100% of the step, host waiting 31%)?"),
)
