"""Analysis of stored results: tables, plots, comparisons, reports, regression checks.

Reads the store alone (pandas / pyarrow / matplotlib / scipy): never imports torch or Hydra, so
it runs on a laptop over results copied from a cluster.
"""
