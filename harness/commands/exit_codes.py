"""What the exit code of ``python -m harness COMMAND`` means: one meaning per code, the same in every command."""

from __future__ import annotations

from harness.analysis.gate import answers

OK = 0
FAILED = 1
BAD_INPUT = 2
NOT_STORED = 3
SKIPPED = 4
BUSY = answers.BUSY  # check: the machine was busy while a config was measured; no verdict
UNDECIDED = answers.UNDECIDED  # check: a config neither shown regressed nor unchanged when the budget ran out
INTERRUPTED = 128  # plus the signal's number: 130 for Ctrl-C, 143 for SIGTERM

MEANINGS = (
    ("0", "ok: measured and stored (a sweep's failed or skipped rungs are rows of its table, not an error); "
          "check: decided, nothing regressed"),
    ("1", "a run failed (error, oom, nan, timeout), a rung could not start, no verdict or calibration came of the "
          "runs; check: a regression (decided); store verify: a problem; machine: not fit to measure"),
    ("2", "bad input, said in one line: nothing was measured; check: also nothing comparable (a baseline of other "
          "hardware, configs that fail on both sides)"),
    ("3", "a record is not in results_dir (it was full, read-only or gone): it is in the fallback folder or in "
          "harness-unsaved/ of the temp folder, or was printed; `python -m harness store import FILE_OR_JSON` puts "
          "it back"),
    ("4", "run: skipped, the setting cannot act here (tf32 on a CPU): nothing was measured; the record says why"),
    ("5", "check: busy, other processes took the machine while a config was measured: no verdict, run it again on "
          "a quiet machine; sweep: every run of its first round was busy, so it stopped there (what it measured is "
          "stored); diagnose: a part was measured on a busy machine: no verdict"),
    ("6", "check: undecided, a config is neither shown slower beyond the threshold nor shown within it when the "
          "budget ran out: more rounds (--budget-min, --max-rounds) decide it; bisect: stopped undecided"),
    ("128+N", "stopped by signal N (130: Ctrl-C); every finished measurement is stored"),
)


def help_text() -> str:
    """The exit codes as ``--help`` prints them."""
    return "exit codes:\n" + "\n".join(f"  {code:<6} {text}" for code, text in MEANINGS)
