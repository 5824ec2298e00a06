"""Run one resolved config in a fresh child process with a timeout; always return a record.

The parent never trains: it starts ``python -m harness.child``, watches its progress file and the
clock, and turns whatever happens (a result, a crash, a hang) into a RunRecord.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import fields
from pathlib import Path
from typing import Callable

from harness import config as config_mod
from harness.store import RunRecord

REPO_ROOT = Path(__file__).resolve().parent.parent
POLL_S = 0.25

ProgressFn = Callable[[dict, float], None]  # (progress info, seconds since start)


def new_run_id() -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"


def base_record(cfg: config_mod.RunConfig, env: dict, env_key: str, status: str, error: str = "") -> RunRecord:
    """A record of ``cfg`` with environment and identity filled, metrics empty."""
    from harness.workloads import WORKLOADS

    env_fields = {f.name for f in fields(RunRecord)}
    return RunRecord(
        run_id=new_run_id(),
        status=status,
        error=error,
        timestamp=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        workload=cfg.workload,
        size=cfg.size,
        device=cfg.device,
        config_hash=config_mod.config_hash(cfg),
        config_json=json.dumps(config_mod.to_dict(cfg), sort_keys=True),
        env_key=env_key,
        unit=WORKLOADS.get(cfg.workload).unit,
        mode=cfg.measure.mode,
        **{k: v for k, v in env.items() if k in env_fields},
    )


def execute(cfg: config_mod.RunConfig, env: dict, env_key: str, on_progress: ProgressFn | None = None) -> RunRecord:
    """Measure ``cfg`` (resolved) in a child process; the record's status says how it ended."""
    reason = config_mod.not_applicable(cfg)
    if reason:
        return base_record(cfg, env, env_key, "skipped", reason)
    with tempfile.TemporaryDirectory(prefix="harness-job-") as tmp:
        job = Path(tmp)
        (job / "config.json").write_text(json.dumps(config_mod.to_dict(cfg)))
        (job / "env.json").write_text(json.dumps(env, default=str))
        status, error, metrics = _run_child(job, cfg.timeout_s, on_progress)
    record = base_record(cfg, env, env_key, status, error)
    for key, value in metrics.items():
        if hasattr(record, key):
            setattr(record, key, value)
    return record


def _run_child(job: Path, timeout_s: float, on_progress: ProgressFn | None) -> tuple[str, str, dict]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    log_path = job / "child.log"
    start = time.monotonic()
    with open(log_path, "wb") as log:
        # A session of its own, so that a timeout can kill the child and its loader workers together.
        proc = subprocess.Popen(
            [sys.executable, "-m", "harness.child", str(job)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True,
        )
        try:
            timed_out = _wait(proc, job, start, timeout_s, on_progress)
        finally:
            _kill_group(proc)
    result_path = job / "result.json"
    if timed_out:
        return "timeout", f"no result after timeout_s={timeout_s:g} s; killed.\n{_tail(log_path)}", {}
    if result_path.exists():
        result = json.loads(result_path.read_text())
        return result.pop("status"), result.pop("error", ""), result
    code = proc.returncode
    how = f"killed by signal {signal.Signals(-code).name}" if code and code < 0 else f"exited with code {code}"
    return "error", f"the measuring process {how} without writing a result.\n{_tail(log_path)}", {}


def _wait(proc: subprocess.Popen, job: Path, start: float, timeout_s: float, on_progress: ProgressFn | None) -> bool:
    progress_path = job / "progress.json"
    while proc.poll() is None:
        elapsed = time.monotonic() - start
        if elapsed > timeout_s:
            return True
        if on_progress and progress_path.exists():
            try:
                on_progress(json.loads(progress_path.read_text()), elapsed)
            except (json.JSONDecodeError, OSError):
                pass
        time.sleep(POLL_S)
    return False


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""
