"""One run in a fresh process, in two rooms by where the code runs.

  parent/    what runs in the process that asks for a measurement and never trains: the settings resolved, the
             child started (forked from the warm launcher, or a fresh interpreter, or torch's launcher), followed
             by its progress and the clock, killed with its whole tree, and its result turned into a record
  child/     what runs in the measured process: the measured loop and its phases, the step, when the window
             closes, compile facts, ranks, faults, the profile after the window, and the one declaration of what a
             run measured (``summary``); its code is the code fingerprint (``parent/fingerprint.py``)
  monitor/   reads of the measured process: from outside by the parent (its sampler: memory through psutil, the GPU
             through NVML) and at the window's two edges by the child itself (CPU clocks, GPM)

The child imports nothing of parent/ (tests/test_layers.py); the parent reads the child's declarations (its outcome
statuses, its ``Summary``, the progress channel's protocol).
"""
