"""The warm launcher's far end: one process per sweep that imports torch and the measuring modules once, and forks
every run of the sweep from itself (``python -m harness.run.parent.zygote SWEEP_DIR``, started by
``harness.run.parent.launcher``).

Every run is still a fresh process: forked from this pristine process each time (nothing of one run is ever seen by
the next: no run returns here), in a session and process group of its own, with its own CUDA context (this process
never initialises CUDA), dying with this process (``PR_SET_PDEATHSIG``, as this one dies with the sweep's process)
and carrying its own deadline. What the fork saves is the interpreter's start and the imports (seconds a run).

A fork is only safe from a process with one thread and no CUDA: before each fork the thread pools that libraries
start when imported and that are made to be stopped before a fork (OpenBLAS's, numpy's and scipy's) are stopped
the way their own fork handler stops them, and the fork is refused (the run then starts as a fresh interpreter)
if another thread is left, CUDA is initialised, or a process started here is still alive.

Before the first fork, the modules of the sweep's first run's model, loss and dataset are imported (their
libraries: MONAI, torchvision, OpenCV; nothing is built or called; for a run that builds an optimizer, any mode but
the loader alone, torch._dynamo, which building one imports), so that no run pays those imports; what the
sweep's first run imported beyond that is imported here once that run has ended, so that the later runs find it
loaded, as the first run's own imports left it. Only the first run's: a later rung's extra imports (a compiler's)
stay that rung's own, so that every run holds the same modules a fresh process of its settings would. This process
imports with the cyclic collector off and collects once before it forks from new imports, then freezes what
survived (a run's collections leave it alone, and its pages shared); each run turns the collector on.

The protocol (``harness.run.parent.messages``: one JSON object a message, file descriptors beside): this process sends
``{"ready": pid}``; the parent asks ``{"job", "log", "cwd", "env", "argv", "learn"}`` (``learn`` false: the command's
only run) with the run's progress channel; this process answers ``{"started": pid, "threads": 1,
"cuda_initialized": false}`` (as the fork found it) with a pidfd of the run, or ``{"refused": why}``, then
``{"exited": pid, "returncode": n}`` once it has reaped the run. The parent closing its end ends this process.
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import json
import os
import socket
import sys
import time
import traceback
from pathlib import Path

from harness.run.child import channel
from harness.lifeline import guard_child
from harness.run.parent import driver, resident, verdicts
from harness.run.parent.messages import receive, send
from harness.workload import trimmed_imports

SOCKET_ENV = "HARNESS_ZYGOTE_FD"  # the zygote's end of its socket to the parent
# What every run imports: torch and the measuring modules (none of them starts a thread or touches CUDA).
PRELOAD = ("torch", "harness.config", "harness.run.child.main", "harness.run.child.measure",
           "harness.run.child.summary", "harness.run.child.ranks", "harness.workload.build", "harness.workload.data",
           "harness.workload.knobs", "harness.workload.shared_data")
NOT_PRELOADED = ("__main__", "__mp_main__")
# What building a torch optimizer imports, a user's script too: preloaded for every run that builds one (not loader)
OPTIMIZER_IMPORTS = ("torch._dynamo",)
COLLECTED_AT = [0]  # how many modules were imported here at the last collection (collect_imports)
DRIVER_LOADED_BY: list[str] = []  # the import after which the CUDA driver was first seen loaded here, if any
LEFT_TO_RUNS: list[str] = []  # the imports a probe found unsafe: not preloaded (from it on), each run makes them
LEFT_WHY: dict[str, str] = {}  # why each of them left the probe unsafe to fork (unsafe_to_fork's words)
NVML_CLOSED_FOR: list[str] = []  # the modules whose import asked NVML here, kept closed on a GPU (driver.nvml_closed)
PROBED: list[int] = []  # the probes this launcher made (how many names each), where no verdict was remembered


def main(sweep_dir: str, first_config: str = "") -> int:
    guard_child()  # dies with the sweep's process; no deadline of its own (each run carries one)
    gc.disable()  # its passes over all imported so far, repeated as they grow, cost more than collect_imports' one
    sock = socket.socket(fileno=int(os.environ.pop(SOCKET_ENV)))
    started = time.monotonic()
    # a GPU run's imports probed first (started early, the device is not known yet: where a GPU driver is)
    probe = _device(Path(first_config)) == "cuda" if first_config else os.path.exists("/dev/nvidiactl")
    failed = preload_fork_safe(PRELOAD, probe)
    if first_config:
        warm_workload(Path(first_config), probe)
    resident_pages, sources = resident.file_pages(), source_stamps()
    send(sock, {"ready": os.getpid(), "import_s": time.monotonic() - started, "failed": failed})
    learnt = False
    while True:
        request, fds = receive(sock)
        if request is None:  # the sweep is over
            return 0
        if "warm" in request:  # a later sweep of the command: its workload's modules too
            warm_workload(Path(request["warm"]), _device(Path(request["warm"])) == "cuda")
            resident_pages, sources = resident.file_pages(), source_stamps()
            send(sock, {"warmed": True})
            continue
        why = changed_source(sources) or trimmed_for_another(request) or unsafe_to_fork()
        if why and not why.startswith((CODE_CHANGED, TRIMMED)):
            verdicts.forget()  # a remembered verdict may have let the culprit in: the next launcher probes again
        if why:
            for fd in fds:
                os.close(fd)
            send(sock, {"refused": why})
            continue
        state = {"threads": len(_threads()), "cuda_initialized": _cuda_initialized(),  # as the fork finds it
                 "cuda_driver": driver.cuda_state(), "preloaded": preloaded()}
        if LEFT_TO_RUNS:
            state.update(left_to_runs=LEFT_TO_RUNS[0], left_why=LEFT_WHY[LEFT_TO_RUNS[0]])
        learnt = learnt or not request.get("learn", True)  # the command's only run: nothing to learn for
        collect_imports()
        pid = _fork_run(request, fds, sock, sweep_dir, resident_pages, report_imports=not learnt)
        pidfd = os.pidfd_open(pid)  # before any wait: the PID cannot have been reused yet
        send(sock, {"started": pid, **state}, [pidfd])
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        send(sock, {"exited": pid, "returncode": os.waitstatus_to_exitcode(status)})
        if not learnt:
            learnt = _learn(Path(sweep_dir) / f"imports-{pid}.json", probe)
            if learnt:
                resident_pages, sources = resident.file_pages(), source_stamps()


def collect_imports() -> None:
    """Before a fork, one full collection of what was imported here since the last (the collector is off here): the
    run starts with its imports collected, as a process that imported them with its collector on. What survives it
    is then frozen (``gc.freeze``, as CPython's documentation advises before a fork): a run's own collections, its
    collection before the warm-up first, walk only the objects it made, where a walk over the ~360,000 objects of
    torch's and MONAI's imports wrote to every page that holds one and so copied ~100 MiB of this process's memory
    into each run (counted: 26,000 minor faults and 0.3 s a run on a 2-core CPU; a fresh interpreter pays no copy)."""
    if len(sys.modules) != COLLECTED_AT[0]:
        gc.collect()
        gc.freeze()
        COLLECTED_AT[0] = len(sys.modules)


def preload(names) -> list[str]:
    """Import ``names`` in order (those already imported cost a lookup); returns the ones that failed. The first
    import that loads the CUDA driver here is remembered (``DRIVER_LOADED_BY``): a refusal to fork once the driver
    is initialised names it (mapped and never initialised, the driver does not stop a fork)."""
    failed = []
    clean = not DRIVER_LOADED_BY and not _driver_loaded()
    for name in names:
        if name in sys.modules or name in NOT_PRELOADED:
            continue
        try:
            importlib.import_module(name)
        except (Exception, SystemExit):  # a module made at run time (a compiled kernel's), or one that refuses
            failed.append(name)
        if clean and _driver_loaded():
            DRIVER_LOADED_BY.append(name)
            clean = False
    return failed


def preloaded() -> str:
    """The packages imported here beyond Python's own (top-level names, sorted, comma-separated): what a run forked
    from here finds loaded, which its record keeps."""
    own = set(sys.stdlib_module_names) | set(sys.builtin_module_names)
    tops = {name.partition(".")[0] for name in list(sys.modules)}
    return ",".join(sorted(t for t in tops if t not in own and not t.startswith("_")))


def preload_fork_safe(names, probe: bool) -> list[str]:
    """``preload(names)``; with ``probe`` (the sweep runs on a GPU) they are imported in a forked probe first, and
    those from the first whose import leaves a process unsafe to fork (a library that loads the CUDA driver or
    starts a thread when imported) on are left to the runs, each importing them itself as a fresh process does:
    this process stays one a run can be forked from. On a GPU, NVML is kept closed while they are imported here and
    in the probe (``driver.nvml_closed``: its first initialisation leaves a thread of the driver's)."""
    names = [n for n in names if n not in sys.modules and n not in NOT_PRELOADED]
    if not probe:
        return preload(names)
    with driver.nvml_closed() as tried:
        if names and not unsafe_to_fork():
            names = _probed(names)
        failed = preload(names)
    for caller in tried:
        if caller not in NVML_CLOSED_FOR:
            NVML_CLOSED_FOR.append(caller)
            print(f"NVML kept closed while {caller} was imported here (a run that asks NVML opens it)", flush=True)
    return failed


def _probed(names: list[str]) -> list[str]:
    """Those of ``names`` before the first whose import leaves a fork of this process unsafe to fork, by this
    environment's remembered verdict or a probe's (then remembered); the culprit is left to the runs."""
    found = verdicts.recall(names)  # this environment's probe of these names, by an earlier launcher
    if found is None:
        PROBED.append(len(names))
        found = _probe(names)[1:]
        verdicts.remember(names, *found)
    culprit, why = found
    if culprit:
        LEFT_TO_RUNS.append(culprit)
        LEFT_WHY[culprit] = why
        print(f"not preloaded from {culprit} on: its import leaves the launcher unsafe to fork ({why})", flush=True)
    return names[:names.index(culprit)] if culprit in names else names


def _probe(names: list[str]) -> tuple[list[str], str, str]:
    """Import ``names`` in order in a fork of this process: (those before the first that leaves it unsafe to fork,
    that one, why; or all of them, "" and "")."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the probe: imports, says how far it got safely and why it stopped, and ends
        os.close(read)
        first_unsafe, why = len(names), ""
        try:
            for i, name in enumerate(names):
                preload([name])
                if why := unsafe_to_fork():
                    first_unsafe = i
                    break
            os.write(write, f"{first_unsafe}\n{why}".encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        said, _, why = pipe.read().partition("\n")
    os.waitpid(pid, 0)
    index = int(said) if said.strip().isdigit() else len(names)  # a probe that died said nothing: import as before
    return (names[:index], names[index], why.strip()) if index < len(names) else (names, "", "")


def _device(config_path: Path) -> str:
    try:
        return str(json.loads(config_path.read_text()).get("device") or "")
    except (OSError, ValueError):
        return ""


def warm_workload(config_path: Path, probe: bool = False) -> list[str]:
    """Import the modules of a run's ``_target_``s (its ``config.json``: the model, loss and dataset, and a
    workload's own training: its LightningModule, step, collate ...), for the libraries they import; nothing is built
    or called, so no run's code leaves state here. Returns the ones that failed (a run that cannot import its model
    says so itself, in its own record); ``probe``: as ``preload_fork_safe``."""
    try:
        config = json.loads(config_path.read_text())
        values = config.get("workload") or {}
    except (OSError, ValueError):
        return [str(config_path)]
    # every _target_ node's module (a LightningModule's imports Lightning: seconds a run on a 2-core CPU) but the
    # optimizer's, torch's own (OPTIMIZER_IMPORTS); here: the launcher's parent imports this module, not the settings
    from harness.config.workload import TARGET_NODES

    nodes = [node for node in TARGET_NODES if node != "optimizer"]
    names = [node["_target_"].rsplit(".", 1)[0] for node in (values.get(k) for k in nodes)
             if isinstance(node, dict) and isinstance(node.get("_target_"), str) and "." in node["_target_"]]
    reference = trimmed_imports.reference_only(values)
    # its run builds a torch optimizer (a user's model's too): torch's own imports, probed apart, so that a library
    # that leaves the launcher unsafe to fork (MONAI on a GPU image) does not leave them to every run too
    first = OPTIMIZER_IMPORTS if (config.get("measure") or {}).get("mode") != "loader" else ()
    try:
        failed = preload_fork_safe(first, probe)
        with trimmed_imports.trimmed(reference):
            return failed + preload_fork_safe(names, probe)
    finally:
        stop_blas_threads()


def _learn(path: Path, probe: bool = False) -> bool:
    """Import what the sweep's first run imported (its workload's libraries), once it has ended; ``probe``: as
    ``preload_fork_safe``."""
    try:
        names = json.loads(path.read_text())
        path.unlink()
    except (OSError, ValueError):
        return False  # a run that did not get to its end: the next one reports
    preload_fork_safe(names, probe)
    return True


CODE_CHANGED = "the code changed since the launcher imported it"
TRIMMED = "the launcher imported MONAI for a reference workload"


def trimmed_for_another(request: dict) -> str:
    """Why a run of ``request`` must not fork from here ("" when it may): MONAI was imported here trimmed for a
    reference workload (``harness.workload.trimmed_imports``) and the run's workload is a user's."""
    if not trimmed_imports.TRIMMED:
        return ""
    try:
        values = json.loads((Path(request["job"]) / "config.json").read_text()).get("workload") or {}
    except (OSError, ValueError, KeyError, TypeError):
        values = {}
    if trimmed_imports.reference_only(values):
        return ""
    return f"{TRIMMED} (without {trimmed_imports.trimmed_names()}), and this run's workload is not one"


def source_stamps() -> dict[str, int]:
    """The modification time of every source file imported here that is not installed with Python (the harness's
    own, the models', a user's workload): a fork must run the code on disk, as a fresh process would."""
    installed = tuple({sys.prefix, sys.base_prefix, sys.exec_prefix})
    stamps = {}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if path and path.endswith(".py") and not path.startswith(installed):
            try:
                stamps[path] = os.stat(path).st_mtime_ns
            except OSError:
                continue
    return stamps


def changed_source(stamps: dict[str, int]) -> str:
    """Why the code imported here is no longer the code on disk ("" when it is)."""
    for path, stamp in stamps.items():
        try:
            now = os.stat(path).st_mtime_ns
        except OSError:
            now = None
        if now != stamp:
            return f"{CODE_CHANGED} ({path})"
    return ""


def unsafe_to_fork() -> str:
    """Why this process must not fork now ("" when it may): one thread only, no CUDA, no process of its own."""
    stop_blas_threads()
    threads = _threads()
    if len(threads) != 1:
        own = any(t.startswith("cuda") for t in threads)  # the driver names its threads cuda...
        return f"{len(threads)} threads in the launcher: {', '.join(sorted(threads))}" + (
            " (a thread of the CUDA driver's: an import initialised NVML or CUDA here)" if own else "")
    if _cuda_initialized():
        return "CUDA is initialised in the launcher"
    # the driver itself, which a library may have initialised (a device count) without torch knowing: a fork can
    # never use CUDA after its parent initialised the driver; merely mapped (never initialised), it forks as a
    # DataLoader does
    cuda = driver.cuda_state()
    if cuda not in ("", "mapped"):
        return cuda + (f" (the driver loaded by importing {DRIVER_LOADED_BY[0]})" if DRIVER_LOADED_BY else "")
    driver.shutdown_nvml()  # a run starts with NVML not initialised, as a fresh process does
    if _children():
        return "a process the launcher started is still running"
    return ""


def _driver_loaded() -> bool:
    return bool(driver.mapped("libcuda", "libcuda.so"))


def _cuda_initialized() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


def stop_blas_threads() -> None:
    """Stop the thread pool of every OpenBLAS loaded here, as its own fork handler does (it starts again on the
    next threaded call, in the run): numpy's and scipy's start one when imported."""
    for lib in driver.mapped("openblas", ""):
        try:
            ctypes.CDLL(lib).blas_thread_shutdown_()
        except (OSError, AttributeError):
            pass


def _threads() -> list[str]:
    """This process's threads, as ``name(tid)``."""
    found = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                found.append(f"{f.read().strip()}({tid})")
        except OSError:
            continue
    return found


def _children() -> list[str]:
    try:
        with open(f"/proc/self/task/{os.getpid()}/children") as f:
            return f.read().split()
    except OSError:
        return []


def _fork_run(request: dict, fds: list[int], sock: socket.socket, sweep_dir: str,
              resident_pages: list[tuple[int, int]], report_imports: bool) -> int:
    """Fork the run; in the fork, become it (never returns there)."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        gc.enable()  # the run's collector on, as a fresh process's (off in the launcher's imports only)
        code = 1  # as a fresh interpreter ends on an exception
        try:
            resident.populate(resident_pages)
            code = _become_run(request, fds, sock, sweep_dir, report_imports)
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    for fd in fds:
        os.close(fd)
    return pid


def _become_run(request: dict, fds: list[int], sock: socket.socket, sweep_dir: str, report_imports: bool) -> int:
    """In the fork: a session of its own, the run's log, folder and environment, then the child's own main."""
    os.setsid()
    sock.close()
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.close(null)
    os.chdir(request["cwd"])
    os.environ.clear()  # exactly the environment a fresh child would get (the parent's, and the run's own keys)
    os.environ.update(request["env"])
    if fds:
        os.environ[channel.CHANNEL_ENV] = str(fds[0])
    sys.argv = list(request["argv"])
    from harness.run.child import main as child  # the measuring modules: the zygote preloads them, its parent never

    code = child.main(request["job"])
    child.remove_scratch()
    if report_imports:
        _report_imports(Path(sweep_dir) / f"imports-{os.getpid()}.json")
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def _report_imports(path: Path) -> None:
    try:
        path.write_text(json.dumps(list(sys.modules)))
    except OSError:
        pass


if __name__ == "__main__":
    exit_code = main(*sys.argv[1:3])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)  # without the interpreter's teardown of torch and MONAI (a second or more): the parent waits
