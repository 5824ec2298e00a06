"""Cheap background sampling of GPU (NVML) and host memory (psutil): one thread, no syncs.

Calling nvidia-smi every step once slowed training ~10x (Lightning); NVML from a thread that wakes
every ``interval_s`` costs the training loop nothing it would notice.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import psutil


@dataclass
class Samples:
    peak_host_rss_bytes: float = 0.0
    peak_main_rss_bytes: float = 0.0
    peak_worker_rss_bytes: dict[int, float] = field(default_factory=dict)
    gpu_util_pct: list[float] = field(default_factory=list)
    gpu_mem_used_bytes: list[float] = field(default_factory=list)  # device-wide: every process on the GPU
    gpu_power_w: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # GPU metrics that could not be read, and why


@dataclass
class GpuHandle:
    """The NVML handle of the device torch measures on, and how it was found."""

    handle: Any
    mig: bool = False  # a MIG instance: utilisation and power are not reported for it
    how: str = ""  # "uuid", "pci" or "index"
    note: str = ""


# NVML metrics read inside the measured window: (Samples field, what it is, reader).
_GPU_METRICS: tuple[tuple[str, str, Callable[[Any, Any], float]], ...] = (
    ("gpu_util_pct", "GPU utilisation", lambda nv, h: float(nv.nvmlDeviceGetUtilizationRates(h).gpu)),
    ("gpu_mem_used_bytes", "device memory used", lambda nv, h: float(nv.nvmlDeviceGetMemoryInfo(h).used)),
    ("gpu_power_w", "power", lambda nv, h: nv.nvmlDeviceGetPowerUsage(h) / 1000.0),
)


class Sampler(threading.Thread):
    """Samples host RSS (main + loader workers) always, GPU stats only inside the measured window.

    Every NVML call is guarded on its own: a metric whose call fails (not supported on a MIG instance, a GPU
    fallen off the bus) is read no more and ends as None with a note, while the others, and the host memory
    peaks, go on being sampled. The thread itself never dies of a sampling error.
    """

    def __init__(self, interval_s: float, nvml_handle: GpuHandle | Any = None, nvml=None):
        super().__init__(daemon=True, name="harness-sampler")
        self.interval_s = interval_s
        if nvml_handle is not None and not isinstance(nvml_handle, GpuHandle):
            nvml_handle = GpuHandle(nvml_handle)
        self.gpu: GpuHandle | None = nvml_handle
        self._nvml = nvml  # the pynvml module (injectable for tests); imported on first use
        self.samples = Samples()
        self.measuring = threading.Event()
        self._halt = threading.Event()
        self._proc = psutil.Process()
        self._dead: set[str] = set()
        if self.gpu is not None and self.gpu.note:
            self.samples.notes.append(self.gpu.note)
        if self.gpu is not None and self.gpu.handle is None:
            self.gpu = None
        elif self.gpu is not None and self.gpu.mig:
            for name in ("gpu_util_pct", "gpu_power_w"):
                self._give_up(name, "not reported by NVML for a MIG instance")

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                self.sample_once()
            except Exception as exc:  # whatever goes wrong, the host peaks must keep being sampled
                self._note(f"sampler: {type(exc).__name__}: {exc}")
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
        if self.gpu is not None and self.measuring.is_set():
            self._sample_gpu()

    def _sample_gpu(self) -> None:
        if self._nvml is None:
            try:
                import pynvml

                self._nvml = pynvml
            except ImportError:
                self._note("NVML: pynvml is not installed")
                self.gpu = None
                return
        for name, what, read in _GPU_METRICS:
            if name in self._dead:
                continue
            try:
                getattr(self.samples, name).append(read(self._nvml, self.gpu.handle))
            except Exception as exc:  # NVMLError_NotSupported, _GpuIsLost, ...: this metric only
                self._give_up(name, f"{what} unreadable ({type(exc).__name__}: {exc})")

    def _give_up(self, name: str, why: str) -> None:
        self._dead.add(name)
        self._note(f"{name}: {why}")

    def _note(self, text: str) -> None:
        if text not in self.samples.notes:
            self.samples.notes.append(text)

    def stop(self) -> Samples:
        self._halt.set()
        self.join(timeout=5)
        try:
            self.sample_once()
        except Exception as exc:
            self._note(f"sampler: {type(exc).__name__}: {exc}")
        return self.samples


def nvml_handle_for(torch_device_index: int) -> GpuHandle | None:
    """The NVML handle of the GPU (or MIG instance) torch calls ``cuda:<index>``; None without NVML."""
    try:
        import pynvml
        import torch

        pynvml.nvmlInit()
        props = torch.cuda.get_device_properties(torch_device_index)
    except Exception:  # NVML missing or unusable: GPU utilisation stays empty, never invented
        return None
    uuid = str(getattr(props, "uuid", "") or "")
    bus = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
    try:
        return resolve_handle(pynvml, uuid, bus, os.environ.get("CUDA_VISIBLE_DEVICES"))
    except Exception as exc:
        return GpuHandle(None, note=f"NVML: no handle for cuda:{torch_device_index} ({type(exc).__name__}: {exc})")


def resolve_handle(nvml, uuid: str, pci_bus: str, visible: str | None) -> GpuHandle:
    """Find the NVML handle of the device torch measures on, by the surest key available.

    1. Its UUID: CUDA reports the UUID of the device a process really sees, a MIG instance's own under MIG, and
       it does not depend on CUDA_VISIBLE_DEVICES renumbering (NVML spells them "GPU-..." and "MIG-...").
    2. Its PCI bus id, unless MIG is on there: under MIG the bus id names the whole GPU, whose utilisation
       and memory are not this instance's.
    3. Index 0 only where NVML sees a single GPU without MIG: torch's index counts the visible devices in
       CUDA's order, NVML's all devices in PCI order, so with several GPUs index i may be another GPU.
    Otherwise no handle (GPU metrics None, with the reason as a note) rather than another device's numbers.
    """
    if uuid:
        keys = [uuid] if uuid.startswith(("GPU-", "MIG-")) else ["GPU-" + uuid, "MIG-" + uuid]
        for key in keys:
            try:
                handle = nvml.nvmlDeviceGetHandleByUUID(key)
            except Exception:
                continue
            return GpuHandle(handle, mig=key.startswith("MIG-") or _is_mig_instance(nvml, handle), how="uuid")
    mig_visible = bool(visible) and "MIG-" in visible
    try:
        handle = nvml.nvmlDeviceGetHandleByPciBusId(pci_bus)
    except Exception:
        handle = None
    if handle is not None and not mig_visible and not _mig_enabled(nvml, handle):
        return GpuHandle(handle, how="pci")
    if handle is None and not mig_visible and nvml.nvmlDeviceGetCount() == 1:
        only = nvml.nvmlDeviceGetHandleByIndex(0)
        if not _mig_enabled(nvml, only):
            return GpuHandle(only, how="index")
    return GpuHandle(None, note="NVML: the measured device could not be told apart (MIG, or several GPUs without "
                                "a matching UUID or PCI bus id); GPU utilisation, memory and power not sampled")


def _is_mig_instance(nvml, handle) -> bool:
    try:
        return bool(nvml.nvmlDeviceIsMigDeviceHandle(handle))
    except Exception:
        return False


def _mig_enabled(nvml, handle) -> bool:
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
        return current == 1
    except Exception:  # not supported on this GPU: no MIG
        return False


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
