"""A model builder for the warm launcher's tests: it notes what the run it is built in sees of the process (its
PID, session, parent) and of the global state an earlier run could have left (a module attribute, torch's thread
count, numpy's global RNG), one JSON line per run in the file ``FORK_PROBE_OUT`` names, then changes that state.

With ``FORK_PROBE_THREAD`` set, importing this module in the warm launcher (which imports what the sweep's first run
imported) starts a thread there, which must make the launcher refuse to fork. With ``FORK_PROBE_DRIVER`` (the path of
a faked CUDA driver library), importing it maps that library and imports MONAI, as MONAI's own import maps the
driver through CuPy on a GPU machine; with ``FORK_PROBE_DRIVER_INIT`` set too, it also initialises the driver."""

from __future__ import annotations

import gc
import json
import os
import sys
import threading
import time

from torch import nn

RUNS_SEEN = 0  # a module attribute each run increments: a run that saw another's would find it above 0

if os.environ.get("FORK_PROBE_THREAD") and getattr(sys.modules.get("__main__"), "__spec__", None) is not None \
        and sys.modules["__main__"].__spec__.name == "harness.run.parent.zygote" \
        and "harness.run.child.main" in sys.modules \
        and not os.environ.get("HARNESS_TIMEOUT_S"):  # the zygote itself, not a run forked from it
    threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()

if os.environ.get("FORK_PROBE_DRIVER") and not os.environ.get("HARNESS_TIMEOUT_S"):  # the launcher, not a run
    import ctypes

    import monai  # noqa: F401

    _driver = ctypes.CDLL(os.environ["FORK_PROBE_DRIVER"])
    if os.environ.get("FORK_PROBE_DRIVER_INIT"):
        _driver.cuInit(0)


def probe_net(in_channels: int = 1, out_channels: int = 2) -> nn.Module:
    global RUNS_SEEN
    import numpy as np
    import torch

    seen = {"pid": os.getpid(), "ppid": os.getppid(), "sid": os.getsid(0), "pgid": os.getpgid(0),
            "runs_seen": RUNS_SEEN, "threads": torch.get_num_threads(), "rng": float(np.random.random()),
            "default_dtype": str(torch.get_default_dtype()), "gc_enabled": gc.isenabled(),
            "gc_frozen": gc.get_freeze_count(), "gc_tracked": len(gc.get_objects())}
    with open(os.environ["FORK_PROBE_OUT"], "a") as f:
        f.write(json.dumps(seen) + "\n")
    RUNS_SEEN += 1
    torch.set_num_threads(1)
    np.random.seed(12345)  # the global RNG, which the harness does not seed
    return nn.Conv3d(in_channels, out_channels, kernel_size=1)
