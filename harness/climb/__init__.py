"""The auto-tuner behind ``python -m harness climb``: greedy coordinate ascent over training settings.

  * ``space``   the axes (settings the climb may change), their values and order, the ``climb.*`` settings;
  * ``ascent``  the decisions and the budget: plain Python (no torch, no Hydra), a generator of the next
                measurement, so a whole climb can be driven by simulated measurements in tests;
  * ``policy``  the climb as a policy over the session engine (``harness.session``): one run a turn, a
                candidate against the incumbent in ABBA order, the ascent's next request after each look;
                what a person sees is a listener of its events;
  * ``trials``  one run: a fresh process (``harness.run``, ``harness.sweeps``), or a copy of an earlier run
                from the store;
  * ``output``  the trajectory, the ladder file the climb writes, the commands it prints;
  * ``session`` one climb from start to end (``harness.commands.climb`` only turns Hydra's config into it).

The package measures, so it sits above ``harness.sweeps`` and ``harness.run`` and uses the statistics
of ``harness.analysis``; the analysis never imports it.

The climb, and why it is built this way:
  * **One knob at a time, from the user's settings.** Every candidate changes one setting of the
    incumbent (the best settings so far), so an accepted step is a ladder rung and the result re-runs as
    a ladder (``sweep +ladder=...``).
  * **Ordered by expected gain** (:data:`AXES`, priors per device: the guides' claims on GPUs, this
    repository's measurements on a CPU), so a short budget is spent on the likely wins first.
  * **Accepted only when faster beyond noise AND by a minimum effect** (pyperf's rule: significant is not
    enough, 0.5% is not worth a setting): the 95% band of candidate / incumbent, from the one noise model
    (``harness.analysis.stats.noise_model``), must exclude 1x, and the ratio must reach ``1 + min_effect``.
  * **Kept only when it holds again**: an accepted change is measured once more with fresh runs and kept only
    when that band too lies above 1x, and the climb ends with the start and the best side by side; when that
    check does not show the best faster, only what held is kept (~10 candidates tried must not leave a lucky one).
  * **Ordinal axes walk while they win**: the batch doubles while each doubling is accepted; an
    out-of-memory ends the batch axis for the rest of the climb (a larger batch cannot fit either); the
    largest batch that ran and won is kept. Loader workers grow the same way, up to the usable CPUs.
  * **Passes** repeat over every axis until one pass accepts nothing (settings interact: more workers
    may pay only at a bigger batch) or the budget is spent. A knob that cannot act on this device
    (TF32 on a CPU) is skipped once and not proposed again.
  * **Settings that change the model** (width, patch size, deep supervision) are not in the space: a
    faster but different model is not a speed-up of this training.
"""
