"""The measured process: everything here runs inside the child (``python -m harness.run.child JOB_DIR``, or forked
from the warm launcher); this code, with harness_models/ and every harness module they import, is what the code
fingerprint covers.

  main.py       the entry point: read the job, measure, write the result, the progress markers
  measure.py    the measured run: set up, warm up, open the window, step, close it
  hooks.py      per-step work built before the loop: the training step's calls and every knob's, in one order
  step.py       a step's forward and backward, the optimizer's step, the logging step
  stopping.py   when the warm-up ends and the measured window closes
  compiled.py   what torch.compile did: compile time, CUDA-graph skips, the step marker
  ranks.py      one rank of a multi-device run: its process group; every rank's measurement gathered to rank 0
  faults.py     the debug faults, each on its real counterpart's path
  profiling.py  the profile of a few more steps after the window has closed
  device_memory.py  device memory outside the caching allocator, the cuDNN workspace cap the run had
  summary.py    what a run measured: per-step samples, the child's own reads, the ``Summary`` a record is built from
  outcome.py    how a run ended (the child's exceptions; the parent's timeouts and deaths read the same statuses)
  channel.py    the progress channel: the child's end writes a marker per phase, the parent's end blocks on it

Nothing here imports harness.run.parent.
"""
