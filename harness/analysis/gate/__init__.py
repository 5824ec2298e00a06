"""The CI gate: did a change make a config slower (or use more memory) than a threshold allows?

Imports ``stats`` and the store, nothing of ``views``.

* ``rule``: the one rule that calls a config "regressed" (one-sided against the threshold, Holm over configs).
* ``check``: ``check --baseline``: which records are compared, and how each config is judged.
* ``check_throughput``: a check's throughput verdicts on the rung x round model (``stats.checkstats``).
* ``sessions``: the variance between days that one day's runs cannot show (a saved baseline of another day).
* ``paired``: ``check --against REF``: both trees measured in the same rounds, one log ratio a round.
* ``thresholds``: the thresholds by workload or ladder, and ``BadInput``.
* ``baseline``: baseline files (a sweep's records saved under a name).
* ``check_formats``, ``paired_formats``: each check's result as text, JUnit XML or JSON.
* ``verdicts``: what each check decided, kept for the history page.
"""
