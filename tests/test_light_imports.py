"""The imports kept inside functions to keep something off a path, checked on that path: the warm launcher's parent
end loads neither torch, the store nor the settings (the measuring modules are the zygote's to load), the measuring
process imports torch only after its lifeline is set (``harness.run.child.main`` loads none of it), no measuring
command's module loads torch in the parent (a workload's data and its meta-device check import it only for a
workload of the user's), and a sweep loads the export modules only for ``sweep.export``. ONE fresh interpreter, the
imports in that order: what each adds is what it loads itself. The first screens (``--help``), the analysis commands
and a single run's parent before its launcher are checked in test_layers.py and test_launcher_command.py."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tests.conftest import REPO

PATHS = textwrap.dedent("""
    import importlib, json, sys
    HEAVY = ("torch", "torchvision", "monai", "pyarrow", "hydra", "harness.config", "harness.store",
             "harness.run.child.main", "harness.run.child.measure", "harness.run.child.startup",
             "harness.run.child.ranks", "harness.commands.export")
    loaded = {}
    for name in ("harness.run.parent.launcher", "harness.run.child.main", "harness.commands.run",
                 "harness.commands.sweep", "harness.commands.diagnose", "harness.commands.noise",
                 "harness.commands.climb", "harness.commands.fit"):
        importlib.import_module(name)
        loaded[name] = [m for m in HEAVY if m in sys.modules]
    print(json.dumps(loaded))
""")


def test_the_launchers_parent_the_measuring_process_before_its_lifeline_and_the_commands_load_no_torch():
    done = subprocess.run([sys.executable, "-c", PATHS], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded["harness.run.parent.launcher"] == []
    # the child's entry point: the settings, never torch nor the measuring modules before main() sets the lifeline
    assert loaded["harness.run.child.main"] == ["harness.config", "harness.run.child.main"]
    for command in ("run", "sweep", "diagnose", "noise", "climb", "fit"):
        seen = loaded[f"harness.commands.{command}"]
        assert not set(seen) & {"torch", "torchvision", "monai", "harness.run.child.measure",
                                "harness.run.child.startup", "harness.run.child.ranks"}, (command, seen)
        assert "harness.commands.export" not in seen, command  # a sweep without sweep.export: 4 modules fewer
        assert "harness.store" in seen  # the parent's own side is loaded: the check sees a real import
