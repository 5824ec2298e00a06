"""What a person sees: the one-screen run summary and live progress (rich)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from harness.store import RunRecord

console = Console(stderr=False, highlight=False)


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
    table.add_row("workload", f"{record.workload}  size={record.size}  device={record.device}"
                  + (f" ({record.gpu_name})" if record.gpu_name
                     else f" ({record.cpu_model}, {record.cpu_count} cores)"))
    if record.status == "ok":
        table.add_row("throughput", f"{fmt(record.samples_per_s, '.2f')} samples/s"
                      f"  ({fmt(record.units_per_s, '.3g')} {record.unit}/s)")
        table.add_row("step time", f"p50 {fmt(record.step_ms_p50)} ms   p90 {fmt(record.step_ms_p90)} ms"
                      f"   ({record.measured_steps} measured after {record.warmup_steps} warm-up)")
        if (record.world_size or 1) > 1:
            table.add_row("devices", f"{record.world_size} ranks ({record.dist_backend}, OMP_NUM_THREADS="
                          f"{record.omp_num_threads}): {fmt(record.samples_per_s_per_device, '.2f')} samples/s per "
                          f"device, the slowest (rank {record.slowest_rank}); step p50 per rank "
                          + " / ".join(fmt(v) for v in record.rank_step_ms_p50) + " ms")
        wait = 100 * record.data_wait_frac if record.data_wait_frac is not None else None
        table.add_row("data wait", f"{fmt(wait)} % of the measured time")
        if record.device == "cuda":
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
        table.add_row("host memory", f"peak RSS {human_bytes(record.peak_host_rss_bytes)} (main + workers)"
                      + (f", largest worker {human_bytes(record.peak_worker_rss_bytes)}"
                         if record.peak_worker_rss_bytes else ""))
        from harness.analysis.busy import busy_reason  # scipy via stats: only once a run is summed up

        busy = busy_reason(record)  # the CPUs, the GPU's clocks, another process on the GPU
        table.add_row("CPU util", fmt(record.cpu_util_pct, ".0f", " %")
                      + f"   other processes {fmt(record.other_cpu_pct, '.0f', ' %')}"
                      + f"   harness parent {fmt(record.parent_cpu_pct, '.2f', ' % of one CPU')}"
                      + (f"  [red]machine busy ({escape(busy)}): this measurement is not trustworthy[/]" if busy
                         else ""))
        table.add_row("first step", fmt(record.first_step_s, ".2f", " s")
                      + (f"   compile ~{fmt(record.compile_s, '.1f')} s" if record.compile_s is not None else ""))
        table.add_row("loss", f"{fmt(record.loss_first, '.4f')} -> {fmt(record.loss_last, '.4f')}")
    else:
        table.add_row("why", (record.error or "").strip().splitlines()[-1][:300] if record.error else "-")
    table.add_row("config", record.config_hash)
    return table
