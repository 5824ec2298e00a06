"""Sampling of the measuring process from the outside: GPU (NVML) and host memory (psutil), in the parent.

Calling nvidia-smi every step once slowed training ~10x (Lightning). A sampling thread inside the measured
process is not free either: on a small CPU its wake-ups preempt the compute threads (oneDNN's OpenMP team
spins at barriers on every core, and one preempted thread stalls them all), which made bf16 steps on a
2-core machine several times slower. So the measured process runs no sampler at all: the parent, which
only waits for it, reads the child's memory (and its loader workers') through psutil by PID and the GPU
through NVML (which creates no CUDA context) between its waits (none inside a CPU run's window: the child reads its
workers' peaks from the kernel then, ``host.worker_peaks``). What only the window's edges show exactly (the CPU
clocks, GPM's SM activity) the child reads itself at its two syncs, none inside.

``host`` reads a process tree's memory, ``gpu`` finds the device in NVML and reads it, ``cpu`` is the child's
own CPU accounting at the window's edges, and ``sampler`` is the parent's sampler built from them.
"""

from harness.run.monitor.cpu import CpuClock, cpu_percent_since_last_call, other_cpu_percent
from harness.run.monitor.gpu import (CLOCK_REASONS, GpuHandle, WindowGpm, clock_reason_names, gpu_identity,
                                     nvml_handle_for, resolve_handle)
from harness.run.monitor.host import descendants, own_peak_rss_bytes, tree_rss, worker_peaks
from harness.run.monitor.sampler import Sampler, Samples, metrics

__all__ = [
    "CLOCK_REASONS", "CpuClock", "GpuHandle", "Sampler", "Samples", "clock_reason_names", "cpu_percent_since_last_call",
    "descendants", "gpu_identity", "metrics", "nvml_handle_for", "other_cpu_percent", "own_peak_rss_bytes",
    "resolve_handle", "tree_rss", "WindowGpm", "worker_peaks",
]
