"""The CUDA context created in a thread while the workload's modules import, joined before the loader is built. No
GPU: the child's main flow runs in this process with the context's allocation faked (``torch.zeros`` on a CUDA
device) and the measured run replaced by a recorder; nothing here depends on the machine's speed (the overlap is
shown by the context waiting for a signal the import gives, not by timing)."""

from __future__ import annotations

import json
import threading

import pytest
import torch

from harness import config as config_mod
from harness.run.child import main as child_main
from harness.run.child import measure, outcome, startup
from harness.run.parent import phases
from tests.conftest import tiny_config


class Recorder:
    """What the faked child did, in order, and in which thread."""

    def __init__(self):
        self.events: list[tuple[str, int]] = []
        self.imports_running = threading.Event()

    def add(self, what: str) -> None:
        self.events.append((what, threading.get_ident()))

    def names(self) -> list[str]:
        return [what for what, _ in self.events]


class LoaderBuilt(Exception):
    """Raised by the faked measured run: the test stops where the loader would be built."""


def _run_child(tmp_path, monkeypatch, context_error: BaseException | None = None) -> tuple[Recorder, dict]:
    rec, real_zeros = Recorder(), torch.zeros

    def zeros(*args, device=None, **kwargs):  # the context's first allocation: CUDA's initialisation, faked
        if device is None or torch.device(device).type != "cuda":
            return real_zeros(*args, device=device, **kwargs)
        rec.add("context began")
        overlapped = rec.imports_running.wait(timeout=30)  # set by the import: both run at once
        rec.add("context made" if overlapped else "context made after the imports")
        if context_error is not None:
            raise context_error
        return real_zeros(*args, **kwargs)

    def import_workload(workload):
        rec.add("imports")
        rec.imports_running.set()

    def measured_run(cfg, workload, progress, rank):
        rec.add("loader")
        raise LoaderBuilt("the loader is built here")

    monkeypatch.setattr(torch, "zeros", zeros)
    monkeypatch.setattr(startup, "import_workload", import_workload)
    monkeypatch.setattr(startup, "flops_per_sample", lambda cfg, workload, count: None)
    monkeypatch.setattr(measure, "hardware_flops_per_sample", lambda cfg, workload, flops: None)
    monkeypatch.setattr(measure, "measured_run", measured_run)
    monkeypatch.setattr(child_main, "guard_child", lambda: None)  # no parent to die with: this is the test process
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    cfg = config_mod.to_dict(tiny_config())
    cfg["device"] = "cuda"
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "env.json").write_text("{}")
    assert child_main.main(str(tmp_path)) == 0
    return rec, json.loads((tmp_path / "result.json").read_text())


def test_the_context_is_made_in_another_thread_while_the_imports_run_and_joined_before_the_loader(tmp_path,
                                                                                                  monkeypatch):
    rec, result = _run_child(tmp_path, monkeypatch)
    main_thread = threading.get_ident()
    threads = dict(rec.events)
    assert threads["imports"] == main_thread and threads["loader"] == main_thread
    assert threads["context began"] != main_thread and threads["context made"] == threads["context began"]
    # the context waited for the imports to start (it overlapped them), and was ready before the loader was built
    assert rec.names().index("context made") < rec.names().index("loader")
    assert "LoaderBuilt: the loader is built here" in result["error"]
    marks = result["phase_marks"]
    assert marks["build"] <= marks["context_began"] <= marks["context_ready"] <= marks["context"]
    assert marks["imported"] <= marks["context"]
    fields = phases.record_fields(marks, spawned=marks["start"], gone=marks["result"], gap_s=None, how="exec")
    assert fields["phase_context_thread_s"] == pytest.approx(marks["context_ready"] - marks["context_began"])
    assert fields["phase_context_s"] == pytest.approx(marks["context"] - marks["imported"])


def test_an_exception_in_the_context_thread_is_the_runs_error_with_its_message(tmp_path, monkeypatch):
    error = RuntimeError("CUDA error: no CUDA-capable device is detected")
    rec, result = _run_child(tmp_path, monkeypatch, context_error=error)
    assert "loader" not in rec.names()  # raised at the join: nothing after it ran
    assert result["status"] == "error"
    said = _exception_lines(result["error"])
    assert said == ["RuntimeError: CUDA error: no CUDA-capable device is detected"]
    # what a run that made its context in the main thread says: the same exception line
    try:
        raise RuntimeError("CUDA error: no CUDA-capable device is detected")
    except RuntimeError as exc:
        assert _exception_lines(outcome.of_exception(exc, "off").error) == said


def _exception_lines(error: str) -> list[str]:
    return [line for line in error.splitlines() if line.startswith("RuntimeError")]


def test_the_join_raises_the_threads_exception_and_a_cpu_run_starts_no_thread(monkeypatch):
    assert startup.start_context("cpu", 1) is None
    assert startup.start_context("cuda", 2) is None  # DDP: each rank makes its context when it joins its group

    def fail(device):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 MiB")

    monkeypatch.setattr(startup, "open_context", fail)
    opener = startup.start_context("cuda", 1)
    assert opener is not None
    with pytest.raises(torch.OutOfMemoryError, match="Tried to allocate 2.00 MiB"):
        startup.finish_context(opener, torch.device("cuda"))
    made: list[torch.device] = []
    monkeypatch.setattr(startup, "open_context", made.append)
    assert startup.finish_context(None, torch.device("cpu")) == {} and made == [torch.device("cpu")]
