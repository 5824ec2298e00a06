"""The largest batch that fits, and its speed at each size, behind ``python -m harness fit``.

  * ``search``  the sizes to try (double until out of memory, then bisect) and the ``fit.*`` settings: plain
                Python (no torch, no Hydra), driven in tests by a fake that runs out of memory above a size;
  * ``session`` one fit from start to end: each size of the search in a fresh process (``harness.run``), then
                the sizes that fit as a ladder measured with a sweep's rounds (``harness.sweeps``), resumable;
  * the curve it prints is ``harness.analysis.views.fit_curve``, read from the store alone.

Why fresh processes: an in-process finder (Lightning's BatchSizeFinder, accelerate's find_executable_batch_size)
leaves the allocator's cache and fragmentation of the sizes it tried in the process that then trains, which can
run out of memory at the size it was told fits; here every size starts from an empty device, as the training will.
"""
