"""The GPU through NVML (which creates no CUDA context): which device the child measures on, the metrics the parent
samples in the measured window, and GPM's SM activity over it (read by the child at the window's syncs)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable


@dataclass
class GpuHandle:
    """The NVML handle of the device torch measures on, and how it was found."""

    handle: Any
    mig: bool = False  # a MIG instance: utilisation and power are not reported for it
    how: str = ""  # "uuid", "pci" or "index"
    note: str = ""


# NVML metrics read inside the measured window: (Samples field, what it is, reader).
GPU_METRICS: tuple[tuple[str, str, Callable[[Any, Any], float]], ...] = (
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


class Gpm:
    """NVML GPU Performance Monitoring (Hopper and newer): SM activity between two samples of the device's counters.
    RuntimeError where GPM is not supported."""

    def __init__(self, nv, handle):
        support = nv.nvmlGpmQueryDeviceSupport(handle)
        if not support.isSupportedDevice:
            raise RuntimeError("GPM is not supported on this GPU (Hopper and newer)")
        self.nv, self.handle = nv, handle
        self.first = None

    def start(self) -> None:
        """The first sample (at the window's opening sync)."""
        self.discard()
        self.first = self.nv.nvmlGpmSampleGet(self.handle, self.nv.nvmlGpmSampleAlloc())

    def discard(self) -> None:
        """Free the first sample without reading the window."""
        if self.first is not None:
            try:
                self.nv.nvmlGpmSampleFree(self.first)
            except Exception:
                pass
            self.first = None

    def sm_active_pct(self) -> float:
        """The second sample, and the SM activity (%) between the two."""
        nv, first = self.nv, self.first
        if first is None:
            raise RuntimeError("GPM: no first sample")
        second = nv.nvmlGpmSampleGet(self.handle, nv.nvmlGpmSampleAlloc())
        self.first = None
        try:
            query = nv.c_nvmlGpmMetricsGet_t()
            query.version = nv.NVML_GPM_METRICS_GET_VERSION
            query.numMetrics = 1
            query.sample1, query.sample2 = first, second
            query.metrics[0].metricId = nv.NVML_GPM_METRIC_SM_UTIL
            nv.nvmlGpmMetricsGet(query)
            if query.metrics[0].nvmlReturn != 0:
                raise RuntimeError(f"NVML return {query.metrics[0].nvmlReturn}")
            return float(query.metrics[0].value)
        finally:
            for sample in (first, second):
                nv.nvmlGpmSampleFree(sample)


class WindowGpm:
    """GPM's SM activity over the measured window, read by the measuring child itself at the window's two syncs:
    the parent sees the window's edges only when it next polls (up to half a second late), which in a window of
    two seconds took in enough idle device time to read 10-20% low. Set up in the warm-up (NVML's start-up is
    not in the window); two NVML calls at the edges, none inside. Never raises: what it cannot read is a note."""

    def __init__(self, gpm: Gpm | None = None, note: str = ""):
        self.gpm, self.note = gpm, note

    @classmethod
    def for_identity(cls, identity: dict, nvml=None) -> "WindowGpm":
        """The reader for the device the child measures on (``gpu_identity``); one with a note where GPM is not
        available (no NVML, a MIG instance, a GPU before Hopper)."""
        try:
            if nvml is None:
                import pynvml as nvml
        except ImportError:
            return cls(note="SM activity (GPM) not read: pynvml is not installed")
        gpu = nvml_handle_for(identity, nvml)
        if gpu is None or gpu.handle is None:
            return cls(note=(gpu.note if gpu is not None else "") or "SM activity (GPM) not read: NVML unusable")
        if gpu.mig:
            return cls(note="SM activity (GPM) not read on a MIG instance")
        try:
            return cls(Gpm(nvml, gpu.handle))
        except Exception as exc:
            return cls(note=f"gpu_sm_active_pct: SM activity (GPM) unreadable ({type(exc).__name__}: {exc})")

    def open(self) -> None:
        """At the window's opening sync."""
        if self.gpm is None:
            return
        try:
            self.gpm.start()
        except Exception as exc:
            self._fail(exc)

    def close(self) -> float | None:
        """At the window's closing sync: the SM activity (%) over the window, None (with the note) if unread."""
        if self.gpm is None:
            return None
        try:
            return self.gpm.sm_active_pct()
        except Exception as exc:
            self._fail(exc)
            return None

    def _fail(self, exc: Exception) -> None:
        if self.gpm is not None:
            self.gpm.discard()
        self.gpm = None
        self.note = f"gpu_sm_active_pct: SM activity (GPM) unreadable ({type(exc).__name__}: {exc})"


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
