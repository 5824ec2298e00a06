"""Multi-device runs (``devices`` >= 2): the ranks are started by torch's own launcher, never retried.

``python -m harness.run.parent.launch JOB_DIR`` is the process the parent starts in place of ``harness.run.child``.
It is torchrun's agent (``torch.distributed.launcher.api.elastic_launch``, what ``torchrun --standalone
--nproc-per-node N`` runs) inside a process tied to the parent like the child is, and it starts one
``harness.run.child`` per device:

  * restarts off (``max_restarts=0``): a rank that crashes ends the run as ``error``, naming the rank and how it
    ended; the agent stops the other ranks (they would wait in the next all-reduce for ever);
  * ``OMP_NUM_THREADS`` set explicitly (torchrun forces 1 when it is unset): the usable CPUs shared out between
    the ranks, unless the environment already sets it; the value goes into the record;
  * no orphan: the agent dies with the parent (``PR_SET_PDEATHSIG``) and carries the child's deadline; every rank
    dies with the agent the same way. torch starts each rank in a session of its own, so killing the agent's
    process group does not reach them: the parent kills the whole process tree (``processes.kill_group``).

Rank 0 writes ``result.json`` when the run measured; a rank that fails writes ``result.rank<R>.json`` and exits
non-zero, and the agent then writes the run's ``result.json`` from what the ranks left (``root_failure``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from harness import config as config_mod
from harness.run.child.outcome import DIAGNOSED
from harness.lifeline import guard_child

RANK_RESULT = "result.rank{rank}.json"


def omp_threads(devices: int, cpus: int | None = None) -> int:
    """Threads per rank: the usable CPUs shared out (an explicit OMP_NUM_THREADS in the environment wins)."""
    given = os.environ.get("OMP_NUM_THREADS", "")
    if given.isdigit() and int(given) > 0:
        return int(given)
    return max(1, (cpus or config_mod.usable_cpus()) // devices)


def command(job: Path) -> list[str]:
    """What the parent starts for a run of ``devices`` >= 2 or ``nodes`` >= 2."""
    return [sys.executable, "-m", "harness.run.parent.launch", str(job)]


def main(job_dir: str) -> int:
    guard_child()  # the agent dies with the parent, and has the same deadline as a child
    job = Path(job_dir)
    cfg = config_mod.from_dict(json.loads((job / "config.json").read_text()))
    meet = _read(job / RENDEZVOUS)
    threads = omp_threads(cfg.devices)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ["HARNESS_PARENT_PID"] = str(os.getpid())  # each rank checks that it was started by this agent
    first = (meet or {}).get("node_rank", 0) * cfg.devices  # this node's first global rank
    if meet is not None:
        os.environ["HARNESS_PEER_TIMEOUT_S"] = str(cfg.dist.rdzv_timeout_s)  # ranks.PEER_TIMEOUT_VAR (torch-free here)
    try:
        failures = _launch(job, cfg, meet)
    except Exception as exc:  # the rendezvous: a node that never came, an endpoint that cannot be reached
        if not _rendezvous_failed(exc):
            raise
        (job / "result.json").write_text(json.dumps({"status": "error", "error": _rendezvous_error(exc, meet, cfg)}))
        return 0
    if (job / "result.json").exists():
        return 0
    ranks = range(first, first + cfg.devices)
    result = root_failure(failures, {r: _read(job / RANK_RESULT.format(rank=r)) for r in ranks},
                          nodes=cfg.nodes, devices=cfg.devices)
    (job / "result.json").write_text(json.dumps(result))
    return 0


RENDEZVOUS = "rendezvous.json"  # the parent's resolved rendezvous (nodes >= 2), in the job folder


def _launch(job: Path, cfg, meet: dict | None) -> dict[int, int]:
    """Run the ranks to their end; returns the exit code of every rank that failed (negative: killed by a signal).

    One node: torchrun --standalone. Several: torchrun's static rendezvous (``--master-addr --master-port
    --node-rank``): node ranks are the given ones, so global rank 0, which writes the record, is on node 0."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    where = dict(rdzv_backend="c10d", rdzv_endpoint="localhost:0", run_id=job.name)  # torchrun --standalone
    if meet is not None:
        where = dict(rdzv_backend="static", rdzv_endpoint=f"{meet['master_addr']}:{meet['master_port']}",
                     run_id=f"harness-{meet['master_port']}",  # the same on every node
                     rdzv_configs={"rank": meet["node_rank"], "timeout": cfg.dist.rdzv_timeout_s})
    launch = LaunchConfig(
        min_nodes=cfg.nodes, max_nodes=cfg.nodes, nproc_per_node=cfg.devices, **where,
        max_restarts=0,  # a failed rank is the run's outcome, never retried silently
        monitor_interval=0.1,
        logs_specs=DefaultLogsSpecs(log_dir=str(job / "elastic")),  # in the job folder: removed with it
    )
    try:
        elastic_launch(launch, sys.executable)("-m", "harness.run.child", str(job))
    except ChildFailedError as exc:
        return {int(rank): int(f.exitcode) for rank, f in exc.failures.items()}
    return {}


def _rendezvous_failed(exc: Exception) -> bool:
    from torch.distributed import DistError
    from torch.distributed.elastic.rendezvous import RendezvousError

    return isinstance(exc, (RendezvousError, DistError, TimeoutError, ConnectionError))


def _rendezvous_error(exc: Exception, meet: dict | None, cfg) -> str:
    where = f"{meet['master_addr']}:{meet['master_port']}" if meet else "localhost"
    node = f"node {meet['node_rank']}" if meet else "this node"
    return (f"the rendezvous at {where} did not complete: {node} waited up to dist.rdzv_timeout_s="
            f"{cfg.dist.rdzv_timeout_s:g} for all nodes={cfg.nodes} to join ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}); start the harness on every node with the same "
            "dist.master_addr and dist.master_port, node 0 first reachable from the others")


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def root_failure(exits: dict[int, int], results: dict[int, dict | None], nodes: int = 1, devices: int = 1) -> dict:
    """The run's result when no rank measured: the rank whose failure caused the others'.

    A rank that diagnosed itself (skipped, oom, nan) comes first; then a rank killed by a signal (its peers then
    fail on the broken connection); then, on several nodes, a connection lost to another node (the node is named);
    then the first rank that wrote an error; else the first exit code."""
    import signal

    failed = {r: res for r, res in results.items() if res is not None}
    lines = []
    for rank in sorted(set(exits) | set(failed)):
        code = exits.get(rank)
        how = (f"killed by signal {signal.Signals(-code).name}" if code is not None and code < 0
               else f"exited with code {code}" if code is not None else "wrote a failure")
        lines.append(f"rank {rank} {how}")
    summary = "; ".join(lines) or "the ranks ended without a result"
    for status in DIAGNOSED:  # a rank's own diagnosis beats its peers' broken-connection errors
        for rank, res in sorted(failed.items()):
            if res.get("status") == status:
                return {"status": status, "error": res.get("error", "") if status == "skipped"
                        else f"rank {rank}: {res.get('error', '')}\n({summary})"}
    # torch's launcher stops the surviving peers with SIGTERM once one rank has failed: a rank killed by another
    # signal (SIGKILL, SIGSEGV, ...) is the cause, whichever rank number it has
    for rank, code in sorted(exits.items(), key=lambda item: (item[1] == -signal.SIGTERM, item[0])):
        if code < 0 and rank not in failed:
            return {"status": "error", "error": f"rank {rank} was killed by signal {signal.Signals(-code).name} "
                                                f"without writing a result ({summary})"}
    lost = lost_node(failed, nodes, devices)
    if lost:
        return {"status": "error", "error": f"{lost} ({summary})"}
    for rank, res in sorted(failed.items()):
        return {"status": res.get("status", "error"), "error": f"rank {rank}: {res.get('error', '')}\n({summary})"}
    return {"status": "error", "error": summary}


PEER_LOST = ("connection closed", "connection reset", "broken pipe", "econnreset", "connection refused",
             "read error", "socket", "nccl", "gloo", "timed out", "timeout")


def lost_node(failed: dict[int, dict], nodes: int, devices: int) -> str:
    """"node K stopped ..." when every failed rank of this node failed on a lost connection (another node's ranks
    are gone); "" otherwise. With two nodes the other one is named; with more, those it may be."""
    if nodes < 2 or not failed:
        return ""
    errors = [str(res.get("error", "")).lower() for res in failed.values()]
    if not all(any(word in text for word in PEER_LOST) for text in errors):
        return ""
    here = min(failed) // devices
    others = [n for n in range(nodes) if n != here]
    who = f"node {others[0]}" if len(others) == 1 else "one of nodes " + ", ".join(map(str, others))
    ranks = [r for n in others for r in range(n * devices, (n + 1) * devices)]
    theirs = f"its rank {ranks[0]}" if len(ranks) == 1 else f"its ranks {ranks[0]}-{ranks[-1]}"
    return (f"{who} stopped ({theirs} went away mid-run: node {here}'s ranks lost their connection to it); look "
            "at that node's own output")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
