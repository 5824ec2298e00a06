"""devices=N: data-parallel runs launched by torch's launcher, one record from rank 0, no process left behind.

The fast checks (settings, the record's arithmetic, the failure that caused the others, E(N)) run no process;
the end-to-end ones start 2 gloo ranks on this CPU (a device is a process), ~20-40 s each on 2 busy cores.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from harness import config as config_mod
from harness.analysis.views import render
from harness.analysis.views import table as table_mod
from harness.run.parent import launch, processes, runner
from harness.run.parent import env as env_mod
from harness.run.parent import watch as child_watch
from harness.run import monitor
from harness.run.child import ranks
from harness.store import RunRecord, load_runs, write_record
from harness.workload import applicability
from tests.conftest import tiny_config, tiny_model_config
from tests.test_faults import TINY_RUN, _gone, _measuring_processes, _start_parent

# ------------------------------------------------------------------------------------------
# settings


def test_single_device_config_hashes_are_what_they_were_before_devices_existed():
    # computed by the code before DDP settings existed (commit 6698d18): stored caches and baselines stay valid
    assert config_mod.config_hash(tiny_config()) == "1c8d59cd6db787fc"
    assert config_mod.config_hash(tiny_config(workload="resnet50", precision="bf16-mixed")) == "b31edf66e6b2caae"
    assert config_mod.config_hash(tiny_config(data__num_workers=2, batch_size=4)) == "5d587d782f5e89a9"
    # scaling does not act on one device, so it does not change the hash there
    assert config_mod.config_hash(tiny_config(scaling="strong")) == "1c8d59cd6db787fc"
    assert config_mod.config_hash(tiny_config(devices=2)) != "1c8d59cd6db787fc"


@pytest.mark.parametrize("key,value,message", [
    ("devices", 0, "devices=0 must be a positive number"),
    ("ddp.comm_hook", "fp8", "unknown ddp.comm_hook 'fp8'.* Valid choices: bf16, fp16, none"),
    ("scaling", "linear", "unknown scaling 'linear'.* Valid choices: strong, weak"),
    ("ddp.bucket_cap_mb", -1, "ddp.bucket_cap_mb=-1.0 must be a positive number"),
    ("debug.fault_rank", 1, "debug.fault_rank=1 is not a rank of devices=1: use 0 to 0"),
])
def test_bad_device_settings_are_refused_naming_the_value_and_the_choices(key, value, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(**{key.replace(".", "__"): value})


def test_ddp_knobs_on_one_device_are_skipped_with_the_reason():
    reason = applicability.not_applicable(tiny_config(ddp__static_graph=True, ddp__comm_hook="fp16"))
    assert reason == ("ddp.static_graph=true needs devices >= 2 (a setting of DistributedDataParallel); "
                      "ddp.comm_hook=fp16 needs devices >= 2 (a setting of DistributedDataParallel)")
    assert applicability.not_applicable(tiny_config(devices=2, ddp__static_graph=True)) == ""


def test_weak_scaling_keeps_the_batch_per_device_strong_scaling_splits_it():
    assert config_mod.per_device_batch(tiny_config(devices=2, batch_size=4)) == 4
    assert config_mod.per_device_batch(tiny_config(devices=2, batch_size=4, scaling="strong")) == 2
    reason = applicability.not_applicable(tiny_config(devices=4, batch_size=6, scaling="strong"))
    assert "scaling=strong splits batch_size=6 over devices=4, which does not divide it" in reason


def test_more_devices_than_the_machine_has_is_a_reason_to_skip():
    assert applicability.too_many_devices(tiny_config(devices=2), have=2) == ""
    assert applicability.too_many_devices(tiny_config(devices=4), have=2) == (
        "devices=4 needs 4 devices; this machine has 2 usable CPU core(s) (on a CPU a device is a process)")
    assert applicability.too_many_devices(tiny_config(devices=1), have=0) == ""
    assert applicability.skip_reason(tiny_config(devices=4), have_devices=2).startswith("devices=4 needs 4 devices")


def test_each_rank_gets_its_share_of_the_cores_unless_the_environment_says(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert [launch.omp_threads(n, cpus=8) for n in (1, 2, 4, 8, 16)] == [8, 4, 2, 1, 1]
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert launch.omp_threads(2, cpus=8) == 3


# ------------------------------------------------------------------------------------------
# the record: the slowest rank sets the throughput


def _summary(rate: float, p50: float, vram: float | None = None, own_s: float = 1.0) -> dict:
    return {"samples_per_s": rate, "units_per_s": rate * 10, "samples_per_step": 4, "step_ms_p50": p50,
            "step_ms_p90": p50 + 40.0, "measured_s": 2.0, "peak_vram_bytes": vram, "peak_main_rss_bytes": 1e9,
            "loss_first": 7.0, "loss_last": 6.0, "step_ms": [p50] * 3, "other_cpu_pct": 50.0,
            "cpu_window": {"busy_s": 2.2, "own_s": own_s, "wall_s": 1.0, "cpus": 4}}


def test_rank_0s_record_takes_the_slowest_rank_and_every_ranks_summary():
    out = ranks.combine([_summary(10.0, 400.0, 2e9), _summary(8.0, 500.0, 3e9)], "gloo", 1)
    assert out["samples_per_s"] == 16.0 and out["samples_per_s_per_device"] == 8.0 and out["slowest_rank"] == 1
    assert out["units_per_s"] == 160.0 and out["samples_per_step"] == 8 and out["world_size"] == 2
    assert out["step_ms"] == [500.0] * 3 and out["step_ms_p50"] == 500.0
    assert out["rank_step_ms_p50"] == [400.0, 500.0] and out["rank_step_ms_p90"] == [440.0, 540.0]
    assert out["rank_peak_vram_bytes"] == [2e9, 3e9] and out["peak_vram_bytes"] == 3e9
    assert out["peak_host_rss_bytes"] == 2e9 and out["peak_main_rss_bytes"] == 1e9
    assert (out["dist_backend"], out["omp_num_threads"]) == ("gloo", 1) and "cpu_window" not in out
    # the machine was 2.2 of 4 CPUs busy for 1 s, 2.0 of them the two ranks: 5% others, not each rank's 50%
    assert out["other_cpu_pct"] == pytest.approx(5.0)


def test_the_failure_reported_is_the_one_that_caused_the_others():
    broken = {"status": "error", "error": "RuntimeError: Connection closed by peer"}
    crashed = launch.root_failure({1: -signal.SIGKILL, 0: 1}, {0: broken, 1: None})
    assert crashed["status"] == "error"
    assert crashed["error"].startswith("rank 1 was killed by signal SIGKILL without writing a result")
    assert "rank 0 exited with code 1" in crashed["error"]
    # the launcher's SIGTERM to the survivors is an effect, not the cause, even on a lower rank
    stopped = launch.root_failure({0: -signal.SIGTERM, 1: -signal.SIGKILL}, {0: None, 1: None})
    assert stopped["error"].startswith("rank 1 was killed by signal SIGKILL without writing a result")
    oom = launch.root_failure({0: 1, 1: 1}, {0: broken, 1: {"status": "oom", "error": "CUDA out of memory"}})
    assert oom["status"] == "oom" and oom["error"].startswith("rank 1: CUDA out of memory")
    assert launch.root_failure({}, {0: None})["status"] == "error"


# ------------------------------------------------------------------------------------------
# the table: E(N) on rungs that change devices


def _rung(results, rung: int, change: str, rate: float, world: int, status: str = "ok") -> None:
    write_record(RunRecord(run_id=f"r{rung}", status=status, timestamp=f"2026-01-01T00:00:0{rung}+0000",
                           sweep_id="s", ladder="scaling", rung=rung, change=change, workload="unet3d", size="smoke",
                           device="cpu", cpu_model="test CPU", cpu_count=2,
                           samples_per_s=rate if status == "ok" else None, world_size=world,
                           step_ms=[100.0] * 5, error="" if status == "ok" else "devices=4 needs 4 devices"), results)


def test_the_table_shows_scaling_efficiency_on_rungs_that_change_devices(results):
    _rung(results, 0, "", 10.0, 1)
    _rung(results, 1, "devices=2", 18.0, 2)
    _rung(results, 2, "devices=4", 0.0, 4, status="skipped")
    table = table_mod.build_table(load_runs(results), "s")
    assert [r.scaling_efficiency for r in table.rows] == [None, pytest.approx(0.9), None]
    text = render.to_markdown(table)
    assert "| x previous [95% band] | compute x previous | E(N) | step ms p50/p90 |" in text
    assert "| 1 | devices=2 | 18.00" in text and "| 90% |" in text
    assert "E(N) = X(N) / (N x X(1))" in text
    assert "E(N)" in render.to_csv(table).splitlines()[0]


def test_e_n_across_nodes_is_over_the_one_node_rung_with_its_band(results):
    # two devices a node: the one-node rung runs 2 ranks, nodes=2 runs 4; N = 4 / 2 = 2 (not the 4 ranks)
    rates = {0: [20.0, 21.0, 19.5], 1: [36.0, 37.5, 35.0]}
    for rung, (change, world) in enumerate((("", 2), ("nodes=2", 4))):
        for round_, rate in enumerate(rates[rung]):
            write_record(RunRecord(run_id=f"r{rung}{round_}", status="ok", sweep_id="s", ladder="scaling_nodes",
                                   timestamp=f"2026-01-01T00:0{round_}:0{rung}+0000", rung=rung, round=round_,
                                   change=change, workload="unet3d", size="smoke", device="cpu", cpu_model="test CPU",
                                   cpu_count=2, samples_per_s=rate, world_size=world, step_ms=[100.0] * 5), results)
    row = table_mod.build_table(load_runs(results), "s").rows[1]
    want = math.exp(sum(math.log(b / a) for a, b in zip(rates[0], rates[1])) / 3) / 2  # the model's, rounds out
    assert row.scaling_efficiency == pytest.approx(want) and 0.85 < want < 0.9
    low, high = row.scaling_band
    assert low < want < high and high - low < 0.15
    text = render.to_markdown(table_mod.build_table(load_runs(results), "s"))
    assert f"| {100 * want:.0f}% [{100 * low:.0f}-{100 * high:.0f}%] |" in text


def test_tables_without_device_rungs_keep_their_columns(results):
    _rung(results, 0, "", 10.0, 1)
    _rung(results, 1, "precision=bf16-mixed", 12.0, 1)
    text = render.to_markdown(table_mod.build_table(load_runs(results), "s"))
    assert "| E(N) |" not in text and "| x previous [95% band] | compute x previous | step ms p50/p90 |" in text


def test_the_parent_samples_every_ranks_gpu(tmp_path, monkeypatch):
    from tests.test_monitor import FakeNvml

    monkeypatch.setattr(monitor, "nvml_handle_for", lambda identity: monitor.GpuHandle(identity["uuid"], how="uuid"))
    watch = child_watch.Watch(monitor.Sampler(os.getpid(), nvml=FakeNvml()), 0.5)
    path = tmp_path / "progress.json"
    ranks_gpus = [{"uuid": "GPU-0"}, {"uuid": "GPU-1"}]
    for phase, extra in [("warmup", {"gpu": ranks_gpus[0], "gpus": ranks_gpus}), ("measure", {})]:
        path.write_text(json.dumps({"phase": phase, **extra}))
        watch.read_progress(path)
        watch.sample_if_due(now=1e9)
    sampler = watch.sampler
    assert sampler.gpu.handle == "GPU-0" and [g.handle for g in sampler.other_gpus] == ["GPU-1"]
    assert sampler.samples.gpu_util_pct == [87.0, 87.0] and len(sampler.samples.gpu_power_w) == 2


# ------------------------------------------------------------------------------------------
# the kill reaches every rank


def test_killing_a_run_reaches_processes_in_sessions_of_their_own():
    """torch's launcher starts each rank with start_new_session: killing the launcher's group alone misses them."""
    rank = "import time; time.sleep(600)"
    launcher = (f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {rank!r}], "
                "start_new_session=True); time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", launcher], start_new_session=True)
    try:
        end = time.monotonic() + 60
        while not _in_own_session(proc.pid) and time.monotonic() < end:  # forked, then setsid
            time.sleep(0.05)
        tree = [psutil.Process(proc.pid)] + psutil.Process(proc.pid).children(recursive=True)
        assert len(tree) == 2 and _in_own_session(proc.pid)
        processes.kill_group(proc)
        assert _gone(tree, within_s=1) == []  # _kill_group returns once every member is gone
    finally:
        for p in psutil.Process(proc.pid).children(recursive=True) if proc.poll() is None else []:
            p.kill()
        proc.kill()


def _in_own_session(pid: int) -> bool:
    try:
        return any(os.getpgid(k.pid) == k.pid for k in psutil.Process(pid).children())
    except (ProcessLookupError, psutil.Error):
        return False


# ------------------------------------------------------------------------------------------
# end to end: 2 gloo ranks on this CPU

two_cpus = pytest.mark.skipif(config_mod.usable_cpus() < 2, reason="needs 2 usable CPU cores (2 ranks)")


class _Watch(threading.Thread):
    """Collects, while a run goes on, every process of this test's tree (launcher, ranks, loader workers), with
    the command line it had: a process killed since has none to read."""

    def __init__(self):
        super().__init__(daemon=True)
        self.seen: dict[int, tuple[psutil.Process, str, int]] = {}
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            for p in psutil.Process().children(recursive=True):
                try:  # read again while it lives: between fork and exec a rank has the launcher's command line
                    cmd, ppid = " ".join(p.cmdline()), p.ppid()
                except psutil.Error:
                    continue
                if cmd:  # a zombie's is empty
                    self.seen[p.pid] = (self.seen.get(p.pid, (p,))[0], cmd, ppid)
            time.sleep(0.1)

    def ranks(self) -> int:
        """Children of the launcher (a loader worker, forked by a rank, has the rank's command line too)."""
        launchers = {pid for pid, (_p, cmd, _pp) in self.seen.items() if "harness.run.parent.launch" in cmd}
        return sum("harness.run.child" in cmd and ppid in launchers for _p, cmd, ppid in self.seen.values())


def _run(results, **overrides) -> tuple[RunRecord, list[psutil.Process], int]:
    """The record of a real run (of the tiny model: the ranks' processes are tested, not a model), the processes seen
    under this test while it ran, and how many were ranks."""
    cfg = tiny_model_config(results_dir=str(results), **overrides)
    env, key = env_mod.environment(cfg.device)
    watch = _Watch()
    watch.start()
    try:
        record = runner.run_and_store(cfg, env, key)
    finally:
        watch.stop.set()
        watch.join()
    return record, [p for p, _cmd, _ppid in watch.seen.values()], watch.ranks()


@two_cpus
def test_two_ranks_store_one_record_with_every_ranks_fields(results):
    record, procs, seen_ranks = _run(results, devices=2, batch_size=2)
    assert record.status == "ok", record.error
    assert seen_ranks == 2
    stored = load_runs(results)
    assert len(stored) == 1 and stored["world_size"].iloc[0] == 2  # one record, written by rank 0
    assert record.world_size == 2 and record.dist_backend == "gloo"
    assert record.samples_per_step == 4  # 2 per device (weak scaling) x 2 devices
    assert record.samples_per_s == pytest.approx(2 * record.samples_per_s_per_device)
    assert record.slowest_rank in (0, 1) and len(record.rank_step_ms_p50) == len(record.rank_measured_s) == 2
    assert record.step_ms_p50 == record.rank_step_ms_p50[record.slowest_rank]
    assert len(record.step_ms) == 3 and record.rank_peak_vram_bytes == [] and record.peak_vram_bytes is None
    assert record.omp_num_threads == launch.omp_threads(2)
    # the parent sampled the ranks from outside: the main peak is a rank's, the host total holds both and the launcher
    assert record.peak_main_rss_bytes > 100e6 and record.peak_host_rss_bytes > 2 * 100e6
    assert _gone(procs) == []


@pytest.mark.slow  # a whole scenario in fresh processes: the default tier keeps its cheaper siblings
@two_cpus
def test_a_crash_on_one_rank_is_an_error_naming_it_and_leaves_no_process(results):
    record, procs, seen_ranks = _run(results, devices=2, debug__fault="crash", debug__fault_rank=1,
                                     debug__fault_step=1)
    assert record.status == "error" and seen_ranks == 2
    assert "rank 1 was killed by signal SIGKILL" in record.error, record.error
    assert _gone(procs, within_s=1) == []  # the parent waited for every member before it returned
    assert list(load_runs(results)["status"]) == ["error"]


@pytest.mark.slow  # a minute: the timeout must leave the ranks time to start on a busy machine
@two_cpus
def test_a_hang_on_one_rank_times_out_and_every_rank_is_killed(results):
    record, procs, seen_ranks = _run(results, devices=2, debug__fault="hang", debug__fault_rank=1,
                                     debug__fault_step=1, data__num_workers=1, timeout_s=60)
    assert record.status == "timeout" and "timeout_s=60" in record.error
    assert seen_ranks == 2 and len(procs) >= 5  # launcher, 2 ranks, a loader worker each
    assert _gone(procs, within_s=1) == []  # the parent waited for every member before it returned


@pytest.mark.slow  # a whole scenario in fresh processes: the default tier keeps its cheaper siblings
@two_cpus
def test_a_parent_killed_outright_leaves_no_rank_behind(results):
    parent = _start_parent(results, "devices=2", "debug.fault=hang", "debug.fault_step=1", "timeout_s=300",
                           "data.num_workers=1", *TINY_RUN)
    try:
        procs = _measuring_processes(parent.pid, want_workers=2, ranks=2)
        os.kill(parent.pid, signal.SIGKILL)
        parent.communicate(timeout=60)
        assert _gone(procs) == [], f"left running: {[p.pid for p in procs]}"
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)


# ------------------------------------------------------------------------------------------
# gradient accumulation under DDP: one all-reduce a step


def _count_allreduces(rank: int, init_file: str, out_dir: str, accum: int, skip_sync: bool) -> None:
    """One of 2 gloo ranks: the measured loop's steps on a small DDP model whose comm hook counts the
    all-reduces; the count goes to ``out_dir/rank<R>.txt``."""
    import contextlib
    import functools

    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel

    from harness.config import DebugConfig
    from harness.run.child import faults, measure
    from harness.run.child.stopping import StoppingRule
    from harness.run.child.summary import Measurement
    from harness.workload.knobs import Prepared

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)))
    calls = []

    def counting(state, bucket):
        calls.append(bucket.index())
        return default_hooks.allreduce_hook(state, bucket)

    model.register_comm_hook(None, counting)
    cpu = torch.device("cpu")
    prep = Prepared(model=model, loss_fn=nn.CrossEntropyLoss(), optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                    autocast=contextlib.nullcontext, scaler=None, device=cpu, memory_format=torch.contiguous_format,
                    checkpointed_units=0, backend_flags={})
    batch = (torch.randn(4, 8), torch.randint(0, 2, (4,)))
    me = ranks.Rank(rank=rank, world_size=2, backend="gloo")
    loop = measure.Loop(device=cpu, rank=me, prep=prep, loader=None, batches=iter(lambda: batch, None),
                        memory_format=torch.contiguous_format, move=True, non_blocking=False, accum=accum,
                        set_to_none=True, log_every=50, warmup=0, rule=StoppingRule(steps=3),
                        faults=faults.plan(DebugConfig(), rank), after_step=None, mark_step=None,
                        m=Measurement(samples_per_step=4 * accum),
                        no_sync=measure.grad_sync_skipper(model, me, accum) if skip_sync else None,
                        zero_grad=functools.partial(prep.optimizer.zero_grad, set_to_none=True))
    measure._steps(loop, measured=True)
    with open(os.path.join(out_dir, f"rank{rank}.txt"), "w") as f:
        f.write(json.dumps({"calls": len(calls), "steps": len(loop.m.step_ms)}))
    dist.barrier()  # neither rank tears gloo down while the other still talks to it (an abort at exit otherwise)
    dist.destroy_process_group()
    # end as the harness's own runs end (child.exit_now): gloo's worker threads can still be torn down during the
    # interpreter's finalization, which aborts the process now and then (SIGABRT, "terminate called without an
    # active exception") after its work is done and written
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@pytest.mark.slow  # a whole scenario in fresh processes: the default tier keeps its cheaper siblings
@two_cpus
def test_accumulating_ranks_all_reduce_once_a_step_not_once_a_micro_batch(tmp_path):
    import torch.multiprocessing as mp

    counts = {}
    for skip_sync in (True, False):
        out = tmp_path / str(skip_sync)
        out.mkdir()
        mp.spawn(_count_allreduces, args=(str(tmp_path / f"init-{skip_sync}"), str(out), 4, skip_sync), nprocs=2)
        counts[skip_sync] = [json.loads((out / f"rank{r}.txt").read_text()) for r in range(2)]
    # 3 steps of 4 micro-batches, one gradient bucket: the loop's no_sync leaves one all-reduce a step
    assert counts[True] == [{"calls": 3, "steps": 3}] * 2
    assert counts[False] == [{"calls": 12, "steps": 3}] * 2  # without it, one a micro-batch


def _agree(rank: int, init_file: str, out_dir: str) -> None:
    """One of 2 gloo ranks asking ``any_rank`` until neither wants more: rank 0 wants 3 more steps, rank 1 one."""
    import torch.distributed as dist

    from harness.run.child.ranks import any_rank

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    me, wants, steps = ranks.Rank(rank=rank, world_size=2, backend="gloo"), (3, 1)[rank], 0
    while any_rank(me, steps < wants):
        steps += 1
    with open(os.path.join(out_dir, f"rank{rank}.txt"), "w") as f:
        f.write(str(steps))
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # as in _count_allreduces: no gloo teardown at the interpreter's exit


@two_cpus
def test_ranks_take_one_more_warmup_step_while_any_of_them_asks_so_their_steps_stay_paired(tmp_path):
    import torch.multiprocessing as mp

    from harness.run.child.ranks import any_rank

    mp.spawn(_agree, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=2)
    assert [(tmp_path / f"rank{r}.txt").read_text() for r in range(2)] == ["3", "3"]  # both as many as the most
    assert any_rank(ranks.Rank(), True) and not any_rank(ranks.Rank(), False)  # one rank: its own say


def test_steps_auto_is_refused_on_several_devices_before_anything_runs():
    with pytest.raises(ValueError, match=r"measure.steps=auto with devices=2 is not supported: each rank would close "
                                         r"its window at its own step"):
        tiny_config(devices=2, measure__steps="auto")
    assert tiny_config(devices=2, measure__warmup_steps="auto").measure.warmup_steps == "auto"  # agreed per step


def test_no_sync_is_asked_for_only_on_several_ranks_with_accumulation():
    from torch import nn

    from harness.run.child.measure import grad_sync_skipper

    model = nn.Linear(2, 2)
    model.no_sync = lambda: None  # as DistributedDataParallel has it
    assert grad_sync_skipper(model, ranks.Rank(rank=0, world_size=2), 4) is model.no_sync
    assert grad_sync_skipper(model, ranks.Rank(), 4) is None  # one rank: nothing to all-reduce
    assert grad_sync_skipper(model, ranks.Rank(rank=0, world_size=2), 1) is None  # every micro-batch is a step
