"""data.storage_items_per_s: one throughput ceiling shared by every reader of a run (harness.workload.storage)."""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import struct
import time

import pytest

from harness.workload.storage import SharedCeiling, run_ceiling
from tests.conftest import tiny_config, tiny_model_config


def _reserve_slots(ceiling: SharedCeiling, count: int, start, out) -> None:
    start.wait()  # every reader starts together (once all are imported): they contend for one schedule
    out.put([ceiling.reserve() for _ in range(count)])


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_readers_in_several_processes_share_one_ceiling_and_together_read_at_it(tmp_path, context):
    # a slow ceiling (one read every 10 s): the slots reserved here lie minutes ahead, so every reservation joins
    # one queue however slowly the processes run, and none sleeps (reserve only books the slot)
    ctx = mp.get_context(context)
    ceiling = SharedCeiling(str(tmp_path / "ceiling"), items_per_s=0.1)
    start, out = ctx.Barrier(3), ctx.Queue()
    readers = [ctx.Process(target=_reserve_slots, args=(ceiling, 8, start, out)) for _ in range(3)]
    for reader in readers:
        reader.start()
    slots = sorted(s for _ in readers for s in out.get(timeout=120))
    for reader in readers:
        reader.join(timeout=60)
    assert len(slots) == 24 and [reader.exitcode for reader in readers] == [0, 0, 0]
    # one slot every 10 s, none shared: the three readers together read exactly at the ceiling, never above it
    assert [b - a for a, b in zip(slots, slots[1:])] == pytest.approx([10.0] * 23, abs=1e-6)


def test_a_read_under_the_ceiling_waits_for_nothing_and_one_at_it_at_most_a_slot(tmp_path):
    ceiling = SharedCeiling(str(tmp_path / "ceiling"), items_per_s=20.0)
    assert ceiling.wait() == 0.0  # a free schedule: the read goes at once
    assert 0.0 <= ceiling.wait() <= 1 / 20  # the next slot is at most 50 ms after the first
    # a file left by an earlier boot (a slot far ahead of this boot's clock) does not stall the run
    with open(ceiling.path, "r+b") as f:
        f.write(struct.pack("d", time.monotonic() + 10 * 3600))
    assert ceiling.wait() == 0.0


def test_loader_workers_reading_through_the_ceiling_never_exceed_it(tmp_path):
    from torch.utils.data import DataLoader

    from harness.workload.data import StorageCost

    rate, items = 40.0, 16
    cost = StorageCost(list(range(items)), 0.0, None, SharedCeiling(str(tmp_path / "ceiling"), rate))
    started = time.monotonic()
    got = [int(x) for batch in DataLoader(cost, batch_size=4, num_workers=2) for x in batch]
    # a lower bound only (load can make it slower, never faster): 16 reads at 40 a second take 15 slots
    assert sorted(got) == list(range(items)) and time.monotonic() - started >= (items - 1) / rate


def test_the_ceiling_is_built_only_when_asked_and_shared_by_a_runs_datasets(monkeypatch):
    from harness.workload.data import StorageCost, build_dataset

    # (unset, no StorageCost is built at all: tests/test_guide_knobs.py)
    cfg = tiny_model_config(data__storage_items_per_s=50.0)  # random tensors: nothing to build but the ceiling
    train = build_dataset(cfg, cfg.workload)
    try:
        assert isinstance(train, StorageCost) and train.latency_s == 0 and train.ceiling.items_per_s == 50.0
        assert run_ceiling(50.0).path == train.ceiling.path  # the validation loader's reads share it too
        folder = os.path.dirname(train.ceiling.path)
        assert open(os.path.join(folder, "parent.pid")).read() == str(os.getpid())  # removed once this is gone
    finally:
        shutil.rmtree(os.path.dirname(train.ceiling.path), ignore_errors=True)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job-xyz")  # ranks of one launch: one ceiling, owned by the agent
    ranks = run_ceiling(10.0)
    try:
        assert os.path.basename(os.path.dirname(ranks.path)) == "harness-metrics-storage-job-xyz"
        assert open(os.path.join(os.path.dirname(ranks.path), "parent.pid")).read() == str(os.getppid())
    finally:
        shutil.rmtree(os.path.dirname(ranks.path), ignore_errors=True)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_a_ceiling_that_is_not_a_positive_rate_is_refused_naming_it(bad):
    with pytest.raises(ValueError, match=rf"data.storage_items_per_s={bad} must be 0 \(no ceiling\) or a positive, "
                                         r"finite number of items a second"):
        tiny_config(data__storage_items_per_s=bad)
