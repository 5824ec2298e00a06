"""What the harness costs the training it measures (the aim: <= 1%): its throughput against a plain loop.

    python benchmarks/overhead.py [--rounds 5] [--inproc-rounds 100] [--bf16] [--workloads resnet50,unet3d]
                                  [--steps N] [--inproc-steps N] [--sequential] [--control] [--loop-rounds 20]
    python benchmarks/overhead.py --as-users [--rounds 12] [--workloads ...] [--mode model|train] [--data ...]
                                  [--labels int64|uint8] [--step-fn] [--flops]
    python benchmarks/overhead.py --hook-cost [--rounds 40] [--steps 2000]

The two sides, per workload at the smoke size (``measure.mode=model``: one batch kept on the device, so no loader
work):

* the harness, as a user runs it: ``python -m harness run ...``, its parent (polls, sampling, progress display)
  included, reading ``samples_per_s``, ``measured_s`` and ``window_start_unix`` from the stored record;
* a plain hand-written loop of the same model, batch, optimizer and precision, built from the same builders,
  with the same warm-up and the same loss reads (step 0 and every ``log_every_n_steps``), and nothing else: no
  thread, no progress file, no parent.

It measures four ways, because on a shared machine no single one resolves 1%:

1. End to end, fresh processes. Paired (a CPU with >= 2 CPUs): each side runs pinned to one half of the CPUs
   (the harness's parent with its child) while a reference plain loop steps on the other half, keeping each
   step's end time; a side's speed is its throughput over the reference's within its own measured window, so
   the machine's speed of that moment (which wanders by 10-30% over seconds on a shared host, on both CPUs at
   once) divides out. A round: both sides on the first half, then on the second (a faster CPU favours neither);
   its ratio is harness speed / plain speed, geometric means. ``--control`` adds an A/A round (the plain loop in
   the harness's place): the method's own noise and bias. Sequential (``--sequential``, and on CUDA, where both
   sides would share the device): one fresh process after the other, the order flipping every round.
2. In one process, on one model: the harness's measuring loop (``train_and_measure``, the function its child
   runs, writing the child's markers, while a poller process does what the parent does: its own wait loop and
   display) against the plain loop on the same model, optimizer and batch, in blocks of a second or two, A B B A
   a round after one unkept round, a garbage collection and the same warm-up before every block; each side's page
   faults a step and the poller's CPU in the windows are counted. Fresh processes differ by a few % in speed (a
   model built again lands elsewhere in memory); one model on both sides removes that, and fine alternation
   removes the machine's drift.
3. The measuring loop's own cost per step, in microseconds: the same in-process alternation on a tiny model.
4. Accounted: the parent's CPU share (``parent_cpu_pct``, charged in full) plus the loop's cost.

Each ratio is printed per round, with the median, a distribution-free 95% band of the median (the confidence
interval from the rounds' order statistics, ``overhead_parts/stats.py``), and a verdict only from >= 6 rounds:
">= 0.99 shown" when the whole band is above 0.99, "below 0.99", or "inconclusive".

Two more, each on its own: ``--as-users``, ``harness run`` against a training script of the user's own
(``overhead_parts/as_users.py``), and ``--hook-cost``, the step hook's own cost: a user's step
(``workload.step``) doing exactly ``loss_fn(model(x), y)`` against the default step, both through the measuring
loop on the tiny model of 3., in microseconds a step and as a ratio of step times (``overhead_parts/hook_cost.py``).
The parts, one module per way of measuring, are in ``overhead_parts/``.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    if argv[:1] == ["--poll"]:  # the harness parent's stand-in: never loads torch, as the parent does not
        from overhead_parts import poller

        return poller.main(argv[1:])
    from overhead_parts import cli

    return cli.main(argv, __doc__.split("\n")[0])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
