"""bf16 on a CPU without bf16 units: torch emulates it in fp32 arithmetic, and a bf16 rung then measures the
emulation (seconds a step where fp32 takes tens of milliseconds), not what the guides claim for GPUs. Said before a
sweep's first bf16 run on such a CPU (``harness.commands.sweep``) and under its table, from the records' ``cpu_bf16``
(the CPU's bf16 flags as the parent read them: ``avx512_bf16``, ``amx_bf16``, Arm's ``bf16``; "none"; "" in records
older than the field, which say nothing).
"""

from __future__ import annotations

import json

EMULATED = ("bf16 is emulated on this CPU (no AVX512-BF16 / AMX): expect it much slower than fp32 here; the guides' "
            "claims are for GPUs")


def emulated(device: str, precision: str, cpu_bf16: str) -> bool:
    """Whether a run of ``precision`` on ``device`` computes bf16 in emulation: on a CPU whose flags have no bf16."""
    return device == "cpu" and str(precision).startswith("bf16") and cpu_bf16 == "none"


def note(records) -> str:
    """The table's line when any run of the sweep computed bf16 in emulation ("" otherwise), naming the CPU and the
    rungs."""
    if "cpu_bf16" not in records.columns:
        return ""
    rungs, cpu = set(), ""
    for _, run in records.iterrows():
        precision = (json.loads(run.get("config_json") or "{}") or {}).get("precision", "")
        if emulated(str(run.get("device")), str(precision), str(run.get("cpu_bf16") or "")):
            rungs.add(int(run["rung"]) if run.get("rung") == run.get("rung") else 0)
            cpu = str(run.get("cpu_model") or "")
    if not rungs:
        return ""
    where = f" ({cpu})" if cpu else ""
    return (f"bf16 was emulated on this CPU{where} (no AVX512-BF16 / AMX) in rungs {sorted(rungs)}: they measure the "
            "emulation, much slower than fp32; the guides' claims are for GPUs")
