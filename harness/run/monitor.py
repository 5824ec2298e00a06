"""Sampling of the measuring process from the outside: GPU (NVML) and host memory (psutil), in the parent.

Calling nvidia-smi every step once slowed training ~10x (Lightning). A sampling thread inside the measured
process is not free either: on a small CPU its wake-ups preempt the compute threads (oneDNN's OpenMP team
spins at barriers on every core, and one preempted thread stalls them all), which made bf16 steps on a
2-core machine several times slower. So the measured process runs no sampler at all: the parent, which
only waits for it, reads the child's memory (and its loader workers') through psutil by PID and the GPU
through NVML (which creates no CUDA context) between its polls of the progress file.
"""

from __future__ import annotations

import os
import resource
import sys
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
    gpu_sm_clock_mhz: list[float] = field(default_factory=list)
    gpu_clock_reasons: list[float] = field(default_factory=list)  # NVML clock-event bitmasks, one per sample
    gpu_sm_active_pct: float | None = None  # GPM, over the whole window (two samples, not a mean of polls)
    # The harness's own cost: CPU time of this (parent) process, every thread, over the window as the parent saw
    # it open and close, in % of one CPU. Empty when the parent did not see both edges.
    parent_cpu_pct: float | None = None
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
    ("gpu_sm_clock_mhz", "SM clock", lambda nv, h: float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))),
    ("gpu_clock_reasons", "clock-event reasons", lambda nv, h: float(_clock_reasons(nv, h))),
)

# NVML's clock-event ("throttle") reasons, by bit. GPU idle and the applications-clocks setting are not slowdowns
# of a busy GPU; the others are what make the same code slower on another day or machine.
CLOCK_REASONS = {
    0x1: "idle", 0x2: "applications clocks", 0x4: "power cap (software)", 0x8: "hardware slowdown",
    0x10: "sync boost", 0x20: "thermal (software)", 0x40: "thermal (hardware)", 0x80: "power brake (hardware)",
    0x100: "display clock", 0x200: "board limit", 0x400: "reliability",
}


def _clock_reasons(nv, handle) -> int:
    read = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or nv.nvmlDeviceGetCurrentClocksThrottleReasons
    return int(read(handle))


def clock_reason_names(masks: list[float]) -> str:
    """The reasons seen in any sample, by name, "" when none (or only 'idle': no work queued at that instant)."""
    seen = 0
    for mask in masks:
        seen |= int(mask)
    seen &= ~0x1
    names = [name for bit, name in CLOCK_REASONS.items() if seen & bit]
    if seen & ~sum(CLOCK_REASONS):
        names.append(f"other (0x{seen & ~sum(CLOCK_REASONS):x})")
    return ", ".join(names)


class _Gpm:
    """NVML GPU Performance Monitoring (Hopper and newer): SM activity between two samples of the device's
    counters, taken when the parent sees the measured window open and close. None where GPM is not supported."""

    def __init__(self, nv, handle):
        support = nv.nvmlGpmQueryDeviceSupport(handle)
        if not support.isSupportedDevice:
            raise RuntimeError("GPM is not supported on this GPU (Hopper and newer)")
        self.nv, self.handle = nv, handle
        self.first = nv.nvmlGpmSampleGet(handle, nv.nvmlGpmSampleAlloc())

    def discard(self) -> None:
        """Free the first sample without reading the window (its close was not seen, or another GPU failed)."""
        try:
            self.nv.nvmlGpmSampleFree(self.first)
        except Exception:
            pass

    def sm_active_pct(self) -> float:
        nv = self.nv
        second = nv.nvmlGpmSampleGet(self.handle, nv.nvmlGpmSampleAlloc())
        try:
            query = nv.c_nvmlGpmMetricsGet_t()
            query.version = nv.NVML_GPM_METRICS_GET_VERSION
            query.numMetrics = 1
            query.sample1, query.sample2 = self.first, second
            query.metrics[0].metricId = nv.NVML_GPM_METRIC_SM_UTIL
            nv.nvmlGpmMetricsGet(query)
            if query.metrics[0].nvmlReturn != 0:
                raise RuntimeError(f"NVML return {query.metrics[0].nvmlReturn}")
            return float(query.metrics[0].value)
        finally:
            for sample in (self.first, second):
                nv.nvmlGpmSampleFree(sample)


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
        self._gpm: list[_Gpm] = []  # one per GPU of the run (every rank's), between the window's edges
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
        """The measured window has opened (as the parent sees it): GPU samples from now on, GPM's first sample."""
        self.measuring = True
        self._parent_clock = (time.process_time(), time.monotonic())
        if self.gpu is None or "gpu_sm_active_pct" in self._dead or not self._load_nvml():
            return
        self._gpm = []
        try:
            for gpu in [self.gpu, *self.other_gpus]:
                self._gpm.append(_Gpm(self._nvml, gpu.handle))
        except Exception as exc:
            for gpm in self._gpm:
                gpm.discard()
            self._gpm = []
            self._give_up("gpu_sm_active_pct", f"SM activity (GPM) unreadable ({type(exc).__name__}: {exc})")

    def window_closed(self) -> None:
        """The measured window has closed: no more GPU samples; GPM's SM activity over the window (with several
        GPUs, their mean, as the other GPU metrics pool)."""
        self.measuring = False
        if self._parent_clock is not None:
            cpu0, wall0 = self._parent_clock
            wall = time.monotonic() - wall0
            if wall > 0:
                self.samples.parent_cpu_pct = 100.0 * (time.process_time() - cpu0) / wall
            self._parent_clock = None
        gpms, self._gpm = self._gpm, []
        if not gpms:
            return
        try:
            self.samples.gpu_sm_active_pct = sum(g.sm_active_pct() for g in gpms) / len(gpms)
        except Exception as exc:
            self._give_up("gpu_sm_active_pct", f"SM activity (GPM) unreadable ({type(exc).__name__}: {exc})")

    def window_lost(self) -> None:
        """The child ended before the parent saw the window close: GPM's second sample would take in the child's
        teardown, so SM activity is left empty, with a note."""
        self.measuring = False
        self._parent_clock = None
        if self._gpm:
            for gpm in self._gpm:
                gpm.discard()
            self._gpm = []
            self._give_up("gpu_sm_active_pct", "SM activity (GPM) not read: the window's close was not seen in time")

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
        if self._proc is None:
            return
        try:
            total = self._proc.memory_info().rss
            children = descendants(self._proc)
        except psutil.Error:  # the child has exited: nothing left to read
            return
        if not self.ranks:
            self.samples.peak_main_rss_bytes = max(self.samples.peak_main_rss_bytes, float(total))
        for child in children:
            try:
                rss = child.memory_info().rss
                rank = self.ranks and child.ppid() == self._proc.pid
            except psutil.Error:
                continue
            total += rss
            if rank:  # a rank is a measuring process: the largest of them is the main peak
                self.samples.peak_main_rss_bytes = max(self.samples.peak_main_rss_bytes, float(rss))
                continue
            peaks = self.samples.peak_worker_rss_bytes
            peaks[child.pid] = max(peaks.get(child.pid, 0.0), float(rss))
        self.samples.peak_host_rss_bytes = max(self.samples.peak_host_rss_bytes, float(total))

    def _sample_gpu(self) -> None:
        if not self._load_nvml():
            return
        for name, what, read in _GPU_METRICS:
            for gpu in [self.gpu, *self.other_gpus]:  # several GPUs: their samples pool (a mean per GPU, a max)
                if name in self._dead:
                    break
                try:
                    getattr(self.samples, name).append(read(self._nvml, gpu.handle))
                except Exception as exc:  # NVMLError_NotSupported, _GpuIsLost, ...: this metric only
                    self._give_up(name, f"{what} unreadable ({type(exc).__name__}: {exc})")

    def _give_up(self, name: str, why: str) -> None:
        self._dead.add(name)
        self._note(f"{name}: {why}")

    def _note(self, text: str) -> None:
        if text not in self.samples.notes:
            self.samples.notes.append(text)


def descendants(proc: psutil.Process) -> list[psutil.Process]:
    """The process's children, grandchildren, ... Linux lists each thread's children in /proc: reading those few
    files costs a tenth of psutil's ``children()``, which reads every process on the machine (1.6 ms a sample)."""
    if not os.path.exists(f"/proc/{proc.pid}/task/{proc.pid}/children"):  # not Linux, or no CONFIG_PROC_CHILDREN
        return proc.children(recursive=True)
    found: list[psutil.Process] = []
    todo = [proc.pid]
    while todo:
        pid = todo.pop()
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:  # gone meanwhile
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except (OSError, ValueError):
                continue
            for kid in kids:
                try:
                    found.append(psutil.Process(kid))
                except psutil.Error:
                    continue
                todo.append(kid)
    return found


def metrics(samples: Samples, child: dict, gpu_named: bool = False) -> dict:
    """The record's memory and GPU fields from the parent's samples, merged with what the child measured of
    itself (its exact peak RSS, from the kernel): a peak is the larger of the two, never lower than either."""
    main = max(samples.peak_main_rss_bytes, float(child.get("peak_main_rss_bytes") or 0.0))
    host = max(samples.peak_host_rss_bytes, float(child.get("peak_host_rss_bytes") or 0.0), main)
    workers = sorted(samples.peak_worker_rss_bytes.values(), reverse=True)
    notes = list(samples.notes)
    gpu = samples.gpu_util_pct or samples.gpu_mem_used_bytes or samples.gpu_power_w or samples.gpu_sm_clock_mhz
    if gpu_named and not gpu and not notes:
        notes.append("no GPU sample: the measured window was shorter than measure.sample_interval_s")
    return {
        "peak_host_rss_bytes": host or None,
        "peak_main_rss_bytes": main or None,
        "peak_worker_rss_bytes": workers[0] if workers else None,
        "worker_rss_bytes": workers,
        "gpu_util_pct": _mean(samples.gpu_util_pct),
        # NVML's "used" is device-wide: every process's memory and the CUDA contexts, not only this run's tensors.
        "gpu_mem_used_bytes": max(samples.gpu_mem_used_bytes, default=None),
        "gpu_power_w": _mean(samples.gpu_power_w),
        "gpu_sm_clock_mhz": _mean(samples.gpu_sm_clock_mhz),
        "gpu_throttle_reasons": clock_reason_names(samples.gpu_clock_reasons),
        "gpu_sm_active_pct": samples.gpu_sm_active_pct,
        "parent_cpu_pct": samples.parent_cpu_pct,
        "gpu_sample_note": "; ".join(notes),
    }


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def own_peak_rss_bytes() -> float:
    """This process's peak RSS over its life, kept by the kernel: exact, and free to read once."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return float(peak if sys.platform == "darwin" else peak * 1024)  # bytes on macOS, KiB on Linux


def gpu_identity(torch_device_index: int) -> dict:
    """What names the CUDA device in NVML's terms (read in the child, which has CUDA up already; the parent must
    never initialise CUDA): its UUID and PCI bus id, and the CUDA_VISIBLE_DEVICES it was seen under."""
    import torch

    props = torch.cuda.get_device_properties(torch_device_index)
    return {
        "index": torch_device_index,
        "uuid": str(getattr(props, "uuid", "") or ""),
        "pci_bus": f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0",
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }


def nvml_handle_for(identity: dict, nvml=None) -> GpuHandle | None:
    """The NVML handle of the device the child named (``gpu_identity``); None without NVML. No torch, no CUDA."""
    try:
        if nvml is None:
            import pynvml as nvml
        nvml.nvmlInit()
    except Exception:  # NVML missing or unusable: GPU utilisation stays empty, never invented
        return None
    try:
        return resolve_handle(nvml, identity.get("uuid", ""), identity.get("pci_bus", ""), identity.get("visible"))
    except Exception as exc:
        return GpuHandle(None, note=f"NVML: no handle for cuda:{identity.get('index', 0)} "
                                    f"({type(exc).__name__}: {exc})")


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
