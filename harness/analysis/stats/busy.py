"""When a run's machine was busy: the one rule that statistics, ``check`` and ``climb`` share (no torch).

A run measured while something else used the machine says more about the other thing than about the
change: its throughput gets no verdict ("machine busy: not trustworthy"). Three signs, all in the record:

* **Other processes on the CPUs**: ``other_cpu_pct`` (the measuring process's own tree left out) above
  ``stats.BUSY_PCT`` (10%), the threshold the table and the ``noise`` command have always used.
* **GPU clocks held back by heat or a power brake**: ``gpu_throttle_reasons`` naming a thermal slowdown, a
  hardware slowdown or the hardware power brake. The software power cap is *not* a sign: a datacenter
  GPU at full load sits at its power limit as a matter of course (NVML: "SW Power Scaling algorithm is
  reducing the clocks below requested clocks"), so it is part of every heavy run's normal noise.
* **Another process on the GPU**: NVML's device-wide memory in use (``gpu_mem_used_bytes``) exceeding this
  run's own allocator peak (``peak_vram_reserved_bytes``) by more than :data:`GPU_OTHER_BYTES`. A run's
  CUDA context and libraries outside the allocator took 1.09-1.22 GiB in every run on the H100 in
  ``results/h100``; a second process needs at least its own context (~0.5 GiB) on top. Left out for
  multi-device runs, whose communication buffers sit outside the allocator too.
"""

from __future__ import annotations


from harness.analysis.stats.speedup import BUSY_PCT, finite_number

GPU_SLOWDOWNS = ("hardware slowdown", "thermal (software)", "thermal (hardware)", "power brake (hardware)")
GPU_OTHER_BYTES = 2.0 * 2**30  # device memory in use beyond the run's own reserved peak that means another process
BUSY_VERDICT = "machine busy: not trustworthy"
# every field busy_reason reads (a judge converts only these of a sweep's ~150 columns to dicts; a test holds the
# rule to this list)
COLUMNS = ("other_cpu_pct", "gpu_throttle_reasons", "device", "world_size", "gpu_mem_used_bytes",
           "peak_vram_reserved_bytes")


def reader(record):
    """Field access for a RunRecord, a dict or a pandas row alike."""
    get = getattr(record, "get", None)
    if callable(get):
        return lambda name: get(name)
    return lambda name: getattr(record, name, None)


def busy_reason(record) -> str | None:
    """Why this run's machine was too busy to trust its throughput, or None when nothing says so.

    ``record``: a ``RunRecord``, a dict or a pandas row with the store's columns (missing ones count as
    unknown, never as busy)."""
    field = reader(record)
    reasons = []
    other = finite_number(field("other_cpu_pct"))
    if other is not None and other > BUSY_PCT:
        reasons.append(f"other processes used {other:.0f}% of the CPUs")
    throttle = field("gpu_throttle_reasons")
    if isinstance(throttle, str) and throttle:
        held = [r.strip() for r in throttle.split(",") if r.strip() in GPU_SLOWDOWNS]
        if held:
            reasons.append("GPU clocks held back: " + ", ".join(held))
    extra = _other_gpu_bytes(field)
    if extra is not None and extra > GPU_OTHER_BYTES:
        reasons.append(f"another process held ~{extra / 2**30:.1f} GiB on the GPU")
    return "; ".join(reasons) or None


def busy_reasons(frame) -> list[str | None]:
    """:func:`busy_reason` of each row of a pandas frame of records, in order; only :data:`COLUMNS` are turned into
    dicts (all of a record's ~150, for a rung's few runs, cost ~30 ms: a table of four rungs paid it eight times)."""
    return [busy_reason(row) for row in frame[[c for c in COLUMNS if c in frame]].to_dict("records")]


def _other_gpu_bytes(field) -> float | None:
    if field("device") != "cuda" or (finite_number(field("world_size")) or 1) > 1:
        return None
    used, own = finite_number(field("gpu_mem_used_bytes")), finite_number(field("peak_vram_reserved_bytes"))
    if used is None or own is None:
        return None
    return used - own
