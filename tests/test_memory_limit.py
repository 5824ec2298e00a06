"""memory.limit_gb: a smaller card's memory on a bigger one. The fraction the child sets (from a faked device
total), the cap set before the model is built, the validation, the skip on a CPU, the record and the table's
caption. No GPU: the CUDA calls are faked."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from harness import config as config_mod
from harness.analysis.views import render
from harness.analysis.views import table as table_mod
from harness.run.parent.isolate import execute
from harness.store import COLUMNS, RunRecord, load_records
from harness.workload import applicability, knobs, memory_limit
from harness.workload.applicability import KnobNotApplicable
from tests.conftest import harness_cli, tiny_config

GIB = 2**30


@pytest.mark.parametrize("limit, total, fraction", [(24, 80 * GIB, 0.3), (40, 80 * GIB, 0.5), (80, 80 * GIB, 1.0),
                                                    (0.5, 2 * GIB, 0.25)])
def test_the_fraction_is_the_limit_over_the_devices_total(limit, total, fraction):
    assert memory_limit.limit_fraction(limit, total) == pytest.approx(fraction)


def test_a_limit_above_the_devices_memory_is_refused_with_both_sizes():
    with pytest.raises(ValueError, match=r"memory.limit_gb=96 is more than this device's 79.6 GiB"):
        memory_limit.limit_fraction(96, 79.6 * GIB)


class FakeCuda:
    """torch.cuda's device total and the fraction call, recorded."""

    def __init__(self, monkeypatch, total: float):
        self.calls: list[tuple[float, int]] = []
        props = type("Props", (), {"total_memory": total})()
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
        monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction",
                            lambda fraction, index: self.calls.append((fraction, index)))


def test_the_child_caps_the_allocator_at_the_limits_share_of_its_device(monkeypatch):
    cuda = FakeCuda(monkeypatch, total=80 * GIB)
    assert memory_limit.apply_memory_limit(24, torch.device("cuda", 1)) == pytest.approx(0.3)
    assert cuda.calls == [(pytest.approx(0.3), 1)]


def test_no_limit_or_a_cpu_device_sets_nothing(monkeypatch):
    cuda = FakeCuda(monkeypatch, total=80 * GIB)
    assert memory_limit.apply_memory_limit(None, torch.device("cuda", 0)) is None
    assert memory_limit.apply_memory_limit(24, torch.device("cpu")) is None
    assert cuda.calls == []


def test_a_limit_above_the_card_skips_the_run_with_its_reason(monkeypatch):
    FakeCuda(monkeypatch, total=24 * GIB)
    with pytest.raises(KnobNotApplicable, match="memory.limit_gb=40 is more than this device's 24.0 GiB"):
        memory_limit.apply_memory_limit(40, torch.device("cuda", 0))


def test_the_cap_is_set_before_the_model_is_built(monkeypatch):
    order: list[str] = []
    monkeypatch.setattr(knobs, "apply_memory_limit", lambda limit, device: order.append(f"cap {limit}"))

    def build(cfg):
        order.append("build")
        raise RuntimeError("stop here")

    monkeypatch.setattr(knobs, "build_all", build)
    with pytest.raises(RuntimeError, match="stop here"):
        knobs.prepare(tiny_config(memory__limit_gb=24.0), tiny_config().workload)
    assert order == ["cap 24.0", "build"]


@pytest.mark.parametrize("value", [0.1, 0, -4, 2000, True])
def test_a_limit_out_of_range_is_one_line_naming_the_value_and_the_range(value):
    cfg = config_mod.RunConfig()
    cfg.memory.limit_gb = value
    with pytest.raises(ValueError) as err:
        config_mod.validate(cfg)
    text = str(err.value)
    assert text.startswith(f"memory.limit_gb={value!r} is not valid") and "from 0.25 to 1024" in text
    assert "\n" not in text


def test_the_command_line_refuses_a_bad_limit_before_anything_runs(results):
    out = harness_cli("run", "memory.limit_gb=0", f"results_dir={results}")
    assert out.returncode == 2
    assert "memory.limit_gb=0.0 is not valid: a number of GiB from 0.25 to 1024" in out.stderr
    assert "Traceback" not in out.stderr + out.stdout and not results.exists()


def test_on_a_cpu_the_limit_is_skipped_with_its_reason_and_the_record_keeps_it(results):
    cfg = tiny_config(memory__limit_gb=24.0, results_dir=str(results))
    reason = applicability.skip_reason(cfg)
    assert reason == ("memory.limit_gb=24 needs a CUDA GPU (it caps the device's caching allocator; a CPU run's host "
                      "memory has no allocator to cap)")
    record = execute(cfg, {}, "env")  # skipped before anything starts
    assert (record.status, record.error, record.memory_limit_gb) == ("skipped", reason, 24.0)


def test_the_limit_changes_the_settings_hash_and_no_limit_keeps_the_old_one():
    plain, capped = tiny_config(), tiny_config(memory__limit_gb=24.0)
    assert config_mod.config_hash(plain) != config_mod.config_hash(capped)
    assert "memory.limit_gb" not in config_mod.measured_settings(plain)


def _capped(rung: int, status: str, limit: float | None = 24.0) -> RunRecord:
    return RunRecord(run_id=f"r{rung}", status=status, timestamp=f"2026-11-27T10:00:0{rung}", workload="unet3d",
                     size="full", device="cuda", env_key="e", sweep_id="s", ladder="batch", rung=rung,
                     change=f"batch_size={2 ** rung}" if rung else "", memory_limit_gb=limit, gpu_name="H100",
                     gpu_count=1, samples_per_s=10.0 * (rung + 1) if status == "ok" else None,
                     step_ms=[100.0] * 5 if status == "ok" else [], peak_vram_bytes=GIB if status == "ok" else None)


def test_the_record_stores_the_limit_and_the_table_caption_shows_it(results):
    from harness.store import store_record

    for rung, status in enumerate(["ok", "ok", "oom"]):
        store_record(_capped(rung, status), str(results))
    stored = sorted(load_records(str(results)), key=lambda r: r.rung)
    assert [(r.status, r.memory_limit_gb) for r in stored] == [("ok", 24.0), ("ok", 24.0), ("oom", 24.0)]
    table = table_mod.load_table(str(results), "s")
    assert table.memory_limit_gb == 24.0
    assert render.title(table).endswith("memory capped at 24 GiB (memory.limit_gb)")


def test_a_sweep_without_one_limit_for_all_its_runs_shows_none():
    frame = pd.DataFrame([{c: getattr(r, c) for c in COLUMNS} for r in [_capped(0, "ok"), _capped(1, "ok", None)]])
    table = table_mod.build_table(frame, "s")
    assert table.memory_limit_gb is None and "capped" not in render.title(table)
