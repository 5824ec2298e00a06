"""How the parent starts a measuring child: forked from a warm launcher (``harness.run.parent.zygote``) inside a sweep
or a single ``run``, or as a fresh interpreter (``python -m harness.run.child``, torch's launcher for ``devices``
>= 2). A sweep opens a session (``warm``): a temporary folder of its own (the synthetic data its runs share, the
launcher's log) and, at its first measured run, one zygote that imports torch and the measuring modules once and
forks each run from itself; a single ``run`` starts its zygote first of all (``begin(None, early=True)``).
Either way the parent gets a handle like ``subprocess.Popen``'s (``pid``, ``poll``, ``wait``, ``kill``,
``returncode``) and an ``exit_fd`` that becomes readable when the child has ended, so that it can block until
something happens instead of polling. A forked run is the zygote's child, not the parent's: its exit status comes
over the zygote's socket, and a pidfd (handed over by the zygote before it could be reaped) tells its end if the
zygote itself is gone.

The fork is not used, and the run starts as a fresh interpreter, where it is unsafe or impossible: not Linux (no
pidfd), ``devices`` >= 2 (torch's launcher starts the ranks), the zygote failing to start, a zygote that refuses to
fork (a thread or CUDA in it), or ``HARNESS_LAUNCH=exec``. The parent says so once, in one line. A zygote whose
imported code changed on disk, or whose environment or working folder is no longer the parent's, is replaced.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import fileio
from harness.run.child import channel
from harness.run.parent import lifetime
from harness.run.parent import zygote as zygote_mod

REPO_ROOT = Path(__file__).resolve().parents[3]
JOB_PREFIX = "harness-job-"  # the parent's temporary folders (a run's job, a sweep's session): see clean_stale_jobs
READY_TIMEOUT_S = 300.0  # the zygote's imports (a cold disk, a busy machine) before the sweep gives up on it
SHARED_DATA_ENV = "HARNESS_SHARED_DATA"  # where a run finds the sweep's shared synthetic data (workload.shared_data)
LAUNCH_ENV = "HARNESS_LAUNCH"  # "exec": never fork, every run a fresh interpreter
RUN_KEYS = ("HARNESS_PARENT_PID", "HARNESS_TIMEOUT_S", SHARED_DATA_ENV)  # set per run, not inherited

_said: set[str] = set()


def say_once(text: str) -> None:
    """One line on stderr, once per process."""
    if text not in _said:
        _said.add(text)
        print(text, file=sys.stderr)


class PlainChild:
    """A fresh interpreter: ``subprocess.Popen`` with a pidfd beside it (Linux) to block on its end."""

    how = "exec"

    def __init__(self, proc: subprocess.Popen):
        self._proc = proc
        self.pid = proc.pid
        self._pidfd = _pidfd_open(proc.pid)

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    @property
    def exit_fd(self) -> int | None:
        return self._pidfd

    def poll(self) -> int | None:
        return self._proc.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self._proc.wait(timeout)

    def kill(self) -> None:
        self._proc.kill()

    def close(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


class ForkedChild:
    """A run forked by the zygote: not this process's child, so its end comes from the zygote (its exit status) or,
    if the zygote is gone, from its pidfd (the kernel killed it with the zygote)."""

    how = "fork"

    def __init__(self, zygote: Zygote, pid: int, pidfd: int, preloaded: str = ""):
        self._zygote, self.pid, self._pidfd = zygote, pid, pidfd
        self.preloaded = preloaded  # the packages the zygote had imported when it forked this run
        self.waited_s = 0.0  # what the run waited for its launcher to be ready (its imports) before it was forked
        self.returncode: int | None = None

    @property
    def exit_fd(self) -> int | None:
        return self._pidfd if self._zygote.gone else self._zygote.fd

    def poll(self) -> int | None:
        if self.returncode is None:
            self._zygote.read_exits(self)
        if self.returncode is None and self._zygote.gone and _readable(self._pidfd, 0.0):
            self.returncode = -signal.SIGKILL  # ended with the zygote, by the kernel; its status went with it
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(f"run {self.pid}", timeout)
            _readable(self.exit_fd, left)
        return self.returncode

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, OSError):
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    def close(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


class Zygote:
    """The parent's end of one zygote: its process, its socket, and the runs it forks."""

    def __init__(self, folder: Path, first_config: Path | None = None):
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = _base_env()
        env.pop("HARNESS_TIMEOUT_S", None)  # no deadline of its own: it lives as long as the sweep
        env.update(HARNESS_PARENT_PID=str(os.getpid()), **{zygote_mod.SOCKET_ENV: str(theirs.fileno())})
        # pyarrow (imported with MONAI) starts jemalloc's background thread, which would forbid every fork; the
        # run never allocates through it (the run's arrow pool is mimalloc), so it is off in the zygote only
        env.setdefault("JE_ARROW_MALLOC_CONF", "background_thread:false")
        # torch.cuda.is_available() and device_count() asked through NVML, not the CUDA driver, which once loaded
        # forbids every fork (torch's own switch for fork-safe checks); a run's environment does not carry it
        env.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
        self.log = folder / "launcher.log"
        with open(self.log, "wb") as log:
            argv = [sys.executable, "-m", "harness.run.parent.zygote", str(folder)]
            argv += [str(first_config)] if first_config else []
            self.proc = lifetime.start(argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                       pass_fds=(theirs.fileno(),))
        theirs.close()
        self.sock = mine
        self.gone = False
        self.ready = False
        self.environment, self.cwd = _inherited(os.environ), os.getcwd()
        self.forks: list[dict] = []  # the zygote's state at each fork it made (its threads, CUDA)
        self.warms_asked = 0  # warm-ups asked without waiting for their answer (warm(wait=False))

    @property
    def fd(self) -> int:
        return self.sock.fileno()

    def stale(self) -> bool:
        """The environment or the working folder changed since the zygote started: what it imported may have read
        them (a library reads its variables when imported; ``sys.path`` holds the folder), so a new one starts."""
        return _inherited(os.environ) != self.environment or os.getcwd() != self.cwd

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> str:
        """Block until the zygote has imported what every run imports; why it cannot be used ("" when it can)."""
        message = self._next_with_fds(timeout_s)[0]
        if message is None or "ready" not in message:
            self.close()
            return f"the launcher did not start ({fileio.last_line(self.log) or 'no output'})"
        self.ready = True
        return ""

    def warm(self, config_path: Path, wait: bool = True) -> str:
        """Have the zygote import a later sweep's workload modules too (as it did its first sweep's); why it could
        not ("" when it did). ``wait=False``: its answer is taken before the next fork (:meth:`settle`)."""
        why = "" if self.ready or not wait else self.wait_ready()
        if why:
            return why
        try:
            zygote_mod.send(self.sock, {"warm": str(config_path)})
        except OSError as exc:
            return f"the launcher is gone ({exc})"
        self.warms_asked += 1
        return self.settle() if wait else ""

    def settle(self) -> str:
        """The answers to the warm-ups asked; why one failed ("" when none did)."""
        while self.warms_asked:
            self.warms_asked -= 1
            message = self._next_with_fds(READY_TIMEOUT_S)[0]
            if not (message and message.get("warmed")):
                return f"the launcher answered {message}"
        return ""

    def fork(self, request: dict, fds: list[int]) -> tuple[ForkedChild | None, str]:
        """Ask for a run; (its handle, "") or (None, why the zygote refused or could not)."""
        try:
            zygote_mod.send(self.sock, request, fds)
            message, handed = self._next_with_fds(READY_TIMEOUT_S)
        except OSError as exc:
            self.gone = True
            return None, f"the launcher is gone ({exc})"
        if message is None:
            self.gone = True
            return None, f"the launcher did not answer ({fileio.last_line(self.log) or 'no output'})"
        if "started" not in message or not handed:
            for fd in handed:
                os.close(fd)
            return None, message.get("refused", f"the launcher answered {message}")
        self.forks.append({k: v for k, v in message.items() if k not in ("started", "preloaded")})
        if left := message.get("left_to_runs"):
            why = f": {message['left_why']}" if message.get("left_why") else ""
            say_once(f"warm launcher: each run imports {left} and what follows it itself (its import leaves a process "
                     f"unsafe to fork{why})")
        return ForkedChild(self, int(message["started"]), handed[0], str(message.get("preloaded", ""))), ""

    def read_exits(self, child: ForkedChild) -> None:
        """Take the zygote's pending messages (without blocking): the child's exit status, or the zygote's end."""
        while not self.gone:
            try:
                message, fds = zygote_mod.receive(self.sock, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return
            except OSError:
                message, fds = None, []
            for fd in fds:
                os.close(fd)
            if message is None:
                self.gone = True
            elif message.get("exited") == child.pid:
                child.returncode = int(message["returncode"])
                return

    def _next_with_fds(self, timeout_s: float) -> tuple[dict | None, list[int]]:
        if not _readable(self.fd, timeout_s):
            return None, []
        return zygote_mod.receive(self.sock)

    def close(self) -> None:
        """End the zygote: its socket closed, it exits; one that does not (a run still alive) is killed, and the
        kernel kills that run with it."""
        self.gone = True
        with contextlib.suppress(OSError):
            self.sock.close()
        try:
            self.proc.wait(0.2 if self.ready else 0.0)  # an idle one exits at once; one importing is killed
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Session:
    """A sweep's launcher: its temporary folder, and the zygote once a run asks for one."""

    def __init__(self):
        self.folder = Path(tempfile.mkdtemp(prefix=JOB_PREFIX + "sweep-"))
        (self.folder / "parent.pid").write_text(str(os.getpid()))
        (self.folder / "data").mkdir()
        self.zygote: Zygote | None = None
        self.zygotes = 0  # how many launchers the session started (one, unless code or environment changed)
        self.sweeps = 0  # the sweeps that began in it
        self.fork_off = _why_no_fork()
        self.last_end = time.time()  # the previous run's end (at first: the session's start)
        self.one_run = False  # the command's only run (a single `run`): its launcher need not learn what it imported

    def begin(self, first_config: dict[str, Any] | None, early: bool = False) -> None:
        """Start the zygote now, while the sweep does its own work before its first run (the cache, the data sets),
        and have it build ``first_config``'s model on the meta device for its imports; a sweep that measures
        nothing never calls this, and so never imports torch. ``early``: before the command knows its run (a single
        ``run``, from ``harness.cli``), on torch and the measuring modules alone; a later call tells it the run."""
        if self.fork_off or (first_config is None and (not early or self.zygote is not None)):
            return
        path = None
        if first_config is not None:
            self.sweeps += 1
            path = self.folder / f"first-config-{self.sweeps}.json"
            path.write_text(json.dumps(first_config))
        if self.zygote is not None:  # a later sweep of the command, or one started early: it imports this one's too
            why = self.zygote.warm(path, wait=self.zygote.ready)
            if why:
                self.zygote.close()
                self.zygote = None
            return
        try:
            self.zygote = Zygote(self.folder, path)
            self.zygotes += 1
        except OSError as exc:
            self.fork_off = f"the launcher did not start ({exc})"

    def run_ended(self, spawned: float, gone: float) -> float:
        """A run of the session started at ``spawned`` has ended at ``gone`` (UNIX times); returns the parent's gap
        before it, since the previous run ended (or the session began)."""
        gap, self.last_end = spawned - self.last_end, gone
        return gap

    def start(self, job: Path, env: dict, log_path: Path, channel_fd: int | None,
              restarted: bool = False, asked: float | None = None) -> ForkedChild | None:
        """The run forked from the zygote (started at the first call, and again when the code it imported has
        changed on disk), or None where it cannot be (said once). ``asked``: when the run was first asked for
        (``time.monotonic()``; now, unless a launcher refused it first): its wait for a ready launcher counts from
        there."""
        if self.fork_off:
            return _off(self.fork_off)
        if self.zygote is not None and self.zygote.stale():
            self.zygote.close()
            self.zygote = None
        asked = time.monotonic() if asked is None else asked
        if self.zygote is None or not self.zygote.ready or self.zygote.warms_asked:
            try:
                if self.zygote is None:
                    self.zygote = Zygote(self.folder, job / "config.json")
                    self.zygotes += 1
                why = ("" if self.zygote.ready else self.zygote.wait_ready()) or self.zygote.settle()
            except OSError as exc:
                why = f"the launcher did not start ({exc})"
            if why:
                self.fork_off = why
                return _off(why)
        waited = time.monotonic() - asked  # for the launcher's imports: 0 where it was ready
        env = dict(env, HARNESS_PARENT_PID=str(self.zygote.proc.pid))  # the run's parent is the zygote
        request = {"job": str(job), "log": str(log_path), "cwd": os.getcwd(), "env": env, "learn": not self.one_run,
                   "argv": [str(REPO_ROOT / "harness" / "run" / "child" / "__main__.py"), str(job)]}
        child, why = self.zygote.fork(request, [channel_fd] if channel_fd is not None else [])
        if child is None and why.startswith((zygote_mod.CODE_CHANGED, zygote_mod.TRIMMED)) and not restarted:
            self.zygote.close()  # a new one imports the code as it is now, and MONAI as this run's workload needs
            self.zygote = None
            return self.start(job, env, log_path, channel_fd, restarted=True, asked=asked)
        if child is None:
            self.fork_off = why
            self.zygote.close()
            return _off(why)
        child.waited_s = waited
        return child

    def close(self) -> None:
        if self.zygote is not None:
            self.zygote.close()
        shutil.rmtree(self.folder, ignore_errors=True)


_session: Session | None = None


@contextlib.contextmanager
def warm():
    """A command's session: runs started inside fork from one zygote and share their synthetic data. Inside another
    (a sweep of a campaign or of a climb), the outer one: one launcher per command."""
    global _session
    if _session is not None:
        yield _session
        return
    outer, _session = _session, Session()
    try:
        yield _session
    finally:
        session, _session = _session, outer
        session.close()


@contextlib.contextmanager
def fresh():
    """Runs started inside start as fresh interpreters, as outside a sweep; the session stays open for after
    (``benchmarks/fork_vs_exec.py`` compares the two)."""
    global _session
    outer, _session = _session, None
    try:
        yield
    finally:
        _session = outer


def active() -> Session | None:
    return _session


def run_env(timeout_s: float) -> dict:
    """The environment of a measuring child: this process's, the repository importable, and the run's own keys."""
    env = _base_env()
    env["HARNESS_PARENT_PID"] = str(os.getpid())
    env["HARNESS_TIMEOUT_S"] = str(timeout_s)
    if _session is not None:
        env[SHARED_DATA_ENV] = str(_session.folder / "data")
    return env


def start(job: Path, env: dict, log_path: Path, channel_fd: int | None = None, argv: list[str] | None = None):
    """Start the run of ``job``: forked in a sweep's session where it can be, else a fresh interpreter (``argv``:
    torch's launcher for ``devices`` >= 2). ``channel_fd``: the child's end of its progress channel."""
    if argv is None and _session is not None:
        child = _session.start(job, env, log_path, channel_fd)
        if child is not None:
            return child
    elif argv is not None and _session is not None and not _session.one_run:
        say_once("warm launcher: runs of devices >= 2 start through torch's launcher, as fresh interpreters")
    if channel_fd is not None:
        env = dict(env, **{channel.CHANNEL_ENV: str(channel_fd)})
    with open(log_path, "wb") as log:
        # A session of its own (a timeout kills the child and its loader workers together), dying with us.
        proc = lifetime.start(argv or [sys.executable, "-m", "harness.run.child", str(job)], stdout=log,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                              pass_fds=(channel_fd,) if channel_fd is not None else ())
    return PlainChild(proc)


def _off(why: str) -> None:
    if _session is None or not _session.one_run:  # a single run says nothing: its record's launched_by is exec
        say_once(f"warm launcher off: {why}; runs start as fresh interpreters")
    return None


def _why_no_fork() -> str:
    if os.environ.get(LAUNCH_ENV, "") == "exec":
        return f"{LAUNCH_ENV}=exec"
    if not sys.platform.startswith("linux") or not hasattr(os, "pidfd_open") or not hasattr(socket, "send_fds"):
        return "forking runs needs Linux (pidfd)"
    fd = _pidfd_open(os.getpid())
    if fd is None:
        return "this kernel has no pidfd"
    os.close(fd)
    return ""


def _base_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def _inherited(environ) -> dict:
    """What of an environment a run inherits from the parent (the run's own keys apart)."""
    return {k: v for k, v in environ.items() if k not in RUN_KEYS}


def _pidfd_open(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _readable(fd: int | None, timeout_s: float | None) -> bool:
    if fd is None:
        time.sleep(min(timeout_s or 0.0, 0.05))
        return False
    return bool(select.select([fd], [], [], timeout_s)[0])
