"""The parent-side sampler: sees a child tree's memory from outside (compile workers apart from loader workers,
shared pages once), keeps going when NVML fails, keeps only the GPU samples inside the window the child recorded,
and finds the GPU it should; the child's own GPM reading at the window's edges (fake NVML, no GPU)."""

import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from harness.run import monitor


class NVMLError(Exception):
    pass


class FakeNvml:
    """pynvml's calls used by the sampler; each can be told to fail."""

    def __init__(self, fail=(), uuids=None, buses=None, count=1, mig_mode=0):
        self.fail, self.calls = set(fail), []
        self.uuids, self.buses, self.count, self.mig_mode = uuids or {}, buses or {}, count, mig_mode

    def _call(self, name, value):
        self.calls.append(name)
        if name in self.fail:
            raise NVMLError(f"{name}: Not Supported")
        return value

    def nvmlInit(self):
        self.calls.append("init")

    def nvmlDeviceGetUtilizationRates(self, h):
        return self._call("util", SimpleNamespace(gpu=87))

    def nvmlDeviceGetMemoryInfo(self, h):
        return self._call("mem", SimpleNamespace(used=5 * 2**30))

    def nvmlDeviceGetPowerUsage(self, h):
        return self._call("power", 250_000)

    def nvmlDeviceGetHandleByUUID(self, key):
        if key not in self.uuids:
            raise NVMLError("Not Found")
        return self.uuids[key]

    def nvmlDeviceGetHandleByPciBusId(self, bus):
        if bus not in self.buses:
            raise NVMLError("Not Found")
        return self.buses[bus]

    def nvmlDeviceGetCount(self):
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i):
        return f"index-{i}"

    def nvmlDeviceGetMigMode(self, h):
        return (self.mig_mode, self.mig_mode)

    def nvmlDeviceIsMigDeviceHandle(self, h):
        return str(h).startswith("mig")

    NVML_CLOCK_SM = 1
    NVML_GPM_METRICS_GET_VERSION = 1
    NVML_GPM_METRIC_SM_UTIL = 2

    def nvmlDeviceGetClockInfo(self, h, which):
        return self._call("clock", 1755 if which == self.NVML_CLOCK_SM else 0)

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self._call("reasons", self.reasons.pop(0) if getattr(self, "reasons", None) else 0)

    # GPM: a counter of SM-active time that the test advances between the two samples
    def nvmlGpmQueryDeviceSupport(self, h):
        return self._call("gpm", SimpleNamespace(isSupportedDevice=int(getattr(self, "gpm", True))))

    def nvmlGpmSampleAlloc(self):
        return SimpleNamespace(at=None)

    def nvmlGpmSampleGet(self, h, sample):
        sample.at = getattr(self, "sm_busy_by", {}).get(h, getattr(self, "sm_busy", 0.0))  # a counter per GPU
        return sample

    def nvmlGpmSampleFree(self, sample):
        self.calls.append("free")

    def c_nvmlGpmMetricsGet_t(self):
        return SimpleNamespace(metrics=[SimpleNamespace(metricId=0, value=0.0, nvmlReturn=0)])

    def nvmlGpmMetricsGet(self, query):
        query.metrics[0].value = query.sample2.at - query.sample1.at
        return query


def test_all_metrics_sampled_when_nvml_works():
    s = monitor.Sampler(os.getpid(), "gpu0", nvml=FakeNvml())
    s.measuring = True
    s.sample_once()
    assert s.samples.gpu_util_pct == [87.0] and s.samples.gpu_mem_used_bytes == [5 * 2**30]
    assert s.samples.gpu_power_w == [250.0] and s.samples.notes == []


def test_gpu_is_sampled_only_inside_the_measured_window():
    s = monitor.Sampler(os.getpid(), "gpu0", nvml=FakeNvml())
    s.sample_once()
    s.measuring = True
    s.sample_once()
    s.measuring = False
    s.sample_once()
    assert s.samples.gpu_util_pct == [87.0] and s.samples.peak_main_rss_bytes > 0


def test_a_failing_metric_becomes_none_and_the_others_and_host_memory_go_on():
    nvml = FakeNvml(fail={"util", "mem"})
    s = monitor.Sampler(os.getpid(), "gpu0", nvml=nvml)
    host_reads = []
    real = s._proc

    class CountingProcess:  # counts host-memory reads, so the test sees them go on after the NVML failures
        pid = real.pid

        def memory_info(self):
            host_reads.append(len(nvml.calls))
            return real.memory_info()

        def memory_full_info(self):
            host_reads.append(len(nvml.calls))
            return real.memory_full_info()

        def children(self, recursive=False):
            return real.children(recursive=recursive)

    s._proc = CountingProcess()
    s.measuring = True
    for _ in range(4):
        s.sample_once()
    samples = s.samples
    assert sum(1 for n in host_reads if n >= 3) >= 2  # host memory read again after util and mem had failed
    assert samples.peak_main_rss_bytes > 0 and samples.peak_host_rss_bytes > 0
    assert samples.gpu_util_pct == [] and samples.gpu_mem_used_bytes == []
    assert len(samples.gpu_power_w) == 4
    assert any(n.startswith("gpu_util_pct: GPU utilisation unreadable (NVMLError") for n in samples.notes)
    assert any(n.startswith("gpu_mem_used_bytes: device memory used unreadable") for n in samples.notes)
    assert nvml.calls.count("util") == 1  # a failed metric is not asked again every interval
    out = monitor.metrics(samples, {}, gpu_named=True)
    assert out["gpu_util_pct"] is None and out["gpu_mem_used_bytes"] is None and out["gpu_power_w"] == 250.0
    assert "GPU utilisation unreadable" in out["gpu_sample_note"]


def test_an_unexpected_error_does_not_stop_the_sampling():
    s = monitor.Sampler(os.getpid(), "gpu0", nvml=FakeNvml())
    s.measuring = True

    def broken():
        raise OSError("GPU has fallen off the bus")

    s._sample_gpu = broken
    s.sample_once()
    s.sample_once()
    assert s.samples.peak_host_rss_bytes > 0 and any("fallen off the bus" in n for n in s.samples.notes)


def test_a_process_that_has_exited_is_sampled_as_nothing_more():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    s = monitor.Sampler(proc.pid)
    proc.wait()
    s.sample_once()
    assert s.samples.peak_main_rss_bytes == 0.0 and s.samples.notes == []
    assert monitor.metrics(s.samples, {"peak_main_rss_bytes": 7e7})["peak_host_rss_bytes"] == 7e7


# A fake measuring child: holds MAIN_MB of its own, starts a "loader worker" holding WORKER_MB, says "ready".
_TREE = """
import subprocess, sys, time
main = bytearray({main} * 2**20)
worker = subprocess.Popen([sys.executable, "-c",
    "import sys, time; w = bytearray({worker} * 2**20); print('up', flush=True); time.sleep(600)"],
    stdout=subprocess.PIPE, text=True)
worker.stdout.readline()
print("ready", flush=True)
time.sleep(600)
"""


def test_the_parent_sees_the_child_and_its_worker_memory_from_outside():
    child = subprocess.Popen([sys.executable, "-c", _TREE.format(main=300, worker=150)], stdout=subprocess.PIPE,
                             text=True, start_new_session=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        s = monitor.Sampler(child.pid)
        s.sample_once()
        s.sample_once()
        out = monitor.metrics(s.samples, {})
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    mb = 2**20
    assert 300 * mb < out["peak_main_rss_bytes"] < 450 * mb  # the child's bytearray plus the interpreter
    assert len(out["worker_rss_bytes"]) == 1 and 150 * mb < out["peak_worker_rss_bytes"] < 300 * mb
    assert out["peak_host_rss_bytes"] >= out["peak_main_rss_bytes"] + 150 * mb
    assert out["gpu_util_pct"] is None and out["gpu_sample_note"] == ""
    # the worker's own pages (its bytearray), and the tree with each shared page once: below the RSS sum
    assert len(out["worker_uss_bytes"]) == 1 and 150 * mb < out["worker_uss_bytes"][0] < out["peak_worker_rss_bytes"]
    assert 450 * mb < out["peak_host_pss_bytes"] < out["peak_host_rss_bytes"]
    assert out["peak_compile_worker_bytes"] is None


# A fake measuring child with one loader worker and Inductor's compile worker (its command line names
# torch/_inductor/compile_worker), which has a pool worker of its own with a plain command line.
_HOLDER = "import subprocess, sys, time\nw = bytearray({mb} * 2**20)\n{then}print('up', flush=True)\ntime.sleep(600)\n"
_START = "p{n} = subprocess.Popen([sys.executable, '-c', {code!r}{extra}], stdout=subprocess.PIPE, text=True)\n" \
         "p{n}.stdout.readline()\n"


def _compiling_tree(loader_mb: int, compile_mb: int, pool_mb: int) -> str:
    pool = _START.format(n=9, code=_HOLDER.format(mb=pool_mb, then=""), extra="")
    compiler = _HOLDER.format(mb=compile_mb, then=pool)
    return ("import subprocess, sys, time\n" + _START.format(n=1, code=_HOLDER.format(mb=loader_mb, then=""), extra="")
            + _START.format(n=2, code=compiler, extra=", 'torch/_inductor/compile_worker/__main__.py'")
            + "print('ready', flush=True)\ntime.sleep(600)\n")


def test_compile_workers_are_counted_apart_from_the_loader_workers():
    code = _compiling_tree(loader_mb=150, compile_mb=100, pool_mb=80)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        s = monitor.Sampler(child.pid)
        s.sample_once()
        s.sample_once()  # a worker lives through samples (a child seen once is not counted as one)
        out = monitor.metrics(s.samples, {})
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    mb = 2**20
    assert len(out["worker_rss_bytes"]) == 1 and 150 * mb < out["peak_worker_rss_bytes"] < 250 * mb
    # the compile worker and its pool worker (known by its parent) together; neither is a loader worker
    assert 180 * mb < out["peak_compile_worker_bytes"] < 400 * mb
    assert out["peak_host_rss_bytes"] < out["peak_main_rss_bytes"] + 300 * mb


def test_the_childs_own_kernel_peak_is_kept_when_the_parent_sampled_less():
    samples = monitor.Samples(peak_host_rss_bytes=3e8, peak_main_rss_bytes=2e8, peak_worker_rss_bytes={7: 1e8, 9: 5e7})
    out = monitor.metrics(samples, {"peak_main_rss_bytes": 4e8, "peak_host_rss_bytes": 4e8})
    assert out["peak_main_rss_bytes"] == 4e8 and out["peak_host_rss_bytes"] == 4e8
    assert out["worker_rss_bytes"] == [1e8, 5e7] and out["peak_worker_rss_bytes"] == 1e8
    # a GPU named by the child but no sample taken (a window shorter than one poll): said, not left blank
    assert "shorter than measure.sample_interval_s" in monitor.metrics(samples, {}, gpu_named=True)["gpu_sample_note"]


def test_the_parent_resolves_the_childs_device_with_nvml_alone():
    nvml = FakeNvml(uuids={"GPU-abc": "gpu3"})
    h = monitor.nvml_handle_for({"index": 0, "uuid": "abc", "pci_bus": "x", "visible": None}, nvml=nvml)
    assert (h.handle, h.how) == ("gpu3", "uuid") and nvml.calls[0] == "init"


def test_mig_instance_skips_utilisation_and_power_with_a_note():
    nvml = FakeNvml()
    s = monitor.Sampler(os.getpid(), monitor.GpuHandle("mig-1", mig=True, how="uuid"), nvml=nvml)
    s.measuring = True
    s.sample_once()
    assert s.samples.gpu_util_pct == [] and s.samples.gpu_mem_used_bytes == [5 * 2**30]
    assert "util" not in nvml.calls
    assert any("not reported by NVML for a MIG instance" in n for n in s.samples.notes)


def test_handle_found_by_uuid_even_when_pci_and_index_would_name_another_gpu():
    nvml = FakeNvml(uuids={"GPU-abc": "gpu3"}, buses={"00000000:01:00.0": "gpu0"}, count=8)
    h = monitor.resolve_handle(nvml, "abc", "00000000:01:00.0", visible="3")
    assert (h.handle, h.how, h.mig) == ("gpu3", "uuid", False)


def test_mig_instance_found_by_its_own_uuid():
    nvml = FakeNvml(uuids={"MIG-123": "mig-7"}, buses={"00000000:01:00.0": "gpu0"}, mig_mode=1)
    h = monitor.resolve_handle(nvml, "123", "00000000:01:00.0", visible="MIG-123")
    assert (h.handle, h.mig) == ("mig-7", True)


def test_no_pci_fallback_under_mig_and_no_index_fallback_with_several_gpus():
    # under MIG the PCI bus id names the whole GPU: no handle rather than the wrong numbers
    h = monitor.resolve_handle(FakeNvml(buses={"b": "gpu0"}, mig_mode=1), "", "b", visible=None)
    assert h.handle is None and "could not be told apart" in h.note
    h = monitor.resolve_handle(FakeNvml(count=4), "", "b", visible="2")
    assert h.handle is None
    assert monitor.resolve_handle(FakeNvml(buses={"b": "gpu0"}), "", "b", None).how == "pci"
    assert monitor.resolve_handle(FakeNvml(count=1), "", "b", None).handle == "index-0"


def test_a_handle_that_could_not_be_found_records_its_note_and_samples_host_only():
    s = monitor.Sampler(os.getpid(), monitor.GpuHandle(None, note="NVML: no handle"), nvml=FakeNvml())
    s.measuring = True
    s.sample_once()
    assert s.samples.gpu_mem_used_bytes == [] and s.samples.notes == ["NVML: no handle"]
    assert s.samples.peak_host_rss_bytes > 0


def test_clocks_and_clock_event_reasons_are_sampled_and_named():
    nvml = FakeNvml()
    nvml.reasons = [0x1, 0x4 | 0x40, 0x1]
    s = monitor.Sampler(os.getpid(), "gpu0", nvml=nvml)
    s.measuring = True
    for _ in range(3):
        s.sample_once()
    out = monitor.metrics(s.samples, {}, gpu_named=True)
    assert out["gpu_sm_clock_mhz"] == 1755.0
    # 'idle' alone is no slowdown of a busy GPU; the others are named, each once
    assert out["gpu_throttle_reasons"] == "power cap (software), thermal (hardware)"
    assert monitor.clock_reason_names([0x1, 0x0]) == "" and monitor.clock_reason_names([0x800]) == "other (0x800)"


IDENTITY = {"index": 0, "uuid": "abc", "pci_bus": "x", "visible": None}


def test_gpm_sm_activity_is_read_by_the_child_at_the_windows_two_edges():
    nvml = FakeNvml(uuids={"GPU-abc": "gpu0"})
    gpm = monitor.WindowGpm.for_identity(IDENTITY, nvml=nvml)
    assert gpm.note == "" and "free" not in nvml.calls
    nvml.sm_busy = 10.0
    gpm.open()
    nvml.sm_busy = 72.5  # what the fake's counter says the window added
    assert gpm.close() == 62.5 and nvml.calls.count("free") == 2 and gpm.note == ""


def test_gpm_unsupported_or_unreadable_leaves_it_empty_with_a_note():
    nvml = FakeNvml(uuids={"GPU-abc": "gpu0"})
    nvml.gpm = False  # before Hopper
    gpm = monitor.WindowGpm.for_identity(IDENTITY, nvml=nvml)
    gpm.open()
    assert gpm.close() is None and "GPM is not supported" in gpm.note
    mig = monitor.WindowGpm.for_identity(IDENTITY, nvml=FakeNvml(uuids={"MIG-abc": "mig-1"}))
    assert mig.close() is None and "MIG instance" in mig.note
    broken = FakeNvml(uuids={"GPU-abc": "gpu0"})
    gpm = monitor.WindowGpm.for_identity(IDENTITY, nvml=broken)
    gpm.open()
    broken.nvmlGpmMetricsGet = lambda query: (_ for _ in ()).throw(NVMLError("Unknown Error"))
    assert gpm.close() is None and "unreadable (NVMLError: Unknown Error)" in gpm.note
    assert broken.calls.count("free") == 2  # both samples freed all the same


def test_the_childs_gpm_reading_and_note_reach_the_record():
    samples = monitor.Samples()
    child = {"gpu_sm_active_pct": 61.0, "gpu_sample_note": "SM activity (GPM) not read on a MIG instance"}
    out = monitor.metrics(samples, child, gpu_named=True)
    assert "gpu_sm_active_pct" not in out  # the child's value stands
    assert out["gpu_sample_note"].startswith("SM activity (GPM) not read on a MIG instance")


def test_only_gpu_samples_inside_the_recorded_window_count():
    s = monitor.Sampler(os.getpid(), "gpu0", nvml=FakeNvml())
    s.measuring = True
    for _ in range(4):
        s.sample_once()
    assert len(s.samples.gpu_sample_times["gpu_util_pct"]) == 4
    # samples before the window opened (the parent sees its edges late), 0.7 s after it opened (NVML's utilisation
    # and power average the second before it: the idle device before the window), 1.5 s after, and after it closed
    times = [100.0, 101.2, 102.0, 103.0]
    s.samples.gpu_sample_times = {name: list(times) for name in s.samples.gpu_sample_times}
    s.samples.gpu_util_pct[:] = [5.0, 40.0, 90.0, 0.0]
    s.samples.gpu_power_w[:] = [60.0, 200.0, 300.0, 55.0]
    s.samples.gpu_mem_used_bytes[:] = [1e9, 2e9, 3e9, 4e9]
    window = {"window_start_unix": 100.5, "measured_s": 2.0}
    out = monitor.metrics(s.samples, window, gpu_named=True)
    assert out["gpu_util_pct"] == 90.0 and out["gpu_power_w"] == 300.0
    assert out["gpu_mem_used_bytes"] == 3e9  # an instantaneous reading counts from the window's first instant
    assert monitor.metrics(s.samples, {}, gpu_named=True)["gpu_util_pct"] == 135.0 / 4  # no window: every sample
    missed = {"window_start_unix": 110.0, "measured_s": 1.0}  # no sample inside it
    out = monitor.metrics(s.samples, missed, gpu_named=True)
    assert out["gpu_util_pct"] is None and "no GPU sample inside the measured window" in out["gpu_sample_note"]


def test_an_averaged_nvml_sample_counts_only_when_its_averaging_period_starts_inside_the_window():
    from harness.run.monitor.sampler import AVERAGED_OVER_S, sampled_within

    assert AVERAGED_OVER_S == {"gpu_util_pct": 1.0, "gpu_power_w": 1.0}
    times = [10.2, 10.9, 11.0, 11.6, 12.4, 12.6]  # a 2.5 s window opened at 10.0
    values = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert sampled_within(values, times, 10.0, 12.5, 1.0) == [3.0, 4.0, 5.0]  # 10.2 and 10.9 average from before 10
    assert sampled_within(values, times, 10.0, 12.5) == [1.0, 2.0, 3.0, 4.0, 5.0]  # instantaneous: the window alone


def test_the_parents_own_cpu_is_measured_over_the_window_it_saw():
    s = monitor.Sampler(os.getpid())
    wall = time.monotonic()
    s.window_opened()
    end = time.process_time() + 0.2
    while time.process_time() < end:  # the parent busy for 0.2 s of CPU, however long a busy machine takes
        pass
    s.window_closed()
    wall = time.monotonic() - wall
    busy = 100.0 * 0.2 / wall  # its share of the window, whatever the machine's load stretched the window to
    assert 0.9 * busy <= s.samples.parent_cpu_pct <= 100.0 * (os.cpu_count() or 1)
    assert monitor.metrics(s.samples, {})["parent_cpu_pct"] == s.samples.parent_cpu_pct
    idle = monitor.Sampler(os.getpid())
    idle.window_opened()
    time.sleep(0.3)  # asleep, as the parent is between polls: next to nothing
    idle.window_closed()
    assert 0.0 <= idle.samples.parent_cpu_pct < 20.0
    lost = monitor.Sampler(os.getpid())
    lost.window_opened()
    lost.window_lost()  # the close was not seen: no figure rather than one over the wrong span
    assert lost.samples.parent_cpu_pct is None and not lost.measuring


def test_a_child_seen_in_one_sample_only_is_no_loader_worker():
    # a helper caught between its fork and its exec (torch's import runs `ldconfig -p`) looks like a copy of the
    # measuring process for a moment: seen once, it is not counted as a worker; a worker lives through many samples
    samples = monitor.Samples(peak_host_rss_bytes=9e8, peak_main_rss_bytes=4.6e8,
                              peak_worker_rss_bytes={7: 1e8, 11: 4.6e8}, worker_samples={7: 12, 11: 1})
    out = monitor.metrics(samples, {})
    assert out["worker_rss_bytes"] == [1e8] and out["peak_worker_rss_bytes"] == 1e8


def test_a_window_too_short_for_the_cpu_clocks_ticks_has_no_other_cpu_share(monkeypatch):
    # on a quiet 2-CPU machine a 5,400 batches/s loader's window read "other processes 186%": rounding of 10 ms ticks
    from harness.run.monitor import cpu

    monkeypatch.setattr(cpu.psutil, "cpu_count", lambda: 2)
    monkeypatch.setattr(cpu, "TICKS_PER_S", 100)

    def share(wall_s, others_s):
        return cpu.other_cpu_percent(cpu.CpuClock(0.0, 0.0, 10.0), cpu.CpuClock(others_s + 0.5, 0.5, 10.0 + wall_s))

    assert share(0.027, 0.1) is None and share(0.24, 0.0) is None  # under 50 ticks of the two CPUs
    assert share(0.25, 0.05) == pytest.approx(10.0) and share(1.0, 0.2) == pytest.approx(10.0)
    assert share(2.0, -0.01) == 0.0  # the own tree's ticks read a little ahead of the machine's
