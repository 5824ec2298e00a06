"""``python -m harness`` and the ``harness`` console script: this tool's command line, once the ``harness`` package
imported is known to be this tool's and not the unrelated distribution of that name on the package index."""

import os
import sys

import harness

DISTRIBUTION = "training-harness"


def main() -> int:
    current_folder_first(sys.path, os.getcwd())
    wrong = wrong_package()
    if wrong:
        print(f"error: {wrong}", file=sys.stderr)
        return 2
    from harness.cli import main as cli_main  # only once the package is known to be this tool's (it may not be)

    return cli_main()


def current_folder_first(path: list[str], cwd: str) -> None:
    """The current folder first on the import path, as ``python -m`` puts it there, so that the console script
    imports the user's own packages (``models.ConvNet``) as ``python -m harness`` does; not under ``python -P``
    (``PYTHONSAFEPATH``), which leaves it off for ``python -m`` too. ``path`` is changed in place."""
    if sys.flags.safe_path:
        return
    here = os.path.realpath(cwd)
    if not any(os.path.realpath(p or os.curdir) == here for p in path):
        path.insert(0, cwd)


def wrong_package() -> str:
    """One line when the ``harness`` package imported is not this tool's ("" when it is)."""
    if getattr(harness, "DISTRIBUTION", None) == DISTRIBUTION and _cli_is_a_module():
        return ""
    where = next(iter(getattr(harness, "__path__", [])), "?")
    return (f"the package 'harness' imported from {where} is not this tool's (distribution {DISTRIBUTION}): the "
            f"distribution 'harness' installs another package of that name; remove it with pip uninstall -y harness, "
            f"then install {DISTRIBUTION} again (pip install --force-reinstall, from where you installed it)")


def _cli_is_a_module() -> bool:
    """The other distribution's files in the same folder leave a ``harness/cli/`` package, which wins over ours."""
    import importlib.util

    spec = importlib.util.find_spec("harness.cli")
    return bool(spec and spec.origin and spec.origin.endswith("cli.py"))


def run() -> None:
    """The process's whole life: ``main()``, then :func:`exit_now` with its exit code; under a profiler or a
    debugger (``python -m cProfile -m harness ...``), a normal exit, so that it can report."""
    try:
        code = main()
    except BrokenPipeError:
        code = reader_gone()
    if sys.getprofile() is not None or sys.gettrace() is not None:
        raise SystemExit(code)
    exit_now(code)


def reader_gone() -> int:
    """The reader of stdout stopped early (``run --help | head``): no traceback, and nothing more written into the
    closed pipe (the last flush goes nowhere); the exit code of a command stopped by SIGPIPE."""
    import signal

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass  # a stdout without a file descriptor has nothing left to flush into a closed pipe
    return 128 + signal.SIGPIPE


def exit_now(code: int | None) -> None:
    """End the process as the interpreter would, less its module teardown (0.7 s on a 2-core CPU after a command
    that loaded pandas and scipy, more than some commands' own work): threads joined as at a normal exit, the
    ``atexit`` functions run (the loggers, multiprocessing's children, weakref finalizers), the output flushed,
    then ``os._exit``. Only at the real end of a process: a caller of ``main()`` (a test) keeps its interpreter."""
    import atexit
    import threading

    shutdown = getattr(threading, "_shutdown", None)  # what the interpreter does first at exit: join the threads
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed, or a closed pipe: nothing more can be said through it
            pass
    os._exit(code if isinstance(code, int) else (0 if code is None else 1))


if __name__ == "__main__":
    run()
