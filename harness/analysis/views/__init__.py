"""What people read: tables, plots, comparisons, reports, the history and profiles, from the store alone.

Imports ``stats``, ``gate`` and the store.

* ``table``: a sweep's (or a campaign's) speedup table: rows of numbers, ratios, verdicts and notes, made once.
* ``rows``: the table's frozen types (a rung's row, a group's, the table, a campaign's), which every renderer takes.
* ``render``: the table as markdown, CSV or HTML.
* ``claims``: the claims a sweep is judged against (stored with its records, or from its ladder's file).
* ``components``: what a change did to each part of the step (compute, loader) beside the whole.
* ``data_part``: a claim about the loader judged on the loop's pace (its wait before and after, from all runs).
* ``epochs``: an epoch boundary's cost, and a speedup at the guide's epoch length.
* ``compare``: two or more sweeps side by side.
* ``plots``: a sweep's plots (matplotlib).
* ``report``: one self-contained HTML report of a sweep.
* ``history``, ``history_page``: every config's throughput over commits, and each gate's verdict, as a page.
* ``profile``: reading profiles, diffing two, what bounds a step.
* ``diagnosis``: data-bound or compute-bound, from the loader alone, the model alone and the full step.
"""
