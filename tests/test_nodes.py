"""Several nodes (``nodes=M``): the rendezvous read from each scheduler's environment, the settings that describe it,
the per-node figures of the one record, a lost node named, topology in what makes runs comparable, the examples;
and (slow) two "nodes" as two harness processes on this machine."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from harness import config as config_mod
from harness.analysis.stats.noise_model import hardware_label
from harness.run.child import ranks
from harness.run.parent import env as env_mod
from harness.run.parent import launch, rendezvous
from harness.store import RunRecord, load_runs, write_record
from harness.sweeps import against
from tests.conftest import REPO, TINY_MODEL_ARGS, tiny_config
from tests.test_against import repo, run_check  # noqa: F401 (repo: a fixture)
from tests.test_regress import row_status, setup_check

# ------------------------------------------------------------------------------------------
# the rendezvous, from each scheduler's variables


@pytest.mark.parametrize("environ, want", [
    ({"PET_MASTER_ADDR": "10.0.0.1", "PET_MASTER_PORT": "29400", "PET_NODE_RANK": "1", "PET_NNODES": "2"},
     ("10.0.0.1", 29400, 1, "torchrun")),
    ({"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "gpu-[03-05,09]", "SLURM_NODEID": "1",
      "SLURM_JOB_NUM_NODES": "2"}, ("gpu-03", 20000 + 4242, 1, "slurm")),
    ({"MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456", "RANK": "1", "WORLD_SIZE": "2"},
     ("job-master-0", 23456, 1, "kubernetes")),
    ({"SKYPILOT_NODE_IPS": "172.31.0.5\n172.31.0.6\n", "SKYPILOT_NODE_RANK": "1", "SKYPILOT_NUM_NODES": "2"},
     ("172.31.0.5", rendezvous.DEFAULT_PORT, 1, "skypilot")),
])
def test_each_schedulers_environment_names_the_endpoint_and_this_nodes_rank(environ, want):
    meet = rendezvous.resolve(2, "", 0, None, environ)
    assert (meet.master_addr, meet.master_port, meet.node_rank, meet.source) == want
    assert meet.nodes == 2


def test_the_settings_override_the_environment_field_by_field():
    meet = rendezvous.resolve(2, "", 29999, 0, {"SLURM_JOB_ID": "7", "SLURM_NODELIST": "a1,a2", "SLURM_NODEID": "1"})
    assert (meet.master_addr, meet.master_port, meet.node_rank) == ("a1", 29999, 0)
    assert meet.source == "slurm and the settings"
    assert rendezvous.resolve(2, "127.0.0.1", 0, 1, {}).describe() == \
        "node 1 of 2, rendezvous at 127.0.0.1:29500 (from settings)"


@pytest.mark.parametrize("nodes, addr, rank, environ, message", [
    (2, "", None, {}, "nodes=2 needs dist.master_addr and dist.node_rank: give them"),
    (2, "h", None, {}, "nodes=2 needs dist.node_rank"),
    (3, "", None, {"SKYPILOT_NODE_IPS": "a\nb", "SKYPILOT_NODE_RANK": "0"}, "the skypilot environment has 2 nodes"),
    (2, "h", 5, {}, "node rank 5 (from settings) is not a node of nodes=2: use 0 to 1"),
    (2, "", None, {"PET_MASTER_ADDR": "h", "PET_NODE_RANK": "one"}, "node_rank='one' from the torchrun environment"),
])
def test_a_rendezvous_that_cannot_be_found_is_refused_naming_what_to_give(nodes, addr, rank, environ, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        rendezvous.resolve(nodes, addr, 0, rank, environ)


def test_the_first_host_of_a_slurm_node_list():
    assert rendezvous.first_host("node7") == "node7"
    assert rendezvous.first_host("gpu-[03-05,09],cpu1") == "gpu-03"
    assert rendezvous.first_host("rack1-[12,14]-ib") == "rack1-12-ib"


def test_one_node_has_no_rendezvous_and_hashes_as_before():
    cfg = tiny_config()
    assert rendezvous.of(cfg, {"SLURM_JOB_ID": "1"}) is None
    assert config_mod.config_hash(tiny_config(dist__master_addr="h", dist__master_port=1234)) == \
        config_mod.config_hash(cfg)  # where the nodes meet is not what they run
    assert config_mod.config_hash(tiny_config(nodes=2)) != config_mod.config_hash(cfg)


@pytest.mark.parametrize("overrides, message", [
    ({"nodes": 0}, "nodes=0 must be a positive number"),
    ({"nodes": 2, "dist__node_rank": 2}, r"dist.node_rank=2 is not a node of nodes=2: use 0 to 1"),
    ({"nodes": 2, "dist__master_port": 70000}, "dist.master_port=70000 is not a TCP port"),
    ({"nodes": 2, "measure__steps": "auto"}, "measure.steps=auto with devices=1 nodes=2 is not supported"),
    ({"nodes": 2, "debug__fault_rank": 2}, "debug.fault_rank=2 is not a rank of devices=1 nodes=2: use 0 to 1"),
])
def test_bad_node_settings_are_refused_before_anything_runs(overrides, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(**overrides)


def test_commands_of_many_runs_refuse_several_nodes_in_one_line():
    with pytest.raises(ValueError, match=r"nodes=2 is measured by `python -m harness run nodes=2 ...` or `python -m "
                                         r"harness sweep \+ladder=NAME nodes=2 ...` started on every node"):
        config_mod.validate_one_node(2, "sweep")
    config_mod.validate_one_node(1, "sweep")


# ------------------------------------------------------------------------------------------
# the one record: per node, per rank, the slowest named


def _summary(rate: float) -> dict:
    return {"samples_per_s": rate, "units_per_s": rate, "samples_per_step": 2, "step_ms_p50": 100.0,
            "step_ms_p90": 120.0, "measured_s": 2.0, "peak_main_rss_bytes": 1e9, "step_ms": [100.0]}


def test_each_nodes_throughput_is_its_slowest_rank_times_its_ranks():
    out = ranks.combine([_summary(r) for r in (10.0, 9.0, 12.0, 6.0)], "gloo", 1, devices=2,
                        hosts=["a", "a", "b", "b"])
    assert out["world_size"] == 4 and out["samples_per_s"] == 24.0 and out["slowest_rank"] == 3
    assert out["nodes"] == 2 and out["node_samples_per_s"] == [18.0, 12.0] and out["slowest_node"] == 1
    assert out["rank_hosts"] == "a,a,b,b"
    one = ranks.combine([_summary(10.0), _summary(8.0)], "gloo", 1, devices=2, hosts=["a", "a"])
    assert (one["nodes"], one["node_samples_per_s"], one["slowest_node"], one["rank_hosts"]) == (1, [], None, "")


def test_a_node_lost_mid_run_is_named_not_its_survivors_broken_connection():
    broken = {"status": "error", "error": "RuntimeError: [gloo] Connection closed by peer [127.0.0.1]:4211"}
    out = launch.root_failure({0: 1, 1: 1}, {0: broken, 1: broken}, nodes=2, devices=2)
    assert out["error"].startswith("node 1 stopped (its ranks 2-3 went away mid-run: node 0's ranks lost their "
                                   "connection to it)")
    three = launch.root_failure({2: 1}, {2: broken}, nodes=3, devices=1)
    assert three["error"].startswith("one of nodes 0, 1 stopped")
    own = {"status": "error", "error": "ValueError: bad batch"}  # a failure of its own is not a lost node
    assert launch.root_failure({0: 1}, {0: own}, nodes=2, devices=1)["error"].startswith("rank 0: ValueError")


# ------------------------------------------------------------------------------------------
# topology: what makes runs comparable


TOPO = """\tGPU0\tGPU1\tGPU2\tNIC0\tCPU Affinity
GPU0\t X \tNV18\tSYS\tPIX\t0-47
GPU1\tNV18\t X \tNV18\tSYS\t0-47
GPU2\tSYS\tNV18\t X \tSYS\t48-95
NIC0\tPIX\tSYS\tSYS\t X
"""


def test_the_gpu_links_are_read_from_nvidia_smis_matrix():
    assert env_mod.gpu_link_kinds(TOPO) == ["NV18", "SYS"]


def test_topology_keys_an_environment_apart_only_where_there_is_one(monkeypatch):
    for key in [k for k in os.environ if k.startswith("NCCL_") or k == "GLOO_SOCKET_IFNAME"]:
        monkeypatch.delenv(key)
    assert env_mod.topology("cpu", 0) == ""
    env = {"cpu_model": "x", "cpu_count": 2, "threads": "t"}
    plain = config_mod.env_key(env, "cpu")
    assert config_mod.env_key({**env, "topology": ""}, "cpu") == plain  # old keys hold
    monkeypatch.setenv("NCCL_ALGO", "Ring")
    assert env_mod.topology("cpu", 0) == "NCCL_ALGO=Ring"
    assert config_mod.env_key({**env, "topology": "NCCL_ALGO=Ring"}, "cpu") != plain
    row = {"device": "cuda", "gpu_name": "H100", "gpu_count": 8, "topology": "links NV18; nccl 2.21.5"}
    assert hardware_label(row) == "cuda 8x H100 [links NV18; nccl 2.21.5]"
    assert hardware_label(row, short=True) == "H100 x8"


def test_a_check_across_two_topologies_is_refused_as_not_comparable(tmp_path, capsys):
    setup_check(tmp_path, {"cfg-a": 100.0}, topology="NCCL_ALGO=Tree")
    code, rows = row_status(capsys, tmp_path)
    assert code == 2 and rows["cfg-a"]["status"] == "not comparable"


def test_check_against_refuses_a_sweep_measured_across_nodes_in_one_line(repo, monkeypatch, capsys):  # noqa: F811
    # check --against measures both sides here, on one node: a sweep of nodes=2 is another topology it cannot rerun
    cfg = config_mod.from_dict({"workload": "unet3d", "size": "smoke", "nodes": 2, "measure": {"steps": 5}})
    write_record(RunRecord(run_id="n0", status="ok", timestamp="2024-06-01T10:00:00+00:00", workload="unet3d",
                           device="cpu", config_hash="h", sweep_id="nodes-s1", ladder="scaling_nodes", rung=0,
                           samples_per_s=10.0, config_json=json.dumps(config_mod.record_dict(cfg)),
                           cpu_model="Test CPU", cpu_count=2), repo / "results")
    monkeypatch.setattr(against, "run_turn", lambda plan, turn: pytest.fail("a run started"))
    assert run_check("HEAD", "--sweep", "nodes-s1") == 2
    err = capsys.readouterr().err.strip()
    assert err == ("error: nodes=2 is measured by `python -m harness run nodes=2 ...` or `python -m harness sweep "
                   "+ladder=NAME nodes=2 ...` started on every node (docs/ddp.md, several nodes); `check --against` "
                   "runs on one node (nodes=1)"), err


# ------------------------------------------------------------------------------------------
# the examples: each one's command line is a `harness run` line the harness takes


EXAMPLES = REPO / "examples" / "nodes"


def _run_line(path: Path) -> list[str]:
    text = path.read_text()
    if path.suffix == ".yaml":
        yaml.safe_load(text)  # parses
    line = next(line for line in text.splitlines() if "python -m harness run" in line)
    words = shlex.split(line[line.index("python -m harness run"):].rstrip("\"'"))
    return words[4:]


@pytest.mark.parametrize("name", ["slurm_submitit.yaml", "skypilot.yaml", "kubernetes_trainjob.yaml"])
def test_each_example_parses_and_runs_a_valid_harness_run_line(name):
    settings = [w for w in _run_line(EXAMPLES / name) if "=" in w and not w.startswith("hydra")]
    assert any(w.startswith("nodes=") for w in settings)
    from harness.commands import hydra_edge

    plain = hydra_edge.plain_settings(hydra_edge.compose_settings(settings))
    cfg = config_mod.from_dict(plain)
    assert cfg.nodes == 2


# ------------------------------------------------------------------------------------------
# two nodes on this machine: two harness processes, gloo, one device each (slow: minutes on a busy 2-core CPU)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node(results: Path, port: int, rank: int, *extra: str) -> subprocess.Popen:
    args = [sys.executable, "-m", "harness", "run", f"results_dir={results}", "nodes=2", "devices=1",
            "dist.master_addr=127.0.0.1", f"dist.master_port={port}", f"dist.node_rank={rank}",
            "dist.rdzv_timeout_s=60", *TINY_MODEL_ARGS, "measure.warmup_steps=1", *extra]
    return subprocess.Popen(args, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="200"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _tree(pid: int) -> list[psutil.Process]:
    try:
        parent = psutil.Process(pid)
        return [parent, *parent.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


@pytest.mark.slow
def test_two_nodes_store_one_record_of_world_size_two_with_both_nodes_figures(tmp_path):
    port = _free_port()
    nodes = [_node(tmp_path / f"r{r}", port, r, "measure.steps=4") for r in (0, 1)]
    outs = [n.communicate(timeout=400)[0] for n in nodes]
    assert [n.returncode for n in nodes] == [0, 0], outs
    records = load_runs(tmp_path / "r0")
    assert len(records) == 1 and not list((tmp_path / "r1").rglob("*.parquet"))  # node 0 stores the one record
    rec = records.iloc[0]
    assert rec["status"] == "ok" and rec["world_size"] == 2 and rec["nodes"] == 2
    assert len(rec["node_samples_per_s"]) == 2 and rec["slowest_node"] in (0, 1)
    assert rec["rank_hosts"] == f"{socket.gethostname()},{socket.gethostname()}"
    assert "node 1 of 2, rendezvous at 127.0.0.1" in outs[1] and "node 0 (127.0.0.1) stores the record" in outs[1]


@pytest.mark.slow
def test_a_killed_node_ends_the_other_with_a_record_naming_it_and_no_process_left(tmp_path):
    port = _free_port()
    # steps enough that no machine ends the run before the kill (400 took 3.4 s on a quiet 2-core EPYC)
    survivor = _node(tmp_path / "r0", port, 0, "measure.steps=100000", "timeout_s=300")
    doomed = _node(tmp_path / "r1", port, 1, "measure.steps=100000", "timeout_s=300")
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not any("harness.run.child" in " ".join(p.cmdline())
                                                      for p in _tree(doomed.pid) if p.is_running()):
            time.sleep(0.5)
        time.sleep(20)  # the ranks have met and are stepping (the run would last minutes)
        procs = _tree(doomed.pid) + _tree(survivor.pid)
        os.killpg(doomed.pid, signal.SIGKILL)
        out = survivor.communicate(timeout=120)[0]
        assert survivor.returncode == 1, out
        rec = load_runs(tmp_path / "r0").iloc[0]
        assert rec["status"] == "error" and "node 1 stopped" in rec["error"], rec["error"]
        end = time.monotonic() + 30
        alive = procs
        while alive and time.monotonic() < end:
            alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
            time.sleep(0.2)
        assert alive == [], [p.pid for p in alive]
    finally:
        for proc in (survivor, doomed):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.slow
def test_a_node_that_never_comes_ends_the_run_at_the_rendezvous_timeout_naming_it(tmp_path):
    lonely = _node(tmp_path / "r0", _free_port(), 0, "measure.steps=3", "dist.rdzv_timeout_s=15")
    out = lonely.communicate(timeout=240)[0]
    assert lonely.returncode == 1, out
    rec = load_runs(tmp_path / "r0").iloc[0]
    assert rec["status"] == "error"
    assert "the rendezvous at 127.0.0.1" in rec["error"] and "dist.rdzv_timeout_s=15" in rec["error"]
    assert "1/2 clients joined" in rec["error"]
    assert _tree(lonely.pid) == []


# ------------------------------------------------------------------------------------------
# a sweep across two nodes on this machine: node 0 drives, node 1 follows (slow: a minute or two each)


def _sweep_node(results: Path, port: int, rank: int, log: Path, *extra: str) -> subprocess.Popen:
    args = [sys.executable, "-m", "harness", "sweep", "+ladder=scaling_nodes", f"results_dir={results}", "nodes=2",
            "devices=1", "dist.master_addr=127.0.0.1", f"dist.master_port={port}", f"dist.node_rank={rank}",
            "dist.rdzv_timeout_s=60", *TINY_MODEL_ARGS, "measure.warmup_steps=1", "sweep.repeats=1",
            "sweep.remeasure_busy=false", *extra]
    with open(log, "w") as out:
        return subprocess.Popen(args, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="200"),
                                stdout=out, stderr=subprocess.STDOUT, text=True, start_new_session=True)


@pytest.mark.slow
def test_a_sweep_across_two_nodes_runs_the_same_runs_and_stores_them_on_node_0_only(tmp_path):
    port = _free_port() + 100  # the channel at port, the runs at the ports after it
    logs = [tmp_path / f"node{r}.log" for r in (0, 1)]
    nodes_ = [_sweep_node(tmp_path / f"r{r}", port, r, logs[r], "measure.steps=3") for r in (0, 1)]
    try:
        codes = [n.wait(timeout=500) for n in nodes_]
    finally:
        for proc in nodes_:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    outs = [log.read_text() for log in logs]
    assert codes == [0, 0], outs
    records = load_runs(tmp_path / "r0").sort_values("rung")
    assert not list((tmp_path / "r1").rglob("*.parquet"))  # node 1 stores nothing
    assert list(records["status"]) == ["ok", "ok", "skipped", "skipped"], outs[0]
    assert list(records["world_size"])[:2] == [1, 2] and records["nodes"].iloc[1] == 2
    assert "nodes=4 needs 4 nodes; this sweep spans nodes=2" in records["error"].iloc[2]
    assert "on nodes 0-0; node 1 waits" in outs[1] and "rung 1, round 1 (nodes=2, devices=1): ok" in outs[1]
    assert "node 0's sweep ended; nothing of it is stored here" in outs[1]
    assert "| E(N) |" in outs[0]


@pytest.mark.slow
def test_a_follower_that_loses_node_0_ends_in_one_line_and_leaves_no_process(tmp_path):
    port = _free_port() + 100
    logs = [tmp_path / f"node{r}.log" for r in (0, 1)]
    driver = _sweep_node(tmp_path / "r0", port, 0, logs[0], "measure.steps=400", "timeout_s=300")
    follower = _sweep_node(tmp_path / "r1", port, 1, logs[1], "measure.steps=400", "timeout_s=300")
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and "node 1 waits" not in logs[1].read_text():
            time.sleep(0.5)  # node 0 measures rung 0 (one node) and node 1 waits for the next run
        procs = _tree(follower.pid) + _tree(driver.pid)
        os.killpg(driver.pid, signal.SIGKILL)
        lost = time.monotonic()
        assert follower.wait(timeout=90) == 1
        assert time.monotonic() - lost < 60  # within dist.rdzv_timeout_s
        out = logs[1].read_text()
        assert f"error: node 0's sweep at 127.0.0.1:{port} cannot be reached" in out, out
        assert "node 0 stopped or cannot be reached; node 1 stops here (it stores nothing)" in out
        assert "frame #" not in out and "[c10d]" not in out, out  # the harness's one line, not torch's C++ frames
        end = time.monotonic() + 30
        alive = procs
        while alive and time.monotonic() < end:
            alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
            time.sleep(0.2)
        assert alive == [], [p.pid for p in alive]
    finally:
        for proc in (driver, follower):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.slow
def test_node_0_ends_the_sweep_when_a_follower_is_gone_keeping_what_it_measured(tmp_path):
    port = _free_port() + 100
    logs = [tmp_path / f"node{r}.log" for r in (0, 1)]
    quick = ("measure.steps=20", "dist.rdzv_timeout_s=10")
    driver = _sweep_node(tmp_path / "r0", port, 0, logs[0], *quick)
    follower = _sweep_node(tmp_path / "r1", port, 1, logs[1], *quick)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and "node 1 waits" not in logs[1].read_text():
            time.sleep(0.2)  # node 1 took rung 0 (one node): node 0 measures it
        os.killpg(follower.pid, signal.SIGKILL)
        procs = _tree(driver.pid)
        assert driver.wait(timeout=240) == 1
        out = logs[0].read_text()
        assert "stop: node 1 did not take the next run within 30 s (dist.rdzv_timeout_s=10)" in out, out
        records = load_runs(tmp_path / "r0")
        assert list(records["rung"]) == [0] and records["status"].iloc[0] == "ok"  # what it measured is kept
        assert [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == []
    finally:
        for proc in (driver, follower):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
