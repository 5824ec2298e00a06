"""Analysis of stored results, in three packages by job, each importing only the ones above it in this list:

* ``stats``: the statistics model (the rung x round model, sequential looks, noise calibrations, Holm).
* ``gate``: the CI gate (``check`` against a saved baseline or ``--against`` a commit, its thresholds and answers).
* ``views``: what people read (the table, plots, compare, the report, the history, profiles, the diagnosis).

Reads the store, and a ladder's file for its claims and notes (``harness.config.ladder``), with pandas / pyarrow /
matplotlib / scipy: never imports torch or Hydra, so it runs on a laptop over results copied from a cluster.
"""
