"""Cheap background sampling of GPU (NVML) and host memory (psutil): one thread, no syncs.

Calling nvidia-smi every step once slowed training ~10x (Lightning); NVML from a thread that wakes
every ``interval_s`` costs the training loop nothing it would notice.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import psutil


@dataclass
class Samples:
    peak_host_rss_bytes: float = 0.0
    peak_main_rss_bytes: float = 0.0
    peak_worker_rss_bytes: dict[int, float] = field(default_factory=dict)
    gpu_util_pct: list[float] = field(default_factory=list)
    gpu_mem_used_bytes: list[float] = field(default_factory=list)
    gpu_power_w: list[float] = field(default_factory=list)


class Sampler(threading.Thread):
    """Samples host RSS (main + loader workers) always, GPU stats only inside the measured window."""

    def __init__(self, interval_s: float, nvml_handle=None):
        super().__init__(daemon=True, name="harness-sampler")
        self.interval_s = interval_s
        self.nvml_handle = nvml_handle
        self.samples = Samples()
        self.measuring = threading.Event()
        self._halt = threading.Event()
        self._proc = psutil.Process()

    def run(self) -> None:
        while not self._halt.is_set():
            self.sample_once()
            self._halt.wait(self.interval_s)

    def sample_once(self) -> None:
        try:
            total = self._proc.memory_info().rss
            self.samples.peak_main_rss_bytes = max(self.samples.peak_main_rss_bytes, float(total))
            for child in self._proc.children(recursive=True):
                try:
                    rss = child.memory_info().rss
                except psutil.Error:
                    continue
                total += rss
                peaks = self.samples.peak_worker_rss_bytes
                peaks[child.pid] = max(peaks.get(child.pid, 0.0), float(rss))
            self.samples.peak_host_rss_bytes = max(self.samples.peak_host_rss_bytes, float(total))
        except psutil.Error:
            pass
        if self.nvml_handle is not None and self.measuring.is_set():
            import pynvml

            util = pynvml.nvmlDeviceGetUtilizationRates(self.nvml_handle)
            mem = pynvml.nvmlDeviceGetMemoryInfo(self.nvml_handle)
            self.samples.gpu_util_pct.append(float(util.gpu))
            self.samples.gpu_mem_used_bytes.append(float(mem.used))
            try:
                self.samples.gpu_power_w.append(pynvml.nvmlDeviceGetPowerUsage(self.nvml_handle) / 1000.0)
            except pynvml.NVMLError:
                pass

    def stop(self) -> Samples:
        self._halt.set()
        self.join(timeout=5)
        self.sample_once()
        return self.samples


def nvml_handle_for(torch_device_index: int):
    """The NVML handle of the GPU torch calls ``cuda:<index>`` (matched by PCI bus id)."""
    try:
        import pynvml
        import torch

        pynvml.nvmlInit()
        props = torch.cuda.get_device_properties(torch_device_index)
        bus = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
        try:
            return pynvml.nvmlDeviceGetHandleByPciBusId(bus)
        except pynvml.NVMLError:
            return pynvml.nvmlDeviceGetHandleByIndex(torch_device_index)
    except Exception:  # NVML missing or unusable: GPU utilisation stays empty, never invented
        return None


def cpu_percent_since_last_call() -> float:
    return psutil.cpu_percent(interval=None)


@dataclass(frozen=True)
class CpuClock:
    """CPU seconds used by the whole machine and by this process tree, at one instant."""

    machine_busy_s: float
    own_s: float
    wall_s: float

    @staticmethod
    def read() -> "CpuClock":
        t = psutil.cpu_times()
        busy = sum(t) - t.idle - getattr(t, "iowait", 0.0)
        proc = psutil.Process()
        c = proc.cpu_times()
        # children_*: loader workers already joined; live workers are read one by one.
        own = c.user + c.system + c.children_user + c.children_system
        for child in proc.children(recursive=True):
            try:
                ct = child.cpu_times()
                own += ct.user + ct.system
            except psutil.Error:
                pass
        return CpuClock(busy, own, time.perf_counter())


def other_cpu_percent(start: CpuClock, end: CpuClock) -> float:
    """Share of the machine's CPU that other processes used between two readings (0-100)."""
    wall = end.wall_s - start.wall_s
    if wall <= 0:
        return 0.0
    others = (end.machine_busy_s - start.machine_busy_s) - (end.own_s - start.own_s)
    return max(0.0, 100.0 * others / (wall * (psutil.cpu_count() or 1)))
