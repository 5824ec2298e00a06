"""Shared helpers: tiny resolved configs for in-process knob tests, and a results folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness import config as config_mod

REPO = Path(__file__).resolve().parent.parent
TINY = {"measure.steps": 3, "measure.warmup_steps": 1}


def tiny_config(**overrides) -> config_mod.RunConfig:
    """A resolved CPU config at the smoke size, with a few steps; keys use __ for dots."""
    cfg = config_mod.RunConfig()
    for key, value in {**TINY, **{k.replace("__", "."): v for k, v in overrides.items()}}.items():
        config_mod.set_key(cfg, key, value)
    return config_mod.resolve(cfg, cuda_available=False)


def harness_cli(*args: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run ``python -m harness ARGS`` as a user would, capturing its output."""
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd or REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture
def results(tmp_path) -> Path:
    return tmp_path / "results"
