"""Is this machine fit to measure? The state that moves numbers, read before a sweep or a check starts (as pyperf's
``system show`` and TorchBench's machine check): the CPU frequency governor and boost, other processes' load, and
on NVIDIA GPUs persistence mode, application clocks, clock-event reasons and other processes on the GPU. Each
finding says how to fix it; nothing here changes the machine. ``python -m harness machine`` prints them all;
``sweep`` and ``check --against`` print one warning line when something is not fit.
"""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from harness.config.machine import usable_cpus

CPU_SYS = Path("/sys/devices/system/cpu")
CPUINFO = Path("/proc/cpuinfo")
# the CPU flags that mean bf16 arithmetic in hardware: x86's AVX512-BF16 and AMX-BF16 (Linux's names), Arm's BF16
BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")
OTHER_LOAD_PCT = 10.0  # the busy rule's threshold (``harness.analysis.stats.busy``): more, and runs are not trusted
WINDOW_S = 0.5  # how long other processes' load is watched
WARN_WINDOW_S = 0.2  # before a sweep or a check: a glance
MACHINE = "python -m harness machine"


@dataclass(frozen=True)
class Finding:
    """One thing about the machine: its state, whether it is fit to measure, and how to fix it when not."""

    name: str
    state: str
    fit: bool = True
    fix: str = ""


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_bf16() -> str:
    """The CPU's bf16 units as its flags name them (``avx512_bf16 amx_bf16``), ``none`` when it has none (torch then
    emulates bf16 in fp32 arithmetic, several times slower), "" when the flags cannot be read (not Linux)."""
    try:
        text = CPUINFO.read_text()
    except OSError:
        return ""
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):  # x86, Arm; every core lists the same
            flags = set(line.split(":", 1)[1].split())
            return " ".join(f for f in BF16_FLAGS if f in flags) or "none"
    return ""


def host() -> Finding:
    return Finding("host", f"{cpu_model()}, {usable_cpus()} of {os.cpu_count()} CPUs usable by this process")


def bf16() -> Finding:
    """The CPU's bf16 units: not a fault (the machine measures fine), but bf16 rungs read very differently without."""
    units = cpu_bf16()
    if units == "none":
        return Finding("bf16", "emulated: no AVX512-BF16 / AMX-BF16 units, so bf16 runs several times slower than fp32 "
                               "on this CPU (the guides' bf16 claims are for GPUs)")
    return Finding("bf16", f"in hardware ({units})" if units else "unknown (the CPU's flags cannot be read here)")


def governor(root: Path = CPU_SYS, cpus: list[int] | None = None) -> Finding:
    """The frequency governor of the CPUs this process may use: fit when every one is ``performance``."""
    cpus = sorted(os.sched_getaffinity(0)) if cpus is None else cpus
    found = {}
    for cpu in cpus:
        try:
            found[cpu] = (root / f"cpu{cpu}" / "cpufreq" / "scaling_governor").read_text().strip()
        except OSError:
            continue
    if not found:
        return Finding("CPU governor", "not exposed here (a VM or a container): the host decides")
    slow = sorted(c for c, g in found.items() if g != "performance")
    names = ", ".join(sorted(set(found.values())))
    if not slow:
        return Finding("CPU governor", f"performance on {len(found)} CPUs")
    return Finding("CPU governor", f"{names} on {len(slow)} of {len(found)} CPUs: the clock follows the load, so "
                   "the first steps of a run and a loaded loader run at other speeds", False,
                   "sudo cpupower frequency-set --governor performance")


def boost(root: Path = CPU_SYS) -> Finding:
    """Turbo / boost: on, the clock follows temperature and how many cores are busy (pyperf turns it off)."""
    for path, on_when, fix in ((root / "cpufreq" / "boost", "1",
                                "echo 0 | sudo tee /sys/devices/system/cpu/cpufreq/boost"),
                               (root / "intel_pstate" / "no_turbo", "0",
                                "echo 1 | sudo tee /sys/devices/system/cpu/intel_pstate/no_turbo")):
        try:
            value = path.read_text().strip()
        except OSError:
            continue
        if value == on_when:
            return Finding("CPU boost", "on: the clock follows temperature and the number of busy cores", False, fix)
        return Finding("CPU boost", "off")
    return Finding("CPU boost", "not exposed here")


def other_load(window_s: float = WINDOW_S) -> Finding:
    """Other processes' share of the CPUs over ``window_s``, and the busiest of them."""
    me = os.getpid()
    procs = [p for p in psutil.process_iter(["name"]) if p.pid != me]
    for p in procs:
        try:
            p.cpu_percent(None)
        except psutil.Error:
            pass
    psutil.cpu_percent(None)
    time.sleep(window_s)
    machine = psutil.cpu_percent(None)
    busiest = []
    for p in procs:
        try:
            busiest.append((p.cpu_percent(None), p.info["name"] or str(p.pid), p.pid))
        except psutil.Error:
            continue
    busiest = sorted(busiest, reverse=True)[:3]
    named = ", ".join(f"{name} (pid {pid}, {pct:.0f}% of a CPU)" for pct, name, pid in busiest if pct >= 5)
    state = f"{machine:.0f}% of the CPUs busy with other work" + (f": {named}" if named else "")
    if machine <= OTHER_LOAD_PCT:
        return Finding("other processes", state)
    return Finding("other processes", state, False,
                   f"stop the other work (more than {OTHER_LOAD_PCT:.0f}% of the CPUs makes every run 'busy': no "
                   "verdict)")


def gpus() -> list[Finding]:
    """Per NVIDIA GPU: persistence mode, application clocks, clock-event reasons, other processes (NVML)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no NVML, no driver, no GPU: nothing to say
        return []
    try:
        return [f for i in range(pynvml.nvmlDeviceGetCount()) for f in _gpu(pynvml, i)]
    finally:
        pynvml.nvmlShutdown()


def _gpu(nvml, index: int) -> list[Finding]:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    name = f"GPU {index}"
    out = []
    persistence = _try(lambda: nvml.nvmlDeviceGetPersistenceMode(handle))
    if persistence is not None:
        out.append(Finding(f"{name} persistence", "on") if persistence == 1 else Finding(
            f"{name} persistence", "off: the driver unloads between processes, so each run starts the GPU cold",
            False, f"sudo nvidia-smi -i {index} -pm 1"))
    app = _try(lambda: nvml.nvmlDeviceGetApplicationsClock(handle, nvml.NVML_CLOCK_SM))
    top = _try(lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM))
    now = _try(lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))
    if app is not None:
        out.append(Finding(f"{name} clocks", f"SM {now} MHz now, application clock {app} MHz, max {top} MHz "
                           f"(steadier locked: sudo nvidia-smi -i {index} -lgc {app},{app})"))
    reasons = _try(lambda: nvml.nvmlDeviceGetCurrentClocksEventReasons(handle))
    braking = reasons & ~(0x1 | 0x2) if reasons else 0  # idle and the application clock setting are not brakes
    if braking:
        out.append(Finding(f"{name} clock brake", f"clocks held back now (NVML reasons 0x{braking:x}: power, "
                           "thermal or a hardware slowdown)", False, "let it cool or lift the power cap: "
                           f"nvidia-smi -i {index} -q -d PERFORMANCE says which"))
    others = _try(lambda: nvml.nvmlDeviceGetComputeRunningProcesses(handle)) or []
    if others:
        out.append(Finding(f"{name} processes", f"{len(others)} other process(es) on it "
                           f"(pids {', '.join(str(p.pid) for p in others[:4])})", False,
                           "stop them: nvidia-smi lists them"))
    return out


def _try(read):
    try:
        return read()
    except Exception:  # a query this GPU or driver does not answer
        return None


def survey(window_s: float = WINDOW_S) -> list[Finding]:
    """Every finding about this machine."""
    return [host(), bf16(), governor(), boost(), other_load(window_s), *gpus()]


def warning_line(findings: list[Finding]) -> str:
    """One line naming what is not fit and the command that says how to fix it ("" when all is fit)."""
    unfit = [f for f in findings if not f.fit]
    if not unfit:
        return ""
    named = "; ".join(f"{f.name} {f.state.split(':')[0]}" for f in unfit)
    return f"warning: this machine is not fit to measure: {named} (`{MACHINE}` says how to fix each)"
