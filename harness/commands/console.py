"""What a person sees: the one-screen run summary and live progress (rich)."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from harness.store import RunRecord
from harness.names import display_name_of_record
from harness.commands.exit_codes import BAD_INPUT
from harness.analysis.views.components import short_of_waves, short_of_waves_text
from harness.analysis.views.profile import bound_reason
from harness.analysis.stats.busy import busy_reason
from harness.run.child.outcome import summary_line

console = Console(stderr=False, highlight=False)


def refuse(exc: BaseException | str) -> int:
    """A user's mistake before anything ran: one line on stderr (the console would wrap it), exit code 2."""
    print(f"error: {exc}", file=sys.stderr)
    return BAD_INPUT


def human_bytes(n: float | None) -> str:
    if n is None or n != n:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n:.0f} B"
        n /= 1024
    return "-"


def fmt(value, spec: str = ".1f", suffix: str = "") -> str:
    if value is None or value != value:
        return "-"
    return f"{value:{spec}}{suffix}"


def run_summary(record: RunRecord) -> Table:
    """The one-screen summary of a run."""
    status_style = "green" if record.status == "ok" else "red" if record.status != "skipped" else "yellow"
    table = Table(title=f"harness run {record.run_id}", show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value")
    table.add_row("status", f"[{status_style}]{record.status}[/]")
    workload = display_name_of_record(record.workload, record.config_json)
    where = f" ({record.gpu_name})" if record.gpu_name else f" ({record.cpu_model}, {record.cpu_count} cores)"
    table.add_row("workload", f"{workload}  size={record.size}  device={record.device}{where}")
    if record.status == "ok":
        table.add_row("throughput", f"{fmt(record.samples_per_s, '.2f')} samples/s"
                      f"  ({fmt(record.units_per_s, '.3g')} {record.unit}/s)")
        queue = f", {record.queue_warmup_steps} of them eating the loader's queue" if record.queue_warmup_steps else ""
        table.add_row("step time", f"p50 {fmt(record.step_ms_p50)} ms   p90 {fmt(record.step_ms_p90)} ms"
                      f"   ({record.measured_steps} measured after {record.warmup_steps} warm-up{queue})")
        _add_ranks(table, record)
        wait = 100 * record.data_wait_frac if record.data_wait_frac is not None else None
        table.add_row("data wait", f"{fmt(wait)} % of the measured time" + _waves_text(record))
        if record.device == "cuda":
            _add_gpu(table, record)
        table.add_row("host memory", host_memory_text(record))

        busy = busy_reason(record)  # the CPUs, the GPU's clocks, another process on the GPU
        table.add_row("CPU util", fmt(record.cpu_util_pct, ".0f", " %")
                      + f"   other processes {fmt(record.other_cpu_pct, '.0f', ' %')}"
                      + f"   harness parent {fmt(record.parent_cpu_pct, '.2f', ' % of one CPU')}"
                      + (f"  [red]machine busy ({escape(busy)}): this measurement is not trustworthy[/]" if busy
                         else ""))
        table.add_row("first step", fmt(record.first_step_s, ".2f", " s")
                      + (f"   compile ~{fmt(record.compile_s, '.1f')} s" if record.compile_s is not None else "")
                      + (f"   [yellow]no CUDA graphs: Inductor skipped capturing them ({record.cudagraph_skips} "
                         "times)[/]" if record.cudagraph_skips else ""))
        table.add_row("loss", f"{fmt(record.loss_first, '.4f')} -> {fmt(record.loss_last, '.4f')}")
        if record.profile_json:
            table.add_row("profile", profile_text(record))
    else:
        table.add_row("why", escape(summary_line(record.error)[:300]))
    table.add_row("config", record.config_hash)
    return table


def _add_ranks(table: Table, record: RunRecord) -> None:
    """The rows of a run of several ranks (devices) and of several nodes."""
    if (record.world_size or 1) > 1:
        table.add_row("devices", f"{record.world_size} ranks ({record.dist_backend}, OMP_NUM_THREADS="
                      f"{record.omp_num_threads}): {fmt(record.samples_per_s_per_device, '.2f')} samples/s per "
                      f"device, the slowest (rank {record.slowest_rank}); step p50 per rank "
                      + " / ".join(fmt(v) for v in record.rank_step_ms_p50) + " ms")
    if (record.nodes or 1) > 1:
        hosts = record.rank_hosts.split(",") if record.rank_hosts else []
        per_node = len(hosts) // record.nodes if hosts else 0
        table.add_row("nodes", f"{record.nodes} nodes, samples/s per node "
                      + " / ".join(fmt(v, '.2f') for v in record.node_samples_per_s)
                      + f"; the slowest node {record.slowest_node}"
                      + (f" ({hosts[record.slowest_node * per_node]})" if per_node else ""))


def _add_gpu(table: Table, record: RunRecord) -> None:
    """The rows of a CUDA run: the device's memory, time, utilisation and MFU."""
    table.add_row("peak VRAM", f"{human_bytes(record.peak_vram_bytes)} allocated, "
                  f"{human_bytes(record.peak_vram_reserved_bytes)} reserved (measured steps); warm-up "
                  f"{human_bytes(record.warmup_peak_vram_bytes)} allocated")
    table.add_row("GPU memory", f"{human_bytes(record.gpu_mem_used_bytes)} used on the device (NVML, all "
                  f"processes) of {human_bytes(record.gpu_mem_total_bytes)}")
    share = 100 * record.device_step_frac if record.device_step_frac is not None else None
    table.add_row("device time", f"p50 {fmt(record.device_step_ms_p50)} ms a step (CUDA events); the steps "
                  f"fill {fmt(share, '.0f')} % of the measured time")
    table.add_row("GPU util", f"{fmt(record.gpu_util_pct)} % kernel-active (NVML)   SM active "
                  f"{fmt(record.gpu_sm_active_pct)} % (GPM)   "
                  f"SM clock {fmt(record.gpu_sm_clock_mhz, '.0f')} MHz"
                  f"   power {fmt(record.gpu_power_w)} W"
                  + (f"   [yellow]clocks held back: {record.gpu_throttle_reasons}[/]"
                     if record.gpu_throttle_reasons else "")
                  + (f"   [yellow]{record.gpu_sample_note}[/]" if record.gpu_sample_note else ""))
    table.add_row("MFU", fmt(100 * record.mfu if record.mfu else None, ".1f", " %"))


def _waves_text(record: RunRecord) -> str:
    """A warning when the window was shorter than two waves of a data-bound run's loader workers ("" otherwise)."""
    found = short_of_waves({"step_ms": record.step_ms, "data_wait_ms": record.data_wait_ms,
                            "config_json": record.config_json})
    return f"  [yellow]{escape(short_of_waves_text(found))}[/]" if found else ""


def host_memory_text(record: RunRecord) -> str:
    """Peak RSS of the measuring processes and their loader workers; with each shared page once (PSS), what the
    largest worker holds alone (USS), and Inductor's compile workers apart."""
    text = f"peak RSS {human_bytes(record.peak_host_rss_bytes)} (main + loader workers)"
    if record.peak_host_pss_bytes:
        text += f", {human_bytes(record.peak_host_pss_bytes)} with shared pages once (PSS)"
    if record.peak_worker_rss_bytes:
        own = f", {human_bytes(record.worker_uss_bytes[0])} its own (USS)" if record.worker_uss_bytes else ""
        text += f"; largest worker {human_bytes(record.peak_worker_rss_bytes)}{own}"
    if record.peak_compile_worker_bytes:
        text += f"; compile workers {human_bytes(record.peak_compile_worker_bytes)}"
    return text


def profile_text(record: RunRecord) -> str:
    """What the run's profile says bounds a step, and where its trace is."""
    try:
        reading = bound_reason(record.profile_json)
    except ValueError as exc:
        return f"unreadable ({exc})"
    trace = f"; trace {record.profile_trace}" if record.profile_trace else ""
    return f"{reading}{trace}"
