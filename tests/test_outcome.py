"""How a run ended: every status decided in one place, from the exception or from how the child ended."""

import signal

import pytest
import torch

from harness.run.child import outcome
from harness.run.child.outcome import BatchRefused, NonFiniteLoss, classify
from harness.workload.knobs import KnobNotApplicable


def _compile_failure(message: str) -> RuntimeError:
    """An exception as torch.compile raises it: its type lives in torch._dynamo, wrapped by another."""
    failure = type("BackendCompilerFailed", (RuntimeError,), {"__module__": "torch._dynamo.exc"})
    exc = RuntimeError("wrapped")
    exc.__cause__ = failure(message)
    return exc


def test_the_statuses_are_the_stores():
    from harness.store import STATUSES

    assert outcome.STATUSES == STATUSES
    assert set(outcome.DIAGNOSED) == {"skipped", "oom", "nan"}


def test_each_exception_has_its_status():
    assert classify(KnobNotApplicable("tf32=true needs a CUDA GPU")) == "skipped"
    assert classify(NonFiniteLoss(3, float("nan"), 50)) == "nan"
    assert classify(torch.OutOfMemoryError("CUDA out of memory")) == "oom"
    assert classify(_compile_failure("backend='inductor' raised")) == "skipped"
    assert classify(BatchRefused("the model failed on a batch")) == "error"
    assert classify(ValueError("boom")) == "error"
    assert classify(KeyboardInterrupt()) == "error"


def test_cuda_oom_type_classifies_as_oom():
    assert classify(torch.OutOfMemoryError("CUDA out of memory")) == "oom"
    assert classify(ValueError("boom")) == "error"


@pytest.mark.parametrize("message", [
    "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
    "cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
    "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.11 GiB total capacity)",
    "CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported",
    "cudaErrorMemoryAllocation: out of memory",
    "[enforce fail at alloc_cpu.cpp:117] err == 0. DefaultCPUAllocator: can't allocate memory",
])
def test_out_of_memory_in_its_many_spellings_is_oom(message):
    assert classify(RuntimeError(message)) == "oom"


def test_out_of_memory_wrapped_by_another_exception_is_oom():
    # torch.compile re-raises a backend's failure as its own type; the cause still names the OOM
    try:
        try:
            raise RuntimeError("CUDNN_STATUS_ALLOC_FAILED")
        except RuntimeError as inner:
            raise AssertionError("backend compiler failed") from inner
    except AssertionError as outer:
        assert classify(outer) == "oom"
    assert classify(RuntimeError("CUBLAS_STATUS_EXECUTION_FAILED")) == "error"
    assert classify(RuntimeError("CUDNN_STATUS_NOT_SUPPORTED")) == "error"


def test_out_of_memory_inside_a_compile_failure_is_oom_not_a_skip():
    assert classify(_compile_failure("CUDA out of memory. Tried to allocate 8.00 GiB")) == "oom"


def test_the_chain_is_walked_once_even_when_it_loops():
    a, b = RuntimeError("a"), RuntimeError("b")
    a.__context__, b.__context__ = b, a
    assert [str(e) for e in outcome.exception_chain(a)] == ["a", "b"]
    assert classify(a) == "error"


def test_a_skip_gives_its_reason_any_other_failure_its_traceback():
    skipped = outcome.of_exception(KnobNotApplicable("tf32=true needs a CUDA GPU"), "off")
    assert skipped == outcome.Outcome("skipped", "tf32=true needs a CUDA GPU")
    compiled = outcome.of_exception(_compile_failure("backend='inductor' raised:\nsomething"), "max-autotune")
    assert compiled.error == "compile=max-autotune failed on this model (RuntimeError): wrapped"
    try:
        raise ValueError("x" * 10_000)
    except ValueError as exc:
        failed = outcome.of_exception(exc, "off")
    assert failed.status == "error" and len(failed.error) == outcome.TRACEBACK_CHARS
    # the end of the traceback, then where it was raised: this test's file is a user's as the harness sees it
    assert failed.error.endswith("x\nraised in your code at tests/test_outcome.py:85 in "
                                 "test_a_skip_gives_its_reason_any_other_failure_its_traceback")


def test_a_child_that_left_no_result_timed_out_or_died():
    assert outcome.timed_out(12, "log") == outcome.Outcome("timeout", "no result after timeout_s=12 s; killed.\nlog")
    killed = outcome.died(-signal.SIGKILL, "tail")
    assert killed == outcome.Outcome("error", "the measuring process killed by signal SIGKILL without writing a "
                                              "result.\ntail")
    assert outcome.died(3, "").error.startswith("the measuring process exited with code 3 without")


def test_a_refused_batch_names_its_shapes_but_oom_and_compile_failures_pass_through():
    x, y = torch.zeros(2, 1, 4, 4), torch.zeros(2, dtype=torch.int64)
    refused = outcome.shapes_error(ValueError("bad"), x, y)
    assert isinstance(refused, BatchRefused)
    assert str(refused) == ("the model failed on a batch of input [2, 1, 4, 4] float32 and target [2] int64 "
                            "(batch first): ValueError: bad")
    loss = outcome.shapes_error(ValueError("bad"), x, y, out=(x, x))
    assert str(loss).startswith("the loss (the model's output: tuple) failed")
    oom = torch.OutOfMemoryError("CUDA out of memory")
    assert outcome.shapes_error(oom, x, y) is oom
    compiled = _compile_failure("inductor")
    assert outcome.shapes_error(compiled, x, y) is compiled


# ------------------------------------------------------------------------------------------
# the one line a run's summary shows of its error

FAILING = """\
import torch
from torch.nn import functional as F


def step(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y) * scale_not_defined


def collate(items):
    raise ValueError("this collate refuses its items")
"""


@pytest.fixture
def failing(tmp_path, monkeypatch):
    from tests.conftest import user_module

    monkeypatch.chdir(tmp_path)
    yield from user_module(tmp_path, monkeypatch, "failing_hooks", FAILING)


def _raised_by(settings: dict) -> BaseException:
    from tests.test_own_training import _cfg, _measure

    with pytest.raises(Exception) as caught:
        _measure(_cfg(**settings))
    return caught.value


@pytest.mark.parametrize("hook,workers,line", [
    ("step", 0, "NameError: name 'scale_not_defined' is not defined (raised in your code at failing_hooks.py:7 in "
                "step)"),
    ("collate", 0, "ValueError: this collate refuses its items (raised in your code at failing_hooks.py:11 in "
                   "collate)"),
    ("collate", 1, "(raised in your code at failing_hooks.py:11 in collate)"),  # its traceback came from a worker
])
def test_an_exception_in_the_users_step_or_collate_names_their_file_line_and_function(failing, hook, workers, line):
    exc = _raised_by({f"workload.{hook}._target_": f"failing_hooks.{hook}", f"workload.{hook}._partial_": True,
                      "data.num_workers": workers})
    error = outcome.of_exception(exc, "none").error
    assert error.splitlines()[-1] == f"raised in your code at failing_hooks.py:{line.split(':')[-1].split()[0]} in " \
                                     f"{hook}"
    assert outcome.summary_line(error).endswith(line)


def test_a_process_killed_by_a_signal_is_summarised_by_the_signal_not_its_last_stderr_line():
    died = outcome.died(-signal.SIGKILL, "  warnings.warn(\n").error
    assert outcome.summary_line(died) == "the measuring process killed by signal SIGKILL without writing a result."
    assert outcome.summary_line(outcome.timed_out(12, "  warnings.warn(").error).startswith("no result after")
    rank = "rank 1 was killed by signal SIGKILL without writing a result (rank 0 exited with code 1; rank 1 ...)"
    assert outcome.summary_line(rank) == rank
    assert outcome.summary_line("Traceback (most recent call last):\n  File \"x\"\nValueError: boom\n") == \
        "ValueError: boom"
    assert outcome.summary_line("") == "-"


def test_the_run_summary_shows_the_signal_and_the_users_frame():
    from rich.console import Console

    from harness.commands import console
    from harness.store import RunRecord

    def why(error: str) -> str:
        record = RunRecord(run_id="r", status="error", timestamp="t", error=error, workload="custom")
        out = Console(record=True, width=300)
        out.print(console.run_summary(record))
        return next(line for line in out.export_text().splitlines() if " why " in line)

    assert "killed by signal SIGKILL" in why(outcome.died(-signal.SIGKILL, "  warnings.warn(\n").error)
    user = "Traceback ...\nValueError: [boom]\nraised in your code at models/step.py:12 in step"
    assert "ValueError: [boom] (raised in your code at models/step.py:12 in step)" in why(user)
