"""The parent's side of a run: everything here runs outside the measured process.

  runner.py       one run end to end: resolve the settings for this machine, measure in isolation, store
  isolate.py      a resolved config run in a child with a timeout; always a record back
  launcher.py     how a child starts: forked from the sweep's warm launcher, or a fresh interpreter
  zygote.py       the warm launcher itself: imports torch and the measuring modules once, forks each run
  launch.py       devices >= 2: torch's launcher as the process between the parent and the ranks
  processes.py    a run's process tree killed together and waited for
  phases.py       where a run's wall time went, from the child's progress markers; a sweep's duty cycle
  env.py          the environment a run was measured in (hardware, versions, threads)
  fingerprint.py  the code fingerprint: the child side's code, by module name and content
  torch_facts.py  what the parent knows of torch without importing it
"""
