"""What the exit code of ``python -m harness COMMAND`` means: one meaning per code, the same in every command."""

from __future__ import annotations

OK = 0
FAILED = 1
BAD_INPUT = 2
NOT_STORED = 3
SKIPPED = 4
INTERRUPTED = 128  # plus the signal's number: 130 for Ctrl-C, 143 for SIGTERM

MEANINGS = (
    ("0", "ok: measured and stored (a sweep's failed or skipped rungs are rows of its table, not an error)"),
    ("1", "a run failed (error, oom, nan, timeout), a rung could not start, no verdict or calibration came of the "
          "runs; check: a regression; store verify: a problem"),
    ("2", "bad input, said in one line: nothing was measured"),
    ("3", "a record is not in results_dir (it was full, read-only or gone): it is in the fallback folder or in "
          "harness-unsaved/ of the temp folder, or was printed; `python -m harness store import FILE_OR_JSON` puts "
          "it back"),
    ("4", "run: skipped, the setting cannot act here (tf32 on a CPU): nothing was measured; the record says why"),
    ("128+N", "stopped by signal N (130: Ctrl-C); every finished measurement is stored"),
)


def help_text() -> str:
    """The exit codes as ``--help`` prints them."""
    return "exit codes:\n" + "\n".join(f"  {code:<6} {text}" for code, text in MEANINGS)
