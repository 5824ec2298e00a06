"""A sweep across nodes: node 0 drives (its engine, its cache), every other node runs exactly the runs it is told,
in order, and stops when told; a node that leaves or stops answering ends the sweep; a node that loses node 0 ends
in one line. The protocol runs here over an in-memory channel (no torch), and once over torch's TCPStore; the two
harness processes of a real sweep are in ``test_nodes.py`` (slow)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import threading

import pytest

from harness import config as config_mod
from harness.run.parent.rendezvous import Rendezvous
from harness.session import engine
from harness.sweeps import nodes
from harness.workload import applicability
from tests.conftest import tiny_config


class FakeChannel:
    """``nodes.Channel`` over a dict shared by the nodes of one test (``broken``: node 0 is gone)."""

    def __init__(self, shared: dict, rank: int, span: int = 2, timeout_s: float = 2.0):
        self.shared, self.timeout_s = shared, timeout_s
        self.meet = Rendezvous("127.0.0.1", 29500, rank, span, "settings")

    def _up(self):
        if self.shared.get("broken"):
            raise nodes.Lost("node 0's sweep at 127.0.0.1:29500 cannot be reached (DistNetworkError: closed)")

    def set(self, key, value):
        self._up()
        self.shared[key] = value

    def get(self, key):
        self._up()
        return self.shared[key]

    def has(self, key):
        self._up()
        return key in self.shared


HELLO = nodes.hello("scaling_nodes", ["nodes=2", "dist.node_rank=0", "results_dir=r0", "sweep.repeats=1"])


def _cfg(rung: int, nodes_: int = 2):
    return tiny_config(nodes=nodes_, sweep__rung=rung, dist__master_addr="127.0.0.1",
                       dist__master_port=29501 + rung, dist__node_rank=0)


def test_each_turn_meets_at_a_port_of_its_own_and_a_node_outside_a_smaller_run_sits_it_out():
    assert [nodes.run_port(29500, rung, round_, 3) for round_ in (0, 1) for rung in (0, 1, 2)] == \
        [29501, 29502, 29503, 29504, 29505, 29506]
    values = {"nodes": 2, "dist.master_port": 29500, "dist.node_rank": 1}
    assert nodes.turn_dist(values, 1, 0, 4) == {"dist.master_port": 29502, "dist.node_rank": 1}
    assert nodes.turn_dist({**values, "nodes": 1}, 0, 0, 4)["dist.node_rank"] is None  # a one-node rung
    assert nodes.turn_dist({"nodes": 1, "dist.master_port": 0, "dist.node_rank": None}, 0, 0, 4) == {}
    assert nodes.hello("l", ["a=1", "dist.node_rank=1", "results_dir=x"]) == nodes.hello("l", ["a=1", "results_dir=y"])


def test_a_rung_on_more_nodes_than_the_sweep_spans_is_skipped_naming_both():
    cfg = tiny_config(nodes=4, dist__node_rank=0)
    assert applicability.too_many_nodes(cfg, 2) == ("nodes=4 needs 4 nodes; this sweep spans nodes=2 (start it with "
                                                    "nodes=4 on 4 nodes to measure this rung)")
    assert applicability.skip_reason(cfg) == "" and applicability.too_many_nodes(cfg, 4) == ""


def test_the_follower_runs_exactly_the_runs_node_0_tells_in_order_with_its_own_rank_and_stops_when_told():
    shared: dict = {}
    driver = nodes.Driver(FakeChannel(shared, 0))
    shared["hello"] = HELLO
    ran, said = [], []
    follower = threading.Thread(target=lambda: ran.append(nodes.follow(
        FakeChannel(shared, 1), HELLO, lambda run: ran.append((run.cfg.sweep.rung, run.cfg.dist.node_rank,
                                                                run.cfg.dist.master_port, run.takes_part)),
        said.append)))
    follower.start()
    driver.before_launch(_cfg(0, nodes_=1))  # a one-node rung: told (so a gone node is seen), sat out
    driver.before_launch(_cfg(2))
    driver.before_launch(tiny_config(nodes=4, dist__node_rank=0))  # past the span: skipped here, told to nobody
    assert driver.end(3) == ""
    follower.join(timeout=10)
    assert ran == [(0, 1, 29501, False), (2, 1, 29503, True), 3]
    assert said[-1].startswith("node 0's sweep ended; nothing of it is stored here")


def test_a_follower_whose_sweep_differs_leaves_and_node_0_stops_before_its_next_run():
    shared: dict = {"hello": HELLO}
    other = nodes.hello("scaling", ["nodes=2"])
    with pytest.raises(ValueError, match=r"node 1's sweep \(nodes=2, \+ladder=scaling\) is not node 0's"):
        nodes.follow(FakeChannel(shared, 1), other, lambda run: None, print)
    driver = nodes.Driver(FakeChannel(shared, 0))
    with pytest.raises(engine.Stop, match=r"stop: node 1 left the sweep \(node 1's sweep .* is not node 0's"):
        driver.before_launch(_cfg(1))
    assert driver.stopped and driver.end(0) == ""  # a node gone is not waited on again


def test_a_node_that_never_takes_a_run_ends_the_sweep_within_the_timeout():
    driver = nodes.Driver(FakeChannel({}, 0, span=3, timeout_s=0.2))
    with pytest.raises(engine.Stop, match=r"stop: nodes 1, 2 did not take the next run within 0.6 s "
                                          r"\(dist.rdzv_timeout_s=0.2\): stopped, or never started"):
        driver.before_launch(_cfg(1))
    assert driver.stopped and "nodes 1, 2 did not take the end within 0.2 s" in driver.end(1)


def test_a_follower_that_loses_node_0_raises_lost_in_one_line():
    shared = {"hello": HELLO, "broken": True}
    with pytest.raises(nodes.Lost, match=r"^node 0's sweep at 127.0.0.1:29500 cannot be reached"):
        nodes.follow(FakeChannel(shared, 1), HELLO, lambda run: None, print)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_channel_is_torchs_tcpstore_and_a_closed_one_is_lost():
    port = _free_port()
    server = nodes.Channel(Rendezvous("127.0.0.1", port, 0, 2, "settings"), 5)
    client = nodes.Channel(Rendezvous("127.0.0.1", port, 1, 2, "settings"), 5)
    server.set("turn/0", {"kind": "end", "code": 0})
    assert client.has("turn/0") and client.get("turn/0") == {"kind": "end", "code": 0} and not client.has("x")
    # a key set is seen by the other node when set returns (torch's own set answers nothing: ~15-30% of 300 unseen)
    assert all(server.set(f"ack/1/{k}", {}) or client.has(f"ack/1/{k}") for k in range(300))
    del server  # node 0's process gone: its store closes
    with pytest.raises(nodes.Lost, match=f"node 0's sweep at 127.0.0.1:{port} cannot be reached"):
        for _ in range(50):
            client.has("turn/1")
    nobody = _free_port()
    with pytest.raises(nodes.Lost, match=f"127.0.0.1:{nobody} cannot be reached"):
        nodes.Channel(Rendezvous("127.0.0.1", nobody, 1, 2, "settings"), 0.5)


LOSE_NODE_0 = textwrap.dedent("""
    import os, socket
    from harness.run.parent.rendezvous import Rendezvous
    from harness.sweeps import nodes
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = nodes.Channel(Rendezvous("127.0.0.1", port, 0, 2, "settings"), 5)
    client = nodes.Channel(Rendezvous("127.0.0.1", port, 1, 2, "settings"), 5)
    del server
    try:
        for _ in range(50):
            client.has("turn/1")
    except nodes.Lost as exc:
        print("lost:", exc)
    try:  # never reached: torch logs its connect timeouts as errors, with frames
        nodes.Channel(Rendezvous("127.0.0.1", port, 1, 2, "settings"), 0.5)
    except nodes.Lost as exc:
        print("unreached:", exc)
    print("level after:", os.environ.get("TORCH_CPP_LOG_LEVEL"))
""")


@pytest.mark.parametrize("level", [None, "INFO"])
def test_a_lost_node_0_prints_no_cpp_frames_and_the_runs_keep_torchs_level(level):
    env = {k: v for k, v in os.environ.items() if k != "TORCH_CPP_LOG_LEVEL"} | ({"TORCH_CPP_LOG_LEVEL": level}
                                                                               if level else {})
    done = subprocess.run([sys.executable, "-c", LOSE_NODE_0], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert "lost: node 0's sweep at 127.0.0.1:" in done.stdout and "cannot be reached" in done.stdout
    assert "unreached: node 0's sweep at 127.0.0.1:" in done.stdout
    assert f"level after: {level}" in done.stdout  # put back: the runs this process starts keep torch's default
    if level is None:
        assert "frame #" not in done.stderr and "[c10d]" not in done.stderr, done.stderr
    else:  # a level the user set is theirs: torch's warning is shown as they asked
        assert "[c10d]" in done.stderr


def test_a_config_travels_whole_to_the_follower():
    cfg = _cfg(1)
    again = config_mod.from_dict(config_mod.to_dict(cfg))
    assert config_mod.config_hash(again) == config_mod.config_hash(cfg) and again.dist == cfg.dist


def test_a_sweep_across_nodes_that_cannot_find_its_peers_is_refused_in_one_line(tmp_path, capsys):
    from harness.commands import sweep

    assert sweep.main("sweep", ["+ladder=scaling_nodes", "nodes=2", f"results_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: nodes=2 needs dist.master_addr and dist.node_rank: give them") and "\n" not in err
    assert sweep.main("sweep", ["-m", "+ladder=scaling_nodes", "nodes=2", f"results_dir={tmp_path}"]) == 2
    assert "`sweep -m` runs on one node (nodes=1)" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # nothing ran, nothing stored
