"""The parent's sampler of a measuring child: host memory always, GPU metrics while the window is open as the
parent sees it, and the record's memory and GPU fields from what it sampled (``metrics``).

The parent sees the window's edges only when it next polls, up to half a second late: each GPU sample carries
its time, and ``metrics`` keeps only those inside the window the child recorded (``window_start_unix``,
``measured_s``), so that a sample of the idle device after the window's close is not averaged in. NVML's
utilisation and power are averages over up to a second before the sample (``AVERAGED_OVER_S``): a sample taken
less than that after the window opened averages the device before the window in (idle, or still warming up), so
it does not count either. GPM's SM activity, which needs the edges themselves, is read by the child
(``gpu.WindowGpm``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import psutil

from harness.run.monitor.gpu import GPU_METRICS, GpuHandle, clock_reason_names
from harness.run.monitor.host import tree_rss

# Metrics NVML reports as an average over a period before the sample: utilisation over its sample period (1/6 s to
# 1 s, by product), power over one second (nvmlDeviceGetPowerUsage since Ampere). The others are instantaneous.
AVERAGED_OVER_S = {"gpu_util_pct": 1.0, "gpu_power_w": 1.0}
FULL_MEMORY_EVERY = 4  # every this many host samples, USS and PSS too (smaps_rollup: a few times RSS's cost)


@dataclass
class Samples:
    peak_host_rss_bytes: float = 0.0
    peak_main_rss_bytes: float = 0.0
    peak_worker_rss_bytes: dict[int, float] = field(default_factory=dict)
    # how many samples saw each child: one seen once was a helper between its fork and its exec (torch's import runs
    # `ldconfig -p` through ctypes.util.find_library), a copy of the measuring process for a moment, not a worker
    worker_samples: dict[int, int] = field(default_factory=dict)
    gpu_util_pct: list[float] = field(default_factory=list)
    gpu_mem_used_bytes: list[float] = field(default_factory=list)  # device-wide: every process on the GPU
    gpu_power_w: list[float] = field(default_factory=list)
    gpu_sm_clock_mhz: list[float] = field(default_factory=list)
    gpu_clock_reasons: list[float] = field(default_factory=list)  # NVML clock-event bitmasks, one per sample
    gpu_sample_times: dict[str, list[float]] = field(default_factory=dict)  # per metric, each value's UNIX time
    peak_host_pss_bytes: float | None = None  # main + loader workers, each shared page counted once
    peak_worker_uss_bytes: dict[int, float] = field(default_factory=dict)
    peak_compile_worker_bytes: float | None = None  # Inductor's compile workers together (PSS; RSS where no PSS)
    # The harness's own cost: CPU time of this (parent) process, every thread, over the window as the parent saw
    # it open and close, in % of one CPU. Empty when the parent did not see both edges.
    parent_cpu_pct: float | None = None
    notes: list[str] = field(default_factory=list)  # GPU metrics that could not be read, and why


class Sampler:
    """Samples the host RSS of a process tree (a measuring child + its loader workers) always, and GPU stats
    only while ``measuring`` is set (the measured window). No thread: its owner calls ``sample_once``.

    Every NVML call is guarded on its own: a metric whose call fails (not supported on a MIG instance, a GPU
    fallen off the bus) is read no more and ends as None with a note, while the others, and the host memory
    peaks, go on being sampled. ``sample_once`` never raises.
    """

    def __init__(self, pid: int | None = None, nvml_handle: GpuHandle | Any = None, nvml=None, ranks: bool = False):
        self.samples = Samples()
        self.ranks = ranks  # ``pid`` is torch's launcher: its children are the ranks (the "main" processes)
        self.measuring = False
        self.gpu: GpuHandle | None = None
        self.other_gpus: list[GpuHandle] = []  # the other ranks' GPUs of a multi-device run, sampled alike
        self._nvml = nvml  # the pynvml module (injectable for tests); imported on first use
        self._dead: set[str] = set()
        self._host_samples = 0
        self._parent_clock: tuple[float, float] | None = None  # (CPU s, wall s) of this process at the window's open
        try:
            self._proc = psutil.Process(pid)
        except psutil.Error:
            self._proc = None
        if nvml_handle is not None:
            self.attach_gpu(nvml_handle)

    def attach_gpu(self, nvml_handle: GpuHandle | Any) -> None:
        """Start sampling this device (the child names it once CUDA is up; the parent resolves the handle)."""
        if not isinstance(nvml_handle, GpuHandle):
            nvml_handle = GpuHandle(nvml_handle)
        if nvml_handle.note:
            self._note(nvml_handle.note)
        if nvml_handle.handle is not None and self.gpu is not None:  # another rank's GPU
            self.other_gpus.append(nvml_handle)
        else:
            self.gpu = nvml_handle if nvml_handle.handle is not None else None
        if nvml_handle.handle is not None and nvml_handle.mig:
            for name in ("gpu_util_pct", "gpu_power_w"):
                self._give_up(name, "not reported by NVML for a MIG instance")

    def window_opened(self) -> None:
        """The measured window has opened (as the parent sees it): GPU samples from now on."""
        self.measuring = True
        self._parent_clock = (time.process_time(), time.monotonic())

    def window_closed(self) -> None:
        """The measured window has closed (as the parent sees it): no more GPU samples; the parent's own CPU
        share over the window as it saw it."""
        self.measuring = False
        if self._parent_clock is not None:
            cpu0, wall0 = self._parent_clock
            wall = time.monotonic() - wall0
            if wall > 0:
                self.samples.parent_cpu_pct = 100.0 * (time.process_time() - cpu0) / wall
            self._parent_clock = None

    def window_lost(self) -> None:
        """The child ended before the parent saw the window close: no figure of the parent's CPU over it."""
        self.measuring = False
        self._parent_clock = None

    def _load_nvml(self) -> bool:
        if self._nvml is None:
            try:
                import pynvml

                self._nvml = pynvml
            except ImportError:
                self._note("NVML: pynvml is not installed")
                self.gpu = None
                return False
        return True

    def sample_once(self) -> None:
        try:
            self._sample_host()
        except Exception as exc:  # whatever goes wrong, the next sample is taken all the same
            self._note(f"sampler: {type(exc).__name__}: {exc}")
        if self.gpu is not None and self.measuring:
            try:
                self._sample_gpu()
            except Exception as exc:
                self._note(f"sampler: {type(exc).__name__}: {exc}")

    def _sample_host(self) -> None:
        full = self._host_samples % FULL_MEMORY_EVERY == 0
        rss = tree_rss(self._proc, self.ranks, full=full) if self._proc is not None else None
        if rss is None:
            return
        self._host_samples += 1
        s = self.samples
        s.peak_main_rss_bytes = max(s.peak_main_rss_bytes, rss.main)
        _peaks(s.peak_worker_rss_bytes, rss.workers)
        for pid in rss.workers:
            s.worker_samples[pid] = s.worker_samples.get(pid, 0) + 1
        s.peak_host_rss_bytes = max(s.peak_host_rss_bytes, rss.total)
        _peaks(s.peak_worker_uss_bytes, rss.worker_uss)
        s.peak_host_pss_bytes = _max(s.peak_host_pss_bytes, rss.pss)
        compiled = rss.compile_pss if full else None
        if full and compiled is None and rss.compile_rss:  # no PSS here: RSS, which counts shared pages each time
            compiled = rss.compile_rss
        s.peak_compile_worker_bytes = _max(s.peak_compile_worker_bytes, compiled or None)

    def _sample_gpu(self) -> None:
        if not self._load_nvml():
            return
        for name, what, read in GPU_METRICS:
            for gpu in [self.gpu, *self.other_gpus]:  # several GPUs: their samples pool (a mean per GPU, a max)
                if name in self._dead:
                    break
                try:
                    value = read(self._nvml, gpu.handle)
                except Exception as exc:  # NVMLError_NotSupported, _GpuIsLost, ...: this metric only
                    self._give_up(name, f"{what} unreadable ({type(exc).__name__}: {exc})")
                    continue
                getattr(self.samples, name).append(value)
                self.samples.gpu_sample_times.setdefault(name, []).append(time.time())

    def _give_up(self, name: str, why: str) -> None:
        self._dead.add(name)
        self._note(f"{name}: {why}")

    def _note(self, text: str) -> None:
        if text not in self.samples.notes:
            self.samples.notes.append(text)


def metrics(samples: Samples, child: dict, gpu_named: bool = False) -> dict:
    """The record's memory and GPU fields from the parent's samples, merged with what the child measured of
    itself from the kernel (its own exact peak RSS, its live loader workers' high-water marks at the window's
    close; its notes on the GPU): a peak is the larger of the two, never lower than either. The host peak is at
    least the main process's peak plus its workers' (the sum of peaks bounds the peak of the sum; on a CPU, where
    the parent takes no sample inside the window, it is the host peak). GPU samples count only inside the window
    the child recorded (``window_start_unix`` and ``measured_s``; all of them where it recorded none)."""
    main = max(samples.peak_main_rss_bytes, float(child.get("peak_main_rss_bytes") or 0.0))
    peaks = {pid: rss for pid, rss in samples.peak_worker_rss_bytes.items() if samples.worker_samples.get(pid, 2) > 1}
    kernel = {int(pid): float(peak) for pid, peak in (child.get("worker_hwm_bytes") or {}).items()}
    for pid, peak in kernel.items():
        peaks[pid] = max(peaks.get(pid, 0.0), peak)
    tree = main + sum(kernel.values()) if kernel else 0.0
    host = max(samples.peak_host_rss_bytes, float(child.get("peak_host_rss_bytes") or 0.0), main, tree)
    workers = sorted(peaks.values(), reverse=True)
    inside = _window_filter(samples, child.get("window_start_unix"), child.get("measured_s"))
    gpu = {name: inside(name) for name in ("gpu_util_pct", "gpu_mem_used_bytes", "gpu_power_w", "gpu_sm_clock_mhz",
                                           "gpu_clock_reasons")}
    notes = [n for n in str(child.get("gpu_sample_note") or "").split("; ") if n] + list(samples.notes)
    sampled = any(gpu[name] for name in ("gpu_util_pct", "gpu_mem_used_bytes", "gpu_power_w", "gpu_sm_clock_mhz"))
    if gpu_named and not sampled and not samples.notes:
        notes.append("no GPU sample inside the measured window: it was shorter than measure.sample_interval_s")
    return {
        "peak_host_rss_bytes": host or None,
        "peak_main_rss_bytes": main or None,
        "peak_worker_rss_bytes": workers[0] if workers else None,
        "worker_rss_bytes": workers,
        "peak_host_pss_bytes": samples.peak_host_pss_bytes,
        "worker_uss_bytes": sorted(samples.peak_worker_uss_bytes.values(), reverse=True),
        "peak_compile_worker_bytes": samples.peak_compile_worker_bytes,
        "gpu_util_pct": _mean(gpu["gpu_util_pct"]),
        # NVML's "used" is device-wide: every process's memory and the CUDA contexts, not only this run's tensors.
        "gpu_mem_used_bytes": max(gpu["gpu_mem_used_bytes"], default=None),
        "gpu_power_w": _mean(gpu["gpu_power_w"]),
        "gpu_sm_clock_mhz": _mean(gpu["gpu_sm_clock_mhz"]),
        "gpu_throttle_reasons": clock_reason_names(gpu["gpu_clock_reasons"]),
        "parent_cpu_pct": samples.parent_cpu_pct,
        "gpu_sample_note": "; ".join(dict.fromkeys(notes)),
    }


def _window_filter(samples: Samples, start: float | None, length: float | None):
    """``inside(name)``: the metric's values whose whole sampled period lies inside [start, start + length] (all
    without a window)."""

    def inside(name: str) -> list[float]:
        values = getattr(samples, name)
        times = samples.gpu_sample_times.get(name)
        if start is None or length is None or times is None or len(times) != len(values):
            return list(values)
        return sampled_within(values, times, start, start + length, AVERAGED_OVER_S.get(name, 0.0))

    return inside


def sampled_within(values: list[float], times: list[float], start: float, end: float,
                   averaged_over_s: float = 0.0) -> list[float]:
    """The values sampled in [start, end] whose averaging period (``averaged_over_s`` before the sample) starts
    inside it too."""
    return [v for v, t in zip(values, times) if start + averaged_over_s <= t <= end]


def _peaks(peaks: dict[int, float], now: dict[int, float]) -> None:
    for pid, value in now.items():
        peaks[pid] = max(peaks.get(pid, 0.0), value)


def _max(a: float | None, b: float | None) -> float | None:
    return b if a is None else (a if b is None else max(a, b))


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None
