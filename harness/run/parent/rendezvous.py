"""Where the nodes of a run of ``nodes`` >= 2 meet: the rendezvous endpoint and this node's rank.

Every scheduler ends in the same step: one launcher per node, pointed at one endpoint (the first node's address and
a port) and told which node it is. Each writes that down in its own environment variables; this module reads
whichever is present, in this order, and lets the settings (``dist.master_addr``, ``dist.master_port``,
``dist.node_rank``) override any field:

  * torchrun's own (``PET_MASTER_ADDR``, ``PET_MASTER_PORT``, ``PET_NODE_RANK``, ``PET_NNODES``: its flags as
    variables, which Kubernetes' TrainJob sets too);
  * SkyPilot (``SKYPILOT_NODE_IPS``, one address a line, the first the head; ``SKYPILOT_NODE_RANK``,
    ``SKYPILOT_NUM_NODES``);
  * SLURM (``SLURM_JOB_NODELIST``'s first host, ``SLURM_NODEID``, ``SLURM_JOB_NUM_NODES``; the port derived from
    ``SLURM_JOB_ID``, so that every node of one job picks the same one, as submitit does);
  * Kubernetes' PyTorchJob (``MASTER_ADDR``, ``MASTER_PORT``, ``RANK`` and ``WORLD_SIZE`` counting pods).

Torch-free and pure (``environ`` is a mapping): the parent resolves it before anything runs, so a node that cannot
find its peers says so in one line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

DEFAULT_PORT = 29500  # torchrun's


@dataclass(frozen=True)
class Rendezvous:
    master_addr: str
    master_port: int
    node_rank: int
    nodes: int
    source: str  # where it was read: "settings", "torchrun", "skypilot", "slurm", "kubernetes"

    @property
    def endpoint(self) -> str:
        return f"{self.master_addr}:{self.master_port}"

    def describe(self) -> str:
        return f"node {self.node_rank} of {self.nodes}, rendezvous at {self.endpoint} (from {self.source})"


def _torchrun(env: Mapping[str, str]) -> dict:
    return {"master_addr": env.get("PET_MASTER_ADDR"), "master_port": env.get("PET_MASTER_PORT"),
            "node_rank": env.get("PET_NODE_RANK"), "nodes": env.get("PET_NNODES")}


def _skypilot(env: Mapping[str, str]) -> dict:
    ips = [ip.strip() for ip in env.get("SKYPILOT_NODE_IPS", "").splitlines() if ip.strip()]
    return {"master_addr": ips[0] if ips else None, "master_port": None,
            "node_rank": env.get("SKYPILOT_NODE_RANK"), "nodes": env.get("SKYPILOT_NUM_NODES") or len(ips) or None}


def _slurm(env: Mapping[str, str]) -> dict:
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
    job = env.get("SLURM_JOB_ID", "")
    return {"master_addr": first_host(nodelist) if nodelist else None,
            "master_port": 20000 + int(job) % 20000 if job.isdigit() else None,
            "node_rank": env.get("SLURM_NODEID"), "nodes": env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES")}


def _kubernetes(env: Mapping[str, str]) -> dict:
    return {"master_addr": env.get("MASTER_ADDR"), "master_port": env.get("MASTER_PORT"),
            "node_rank": env.get("RANK"), "nodes": env.get("WORLD_SIZE")}


SOURCES = (("torchrun", "PET_MASTER_ADDR", _torchrun), ("skypilot", "SKYPILOT_NODE_IPS", _skypilot),
           ("slurm", "SLURM_JOB_ID", _slurm), ("kubernetes", "MASTER_ADDR", _kubernetes))


def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list (``gpu-[03-05,09],cpu1`` -> ``gpu-03``), as ``scontrol show
    hostnames`` would list it first."""
    match = re.match(r"([^,\[]*)(?:\[([^\]]*)\])?([^,]*)", nodelist.strip())
    prefix, ranges, suffix = match.groups() if match else (nodelist, None, "")
    if not ranges:
        return prefix + suffix
    return prefix + ranges.split(",")[0].split("-")[0] + suffix


def resolve(nodes: int, master_addr: str, master_port: int, node_rank: int | None,
            environ: Mapping[str, str]) -> Rendezvous:
    """The rendezvous of this node: the settings' fields where given, the rest from the first scheduler whose
    variables are present (none read when the settings give every field: a sweep across nodes writes each run's
    out, and a rung on fewer nodes than the job's is no contradiction). ValueError names what is missing or
    contradicts, and where each can be given."""
    source, found = "settings", {}
    for name, marker, read in SOURCES:
        if environ.get(marker) and not (master_addr and master_port and node_rank is not None):
            source, found = name, read(environ)
            break
    addr = master_addr or found.get("master_addr") or ""
    port = master_port or _int(found.get("master_port"), "master_port", source) or DEFAULT_PORT
    rank = node_rank if node_rank is not None else _int(found.get("node_rank"), "node_rank", source)
    seen_nodes = _int(found.get("nodes"), "nodes", source)
    if seen_nodes is not None and seen_nodes != nodes:
        raise ValueError(f"nodes={nodes} but the {source} environment has {seen_nodes} nodes: give nodes={seen_nodes}")
    missing = [f"dist.{key}" for key, value in (("master_addr", addr), ("node_rank", rank)) if value in ("", None)]
    if missing:
        raise ValueError(f"nodes={nodes} needs {' and '.join(missing)}: give them (dist.master_addr=HOST "
                         "dist.master_port=PORT dist.node_rank=R), or run under torchrun, SLURM, Kubernetes or "
                         "SkyPilot, whose variables name them (docs/ddp.md, several nodes)")
    if not 0 <= rank < nodes:
        raise ValueError(f"node rank {rank} (from {source}) is not a node of nodes={nodes}: use 0 to {nodes - 1}")
    given = bool(master_addr or master_port or node_rank is not None)
    label = source if not (given and found) else f"{source} and the settings"
    return Rendezvous(addr, int(port), int(rank), nodes, label)


def of(cfg, environ: Mapping[str, str]) -> Rendezvous | None:
    """The rendezvous of a run's settings (a RunConfig) on this node; None for a run on one node."""
    if cfg.nodes <= 1:
        return None
    return resolve(cfg.nodes, cfg.dist.master_addr, cfg.dist.master_port, cfg.dist.node_rank, environ)


def _int(value, name: str, source: str) -> int | None:
    if value in (None, ""):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}={value!r} from the {source} environment is not a whole number") from None
