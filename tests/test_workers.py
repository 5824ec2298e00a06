"""How many pytest-xdist workers each tier gets (tests/conftest.py): the default tier one per CPU, at most 4; the slow
and GPU tiers none (one process)."""

import os
from types import SimpleNamespace

import pytest

from tests import conftest


@pytest.mark.parametrize("markexpr, one_process", [
    ("not slow and not gpu", False), ("", False), ("slow", True), ("gpu", True), ("gpu and not slow", True),
    ("slow and not gpu", True), ("not gpu", False)])
def test_the_slow_and_gpu_tiers_run_in_one_process_and_the_default_tier_on_every_cpu(monkeypatch, markexpr,
                                                                                      one_process):
    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    config = SimpleNamespace(option=SimpleNamespace(markexpr=markexpr))
    assert conftest.pytest_xdist_auto_num_workers(config) == (0 if one_process else conftest.MAX_WORKERS)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert conftest.pytest_xdist_auto_num_workers(config) == (0 if one_process else 2)
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "3")
    assert conftest.pytest_xdist_auto_num_workers(config) is None  # pytest-xdist reads it itself
