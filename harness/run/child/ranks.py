"""One rank of a multi-device run, inside each measuring child: its process group and device, and the gathering of
every rank's measurement into the one record rank 0 writes.

Every rank times its own measured window, exactly as a single-device run does. After the windows close (never
inside them) the ranks' summaries are gathered to rank 0: the slowest rank sets the throughput, since in DDP
every step waits for the slowest rank's gradients.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch

BACKENDS = {"cuda": "nccl", "cpu": "gloo"}
PEER_TIMEOUT_VAR = "HARNESS_PEER_TIMEOUT_S"  # set by the launcher on several nodes: dist.rdzv_timeout_s


@dataclass(frozen=True)
class Rank:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str = ""

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def device(self, kind: str) -> torch.device:
        """This rank's device: its own GPU (by local rank) under DDP; as a single-device run names it otherwise."""
        return torch.device(kind, self.local_rank) if self.distributed and kind == "cuda" else torch.device(kind)

    def gather(self, payload) -> list:
        """Every rank's ``payload``, in rank order, on every rank (outside the measured window only)."""
        if not self.distributed:
            return [payload]
        import torch.distributed as dist

        out: list = [None] * self.world_size
        dist.all_gather_object(out, payload)
        return out


def any_rank(rank: Rank, flag: bool) -> bool:
    """Whether ``flag`` holds on any rank (every rank asks, at the same point; outside the measured window only):
    how the ranks agree on one more warm-up step, so that their steps, and all-reduces, stay paired."""
    return any(rank.gather(bool(flag))) if rank.distributed else bool(flag)


def join(kind: str) -> Rank:
    """This process's rank, from the variables torch's launcher sets; joins the process group when there are
    several (NCCL on CUDA, gloo on the CPU). A process started without the launcher is the only rank."""
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if world <= 1:
        return Rank()
    import torch.distributed as dist

    local = int(os.environ.get("LOCAL_RANK", "0"))
    if kind == "cuda":
        torch.cuda.set_device(local)
    backend = BACKENDS[kind]
    # several nodes: a peer node that dies leaves no process here to notice; every wait for a peer (the group's
    # set-up, a collective) ends after the rendezvous timeout instead of the 30 minutes torch would wait
    limit = float(os.environ.get(PEER_TIMEOUT_VAR, "0") or 0)
    options = {"timeout": timedelta(seconds=limit)} if limit > 0 else {}
    if kind == "cuda":  # NCCL bound to this rank's device at once (its communicator made eagerly, on the right GPU)
        options["device_id"] = torch.device("cuda", local)
    dist.init_process_group(backend, **options)
    return Rank(rank=dist.get_rank(), world_size=world, local_rank=local, backend=backend)


def leave(rank: Rank) -> None:
    if rank.distributed:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def combine(summaries: list[dict], backend: str, omp_threads: int | None, devices: int | None = None,
            hosts: list[str] | None = None) -> dict:
    """Rank 0's record from every rank's summary (``summary.summarize`` of its own window, in its JSON form).

    The slowest rank (lowest samples/s) sets the throughput: global samples/s = world size x its samples/s. Its
    raw step times are the record's (the noise model's bootstrap reads them); every rank's p50/p90 and window are
    kept. Memory is the maximum over ranks (VRAM: what must fit on each device); host RSS adds up."""
    world = len(summaries)
    rates = [s.get("samples_per_s") or 0.0 for s in summaries]
    slowest = min(range(world), key=lambda r: rates[r])
    out = dict(summaries[slowest])
    per_device = summaries[slowest]["samples_per_s"]
    out.update(
        samples_per_s=per_device * world if per_device else None,
        samples_per_s_per_device=per_device,
        units_per_s=out["units_per_s"] * world if out.get("units_per_s") else None,
        samples_per_step=summaries[0]["samples_per_step"] * world,
        loss_first=summaries[0].get("loss_first"),
        loss_last=summaries[0].get("loss_last"),
        world_size=world,
        dist_backend=backend,
        omp_num_threads=omp_threads,
        slowest_rank=slowest,
        rank_step_ms_p50=[float(s["step_ms_p50"]) for s in summaries],
        rank_step_ms_p90=[float(s["step_ms_p90"]) for s in summaries],
        rank_measured_s=[float(s["measured_s"]) for s in summaries],
        rank_peak_vram_bytes=[float(s["peak_vram_bytes"]) for s in summaries if s.get("peak_vram_bytes") is not None],
        peak_main_rss_bytes=max(s["peak_main_rss_bytes"] for s in summaries),
        peak_host_rss_bytes=sum(s["peak_main_rss_bytes"] for s in summaries),
        other_cpu_pct=_others(summaries),
        **_per_node(rates, devices or world, hosts),
    )
    for key in ("peak_vram_bytes", "peak_vram_reserved_bytes", "warmup_peak_vram_bytes",
                "warmup_peak_vram_reserved_bytes", "cuda_outside_allocator_bytes"):
        values = [s[key] for s in summaries if s.get(key) is not None]
        out[key] = max(values) if values else None
    for key in ("cuda_alloc_retries", "cuda_ooms", "warmup_cuda_alloc_retries", "warmup_cuda_ooms",
                "window_cuda_alloc_retries", "window_cuda_ooms"):  # the allocator's counts: every rank's add up
        counts = [s[key] for s in summaries if s.get(key) is not None]
        out[key] = sum(counts) if counts else None
    # GPM's SM activity: each rank read its own GPU's over its own window; the run's is their mean, as the
    # parent pools the other GPU metrics
    active = [s["gpu_sm_active_pct"] for s in summaries if s.get("gpu_sm_active_pct") is not None]
    out["gpu_sm_active_pct"] = sum(active) / len(active) if active else None
    out["gpu_sample_note"] = "; ".join(dict.fromkeys(s["gpu_sample_note"] for s in summaries
                                                     if s.get("gpu_sample_note")))
    out.pop("cpu_window", None)
    return out


def _per_node(rates: list[float], devices: int, hosts: list[str] | None) -> dict:
    """Each node's throughput (its slowest rank's samples/s times its ranks), the slowest node, the ranks' hosts."""
    nodes = max(1, len(rates) // devices)
    per_node = [min(rates[n * devices:(n + 1) * devices]) * devices for n in range(nodes)]
    return {"nodes": nodes, "node_samples_per_s": per_node if nodes > 1 else [],
            "slowest_node": min(range(nodes), key=lambda n: per_node[n]) if nodes > 1 else None,
            "rank_hosts": ",".join(hosts) if hosts and nodes > 1 else ""}


def _others(summaries: list[dict]) -> float | None:
    """CPU share of processes other than the ranks (each rank alone would count its peers as 'other')."""
    windows = [s.get("cpu_window") for s in summaries]
    if any(w is None for w in windows):
        return summaries[0].get("other_cpu_pct")
    first = windows[0]
    own = sum(w["own_s"] for w in windows)
    if first["wall_s"] <= 0:
        return 0.0
    return max(0.0, 100.0 * (first["busy_s"] - own) / (first["wall_s"] * first["cpus"]))
