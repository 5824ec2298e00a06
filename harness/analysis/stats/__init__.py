"""The statistics model: what a sweep's or a check's runs say, with the error of saying it kept in check.

The floor of analysis: imports the store and nothing of ``gate`` or ``views``. A new statistic goes here with a
simulation test (docs/contributing.md, "A statistic").

* ``speedup``: what every caller shares: ``Ratio`` (a speedup with its band), its text, verdicts on claims,
  power arithmetic, Holm's step-down.
* ``blocks``: the rung x round model of one sweep (rounds as blocks, one pooled variance, contrasts).
* ``sequential``: ``sweep.repeats=auto``: looks after every round with alpha spending.
* ``checkstats``: ``check``'s current over baseline per config on the rung x round model, with looks.
* ``sweepstats``: one sweep's verdicts from its records (the table and the sweep loop judge with it).
* ``noise_model``: the two-group run-level model, noise calibrations, detectable speedups, the hardware label.
* ``calibration``: which noise calibration a sweep may use, and which it skipped and why.
* ``busy``: when a run's machine was busy (no verdict from it).
* ``bimodal``: runs that land at one of two speeds, named (a calibration's, a check side's).
* ``statsim``: seeded Monte Carlo of the above on simulated sweeps (the tests and docs/statistics.md).
"""
