"""A sweep across nodes (``nodes`` >= 2): node 0 drives, every other node follows, so all run the same runs in order.

Every node is started with the same ``sweep`` command (its own ``dist.node_rank``). Node 0 runs the sweep as on one
node: its session engine decides each turn, its cache included (a rung copied from its store, or skipped, is never
run anywhere). Before each run it measures, it tells the other nodes that run's settings over a channel of its own:
torch's ``TCPStore``, served by node 0 at ``dist.master_port``; each run meets at a port derived from its turn
(``run_port``: one of the ``RUN_PORTS`` ports after it), so no run meets a rendezvous left by another. The other
nodes read their cache never: each runs exactly the run it is told (its own node rank put in), stores nothing, and
stops when told. Node 0 waits for every node to take a run before it starts its own part: a node that left (it
says why where it can) or never answers within ``dist.rdzv_timeout_s`` ends the sweep there (``engine.Stop``), so
no run waits for a node that is gone. A node that loses node 0 (its process gone: the channel closes; stopped: the
channel times out) ends with one line.

Keys of the channel: ``hello`` (the sweep's ladder and command, which every node checks against its own),
``turn/K`` (the K-th message: a run's settings, or the end with node 0's exit code), ``ack/N/K`` (node N took
message K), ``left/N`` (node N stopped on its own, and why).
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Callable

from harness import config as config_mod
from harness.run.parent.rendezvous import Rendezvous
from harness.session import engine
from harness.workload import applicability

RUN_PORTS = 32  # the runs of a sweep meet at dist.master_port + 1 .. + RUN_PORTS
POLL_S = 0.2
TAKE_TIMEOUTS = 3  # node 0 waits this many dist.rdzv_timeout_s for a node to take a run: a node whose last run
# failed waits up to one for its lost peers (the process group's timeout), and its launcher then ends its ranks
INTERRUPTED_WAIT_S = 5.0  # an interrupted node 0 waits this long at most for the others to take the end


class Lost(Exception):
    """Node 0's channel cannot be reached: node 0 stopped, or never started."""


def run_port(base: int, rung: int, round_: int, rungs: int) -> int:
    """The port turn (``rung``, ``round_``) meets at: a fresh one for each turn of a round and the next."""
    return base + 1 + (round_ * rungs + rung) % RUN_PORTS


def turn_dist(values: dict, rung: int, round_: int, rungs: int) -> dict:
    """Where one turn's run meets, from its flat settings ``values`` (the sweep's rendezvous written out by
    ``with_rendezvous``, the rung's ``nodes``): its own port; on fewer nodes than this one's rank, no rank here
    (this node sits the run out). {} on one node."""
    port, rank = int(values.get("dist.master_port") or 0), values.get("dist.node_rank")
    if not port or rank is None:
        return {}
    takes_part = int(values.get("nodes", 1)) > max(int(rank), 1)
    return {"dist.master_port": run_port(port, rung, round_, rungs), "dist.node_rank": rank if takes_part else None}


def with_rendezvous(settings: dict, meet: Rendezvous) -> dict:
    """The sweep's settings with its rendezvous written out (every run's, whatever the environment says)."""
    dist = {**(settings.get("dist") or {}), "master_addr": meet.master_addr, "master_port": meet.master_port,
            "node_rank": meet.node_rank}
    return {**settings, "dist": dist}


def hello(ladder: str, overrides) -> dict:
    """What every node's sweep must share: the ladder and the command line but for where the node is and where it
    would store (the others store nothing)."""
    return {"ladder": ladder, "command": sorted(o for o in overrides
                                                if not o.lstrip("+").startswith(("dist.", "results_dir=")))}


def _tcpstore():
    """torch's ``TCPStore``, imported (torch only for a sweep across nodes, once its plan is checked) with torch's C++
    messages off in this process where torch is not loaded yet: a node 0 lost or never reached would otherwise print
    c10d's warnings and errors with their C++ stack frames before this node's one line, which says the same (the runs
    start in processes of their own). The level is read once, at torch's import; the variable is put back at once,
    so the runs this process starts keep torch's default (and a level the user set stays)."""
    set_here = "torch" not in sys.modules and "TORCH_CPP_LOG_LEVEL" not in os.environ
    if set_here:
        os.environ["TORCH_CPP_LOG_LEVEL"] = "FATAL"
    try:
        from torch.distributed import TCPStore
    finally:
        if set_here:
            os.environ.pop("TORCH_CPP_LOG_LEVEL", None)
    return TCPStore


class Channel:
    """The coordination store: served by node 0 at the rendezvous's port, joined by the others (``Lost`` when it
    cannot be reached within ``timeout_s``)."""

    def __init__(self, meet: Rendezvous, timeout_s: float):
        TCPStore = _tcpstore()
        self.meet, self.timeout_s = meet, float(timeout_s)
        try:
            self.store = TCPStore(meet.master_addr, meet.master_port, None, meet.node_rank == 0,
                                  timedelta(seconds=self.timeout_s), wait_for_workers=False)
        except Exception as exc:  # torch's DistError (a RuntimeError): no server, or a port taken
            raise self.lost(exc) from None

    def lost(self, exc: Exception) -> Lost:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return Lost(f"node 0's sweep at {self.meet.endpoint} cannot be reached ({type(exc).__name__}: {first})")

    def set(self, key: str, value: dict) -> None:
        """Store ``key``; on return every node sees it (torch's ``set`` answers nothing, so a ``check`` on the same
        connection, served in order after it, waits until the store holds it)."""
        self._call(self.store.set, key, json.dumps(value))
        self._call(self.store.check, [key])

    def get(self, key: str) -> dict:
        return json.loads(self._call(self.store.get, key))

    def has(self, key: str) -> bool:
        return bool(self._call(self.store.check, [key]))

    def _call(self, op, *args):
        try:
            return op(*args)
        except Exception as exc:
            raise self.lost(exc) from None


class Driver:
    """Node 0's side, a listener of its sweep: before each run it measures (not one copied or skipped), the other
    nodes are told its settings, and it starts once each of them has taken it (else ``engine.Stop``); ``end`` tells
    them the sweep is over."""

    def __init__(self, channel: Channel, cap_workers_at_cpus: bool = False):
        self.channel, self.cap = channel, cap_workers_at_cpus
        self.others = list(range(1, channel.meet.nodes))
        self.told = 0
        self.stopped = False  # a node left or stopped answering: the sweep ended early (its exit code is 1)

    def on(self, event) -> None:  # a listener: it acts only before a run (``before_launch``)
        return None

    def before_launch(self, cfg: config_mod.RunConfig) -> None:
        if applicability.skip_reason(cfg, self.cap, have_nodes=self.channel.meet.nodes):
            return  # recorded as skipped here; nothing runs anywhere
        label = f"rung {cfg.sweep.rung}, round {cfg.sweep.round + 1} (nodes={cfg.nodes}, devices={cfg.devices})"
        missing = self._tell({"kind": "run", "label": label, "config": config_mod.to_dict(cfg)},
                             TAKE_TIMEOUTS * self.channel.timeout_s)
        if missing:
            self.stopped = True
            raise engine.Stop(f"stop: {missing}; the sweep ends here, before {label} (its records so far are "
                              "stored)")

    def end(self, code: int, text: str = "", interrupted: bool = False) -> str:
        """Tell the other nodes the sweep is over (they exit with ``code``), waiting up to dist.rdzv_timeout_s for
        them to take it (``interrupted``: a few seconds); what did not take it ("" if all did)."""
        wait = min(INTERRUPTED_WAIT_S, self.channel.timeout_s) if interrupted else self.channel.timeout_s
        try:
            return self._tell({"kind": "end", "code": int(code), "text": text}, wait)
        except Lost as exc:
            return str(exc)

    def _tell(self, message: dict, wait_s: float) -> str:
        """Message K to every other node; "" once each took it, else which did not (and why, where it said)."""
        key, self.told = self.told, self.told + 1
        self.channel.set(f"turn/{key}", message)
        waiting, deadline = list(self.others), time.monotonic() + wait_s
        while waiting:
            left = [n for n in waiting if self.channel.has(f"left/{n}")]
            if left:
                self.others = [n for n in self.others if n not in left]  # told once; never waited on again
                return "; ".join(f"node {n} left the sweep ({self.channel.get(f'left/{n}')['why']})" for n in left)
            waiting = [n for n in waiting if not self.channel.has(f"ack/{n}/{key}")]
            if waiting and time.monotonic() > deadline:
                names = ("node " if len(waiting) == 1 else "nodes ") + ", ".join(map(str, waiting))
                return (f"{names} did not take {'the end' if message['kind'] == 'end' else 'the next run'} "
                        f"within {wait_s:g} s (dist.rdzv_timeout_s={self.channel.timeout_s:g}): stopped, or never "
                        "started (start the same sweep on every node)")
            if waiting:
                time.sleep(POLL_S)
        return ""


@dataclass(frozen=True)
class Run:
    """A run a following node is told: its settings with this node's rank, and what to call it."""

    cfg: config_mod.RunConfig
    label: str
    takes_part: bool  # this node is one of the run's nodes (a run on fewer nodes runs on nodes 0..N-1)


def follow(channel: Channel, mine: dict, run: Callable[[Run], object], say: Callable[[str], object]) -> int:
    """Node N's side: check the sweep is node 0's (``mine``: this node's ``hello``), then run each run it is told,
    in order, until the end; node 0's exit code. 2 when the sweeps differ; ``Lost`` when node 0 goes away."""
    node = channel.meet.node_rank
    theirs = channel.get("hello")  # waits for node 0 up to the channel's timeout
    if theirs != mine:
        why = (f"node {node}'s sweep ({' '.join(mine['command'])}, +ladder={mine['ladder']}) is not node 0's "
               f"({' '.join(theirs['command'])}, +ladder={theirs['ladder']}): start the same command on every node")
        channel.set(f"left/{node}", {"why": why})
        raise ValueError(why)
    say(f"node {node} of {channel.meet.nodes}: following node 0's sweep at {channel.meet.endpoint}")
    key = 0
    while True:
        while not channel.has(f"turn/{key}"):
            time.sleep(POLL_S)
        message = channel.get(f"turn/{key}")
        channel.set(f"ack/{node}/{key}", {})
        if message["kind"] == "end":
            say(f"node 0's sweep ended{': ' + message['text'] if message.get('text') else ''}; nothing of it is "
                "stored here (node 0 stores the records)")
            return int(message["code"])
        cfg = config_mod.from_dict(message["config"])
        cfg.dist.node_rank = node  # the run as node 0 resolved it, with this node's rank
        run(Run(cfg, message["label"], node < cfg.nodes))
        key += 1


def leave(channel: Channel | None, why: str) -> None:
    """Tell node 0 this node stops on its own (a refusal here, an interrupt), where the channel still answers."""
    if channel is None:
        return
    try:
        channel.set(f"left/{channel.meet.node_rank}", {"why": why})
    except Lost:
        pass
