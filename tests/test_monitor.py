"""The background sampler keeps going when NVML fails, and finds the GPU it should (fake NVML, no GPU)."""

import time
from types import SimpleNamespace

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


def test_all_metrics_sampled_when_nvml_works():
    s = monitor.Sampler(0.01, "gpu0", nvml=FakeNvml())
    s.measuring.set()
    s.sample_once()
    assert s.samples.gpu_util_pct == [87.0] and s.samples.gpu_mem_used_bytes == [5 * 2**30]
    assert s.samples.gpu_power_w == [250.0] and s.samples.notes == []


def test_a_failing_metric_becomes_none_and_the_others_and_host_memory_go_on():
    nvml = FakeNvml(fail={"util", "mem"})
    s = monitor.Sampler(0.01, "gpu0", nvml=nvml)
    host_reads = []
    real = s._proc

    class CountingProcess:  # counts host-memory reads, so the test sees them go on after the NVML failures
        def memory_info(self):
            host_reads.append(len(nvml.calls))
            return real.memory_info()

        def children(self, recursive=False):
            return real.children(recursive=recursive)

    s._proc = CountingProcess()
    s.measuring.set()
    s.start()
    deadline = time.monotonic() + 5
    while len(s.samples.gpu_power_w) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert s.is_alive()  # the thread survived the failing calls
    samples = s.stop()
    assert sum(1 for n in host_reads if n >= 3) >= 2  # host memory read again after util and mem had failed
    assert samples.peak_main_rss_bytes > 0 and samples.peak_host_rss_bytes > 0
    assert samples.gpu_util_pct == [] and samples.gpu_mem_used_bytes == []
    assert len(samples.gpu_power_w) >= 3
    assert any(n.startswith("gpu_util_pct: GPU utilisation unreadable (NVMLError") for n in samples.notes)
    assert any(n.startswith("gpu_mem_used_bytes: device memory used unreadable") for n in samples.notes)
    assert nvml.calls.count("util") == 1  # a failed metric is not asked again every interval


def test_an_unexpected_error_does_not_kill_the_thread():
    s = monitor.Sampler(0.01, "gpu0", nvml=FakeNvml())
    s.measuring.set()

    def broken():
        raise OSError("GPU has fallen off the bus")

    s._sample_gpu = broken
    s.start()
    time.sleep(0.1)
    assert s.is_alive()
    samples = s.stop()
    assert samples.peak_host_rss_bytes > 0 and any("fallen off the bus" in n for n in samples.notes)


def test_mig_instance_skips_utilisation_and_power_with_a_note():
    nvml = FakeNvml()
    s = monitor.Sampler(0.01, monitor.GpuHandle("mig-1", mig=True, how="uuid"), nvml=nvml)
    s.measuring.set()
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
    s = monitor.Sampler(0.01, monitor.GpuHandle(None, note="NVML: no handle"), nvml=FakeNvml())
    s.measuring.set()
    s.sample_once()
    assert s.samples.gpu_mem_used_bytes == [] and s.samples.notes == ["NVML: no handle"]
    assert s.samples.peak_host_rss_bytes > 0
