"""``python -m harness machine`` and the fitness warning of sweeps and checks: each finding from a faked sysfs,
psutil and NVML (no root, no GPU needed), and the command's output and exit code."""

from __future__ import annotations

import types

from harness.analysis.stats.speedup import BUSY_PCT
from harness.commands import machine as machine_cmd
from harness.run.monitor import fitness


def sysfs(tmp_path, governors: list[str], boost: str | None = None):
    for cpu, name in enumerate(governors):
        folder = tmp_path / f"cpu{cpu}" / "cpufreq"
        folder.mkdir(parents=True)
        (folder / "scaling_governor").write_text(name + "\n")
    if boost is not None:
        (tmp_path / "cpufreq").mkdir(exist_ok=True)
        (tmp_path / "cpufreq" / "boost").write_text(boost + "\n")
    return tmp_path


def test_the_governor_is_fit_only_at_performance_and_says_the_fix(tmp_path):
    root = sysfs(tmp_path, ["performance", "powersave", "powersave"], boost="1")
    found = fitness.governor(root, cpus=[0, 1, 2])
    assert not found.fit and found.state.startswith("performance, powersave on 2 of 3 CPUs")
    assert found.fix == "sudo cpupower frequency-set --governor performance"
    assert fitness.governor(root, cpus=[0]).fit
    boost = fitness.boost(root)
    assert not boost.fit and boost.fix == "echo 0 | sudo tee /sys/devices/system/cpu/cpufreq/boost"
    empty = fitness.governor(tmp_path / "none", cpus=[0])
    assert empty.fit and "not exposed here" in empty.state


def test_other_processes_beyond_the_busy_rule_are_unfit_and_named(monkeypatch):
    assert fitness.OTHER_LOAD_PCT == BUSY_PCT  # one threshold: a machine this busy makes every run 'busy'
    hog = types.SimpleNamespace(pid=4242, info={"name": "trainer"}, cpu_percent=lambda interval=None: 180.0)
    monkeypatch.setattr(fitness.psutil, "process_iter", lambda attrs=None: [hog])
    monkeypatch.setattr(fitness.psutil, "cpu_percent", lambda interval=None: 45.0)
    found = fitness.other_load(window_s=0.0)
    assert not found.fit and found.state == "45% of the CPUs busy with other work: trainer (pid 4242, 180% of a CPU)"
    line = fitness.warning_line([fitness.host(), found])
    assert line == ("warning: this machine is not fit to measure: other processes 45% of the CPUs busy with other "
                    "work (`python -m harness machine` says how to fix each)")
    monkeypatch.setattr(fitness.psutil, "cpu_percent", lambda interval=None: 3.0)
    assert fitness.other_load(window_s=0.0).fit and fitness.warning_line([fitness.other_load(0.0)]) == ""


def fake_nvml(persistence: int, reasons: int, processes: int):
    return types.SimpleNamespace(
        NVML_CLOCK_SM=1, nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: i, nvmlDeviceGetPersistenceMode=lambda h: persistence,
        nvmlDeviceGetApplicationsClock=lambda h, c: 1755, nvmlDeviceGetMaxClockInfo=lambda h, c: 1980,
        nvmlDeviceGetClockInfo=lambda h, c: 1410, nvmlDeviceGetCurrentClocksEventReasons=lambda h: reasons,
        nvmlDeviceGetComputeRunningProcesses=lambda h: [types.SimpleNamespace(pid=77)] * processes)


def test_a_gpu_without_persistence_braked_and_shared_is_unfit(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "pynvml", fake_nvml(persistence=0, reasons=0x1 | 0x20,
                                                                        processes=1))
    found = {f.name: f for f in fitness.gpus()}
    assert not found["GPU 0 persistence"].fit and found["GPU 0 persistence"].fix == "sudo nvidia-smi -i 0 -pm 1"
    assert found["GPU 0 clocks"].fit and "SM 1410 MHz now, application clock 1755 MHz, max 1980 MHz" in \
        found["GPU 0 clocks"].state
    assert not found["GPU 0 clock brake"].fit and "0x20" in found["GPU 0 clock brake"].state
    assert not found["GPU 0 processes"].fit and "pids 77" in found["GPU 0 processes"].state
    monkeypatch.setitem(__import__("sys").modules, "pynvml", fake_nvml(persistence=1, reasons=0x1, processes=0))
    assert all(f.fit for f in fitness.gpus())


def test_the_command_prints_each_finding_with_its_fix_and_exits_1_when_unfit(monkeypatch, capsys):
    unfit = fitness.Finding("CPU governor", "powersave on 2 of 2 CPUs", False, "sudo cpupower frequency-set "
                            "--governor performance")
    monkeypatch.setattr(fitness, "survey", lambda window_s: [fitness.Finding("host", "Test CPU, 2 of 2 CPUs"), unfit])
    assert machine_cmd.main("machine", []) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("ok   host") and out[1].startswith("FIX  CPU governor  powersave on 2 of 2 CPUs")
    assert out[2].strip() == "fix: sudo cpupower frequency-set --governor performance"
    assert out[-1] == "1 thing(s) to fix before measuring"
    monkeypatch.setattr(fitness, "survey", lambda window_s: [fitness.Finding("host", "Test CPU")])
    assert machine_cmd.main("machine", []) == 0 and capsys.readouterr().out.endswith("fit to measure\n")
    assert machine_cmd.main("machine", ["--window-s", "0"]) == 2
    assert "--window-s 0: seconds between 0 and 60" in capsys.readouterr().err


def test_the_cpus_bf16_units_are_named_and_their_absence_is_said_without_making_the_machine_unfit(tmp_path,
                                                                                                   monkeypatch):
    info = tmp_path / "cpuinfo"
    monkeypatch.setattr(fitness, "CPUINFO", info)
    info.write_text("model name\t: Test CPU\nflags\t\t: fpu sse2 avx2 fma\n")
    emulated = fitness.bf16()
    assert emulated.fit and emulated.state.startswith("emulated: no AVX512-BF16 / AMX-BF16 units, so bf16 runs")
    info.write_text("model name\t: Test CPU\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16\n")
    assert fitness.bf16().state == "in hardware (avx512_bf16 amx_bf16)"
    monkeypatch.setattr(fitness, "CPUINFO", tmp_path / "absent")
    assert fitness.bf16().state.startswith("unknown")
    assert fitness.warning_line([emulated]) == ""  # a fact to know, not a fault to fix
