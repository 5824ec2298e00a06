"""The parts of ``benchmarks/overhead.py`` (what the harness costs the training it measures), one module per way
of measuring it: ``fresh`` (end to end, fresh processes), ``inproc`` (in one process: the measuring loop against a
plain one, the loop's own cost per step), ``hook_cost`` (a user's step through the hook against the default step),
``as_users`` (``harness run`` against a user's own script), with the plain loop (``plain``), the parent's stand-in
(``poller``), the statistics (``stats``), the printed sections (``report``) and the command line (``cli``)."""
