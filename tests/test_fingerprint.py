"""The code fingerprint (part of env_key): the measured process's code, found from its imports. Editing what the
child runs re-keys stored runs; editing what it never runs, moving a file or rewording a docstring does not."""

from __future__ import annotations

import shutil
from pathlib import Path

from harness.run.parent import fingerprint
from tests.conftest import REPO

TREE = {
    "harness/__init__.py": "",
    "harness/fileio.py": "def write(path, text):\n    return path, text\n",
    "harness/run/__init__.py": "",
    "harness/run/child/__init__.py": "",
    "harness/run/child/measure.py": (
        '"""The measured loop."""\n\nfrom harness.run.child import steps\n\n\n'
        'def loop(n):\n    """Every step."""\n    return [steps.one() for _ in range(n)]  # the core\n'),
    "harness/run/child/steps.py": "from harness import fileio\n\n\ndef one():\n    return fileio.write('a', 'b')\n",
    "harness/run/parent/__init__.py": "",
    "harness/run/parent/isolate.py": "from harness.run.child import measure\n\nTIMEOUT_S = 10\n",
    "harness/analysis/__init__.py": "",
    "harness/analysis/table.py": "COLUMNS = ('step_ms',)\n",
    "harness/workload/__init__.py": "",
    "harness/config/__init__.py": "",
    "harness_models/__init__.py": "",
    "harness_models/nets.py": "WIDTH = 8\n",
}


def _tree(root: Path) -> Path:
    for rel, text in TREE.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _edit(root: Path, rel: str, old: str, new: str) -> None:
    path = root / rel
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_the_fingerprint_covers_what_the_child_runs_and_what_it_imports_nothing_else(tmp_path):
    root = _tree(tmp_path)
    assert fingerprint.measured_files(root) == [
        "harness/__init__.py", "harness/fileio.py", "harness/run/__init__.py", "harness/run/child/__init__.py",
        "harness/run/child/measure.py", "harness/run/child/steps.py", "harness_models/__init__.py",
        "harness_models/nets.py"]
    before = fingerprint.code_fingerprint(root)
    _edit(root, "harness/run/parent/isolate.py", "TIMEOUT_S = 10", "TIMEOUT_S = 20")  # the parent's
    _edit(root, "harness/analysis/table.py", "'step_ms',", "'step_ms', 'samples_per_s'")  # reads the store
    assert fingerprint.code_fingerprint(root) == before


def test_a_change_to_the_childs_code_or_to_a_helper_it_imports_changes_the_fingerprint(tmp_path):
    root = _tree(tmp_path)
    seen = {fingerprint.code_fingerprint(root)}
    for rel, old, new in [("harness/run/child/measure.py", "range(n)", "range(n + 1)"),
                          ("harness/fileio.py", "return path, text", "return text, path"),  # imported by the child
                          ("harness_models/nets.py", "WIDTH = 8", "WIDTH = 16")]:
        _edit(root, rel, old, new)
        seen.add(fingerprint.code_fingerprint(root))
    assert len(seen) == 4


def test_moving_a_file_to_another_package_or_rewording_its_comments_keeps_the_fingerprint(tmp_path):
    root = _tree(tmp_path)
    before = fingerprint.code_fingerprint(root)
    # steps.py moves from run/child/ to workload/: its file moves and its importer's import line follows it
    shutil.move(root / "harness/run/child/steps.py", root / "harness/workload/steps.py")
    _edit(root, "harness/run/child/measure.py", "from harness.run.child import steps",
          "from harness.workload import steps")
    assert "harness/workload/steps.py" in fingerprint.measured_files(root)
    assert fingerprint.code_fingerprint(root) == before
    _edit(root, "harness/run/child/measure.py", '"""Every step."""', '"""Every step, timed."""')
    _edit(root, "harness/run/child/measure.py", "# the core", "# the fixed core")
    assert fingerprint.code_fingerprint(root) == before
    (root / "harness/workload/steps.py").rename(root / "harness/workload/one_step.py")  # a new name is new code
    _edit(root, "harness/run/child/measure.py", "import steps", "import one_step as steps")
    assert fingerprint.code_fingerprint(root) != before


def test_the_repositorys_fingerprint_holds_the_child_side_and_leaves_the_parent_out():
    files = fingerprint.measured_files(REPO)
    for rel in ("harness/run/child/measure.py", "harness/run/monitor/cpu.py", "harness/workload/knobs.py",
                "harness/config/schema.py", "harness/fileio.py", "harness_models/segmentation3d.py"):
        assert rel in files, rel
    assert not [f for f in files if f.startswith(("harness/run/parent/", "harness/analysis/", "harness/commands/",
                                                  "harness/sweeps/", "harness/climb/", "harness/store/"))]
    assert "harness/config/ladder.py" not in files and "harness/workload/preflight.py" not in files  # the parent's
    modules = fingerprint.source_modules(REPO)
    names = [fingerprint.own_name(m, modules) for m in fingerprint.measured_modules(modules)]
    assert len(names) == len(set(names)), "two measured modules share a name: an import of one would read as the other"


def test_a_process_that_asked_before_sees_a_module_added_even_in_a_folder_that_held_none(tmp_path):
    """The process keeps the fingerprint while no folder or module of the trees changed (a sweep asks at every
    rung): a module added, here the first of its folder, is still seen at the next call."""
    root = _tree(tmp_path)
    (root / "harness_models/blocks").mkdir()
    before = fingerprint.code_fingerprint(root)
    assert fingerprint.code_fingerprint(root) == before
    (root / "harness_models/blocks/conv.py").write_text("KERNEL = 3\n")  # the reference models are all measured
    after = fingerprint.code_fingerprint(root)
    assert after != before
    (root / "harness_models/blocks/conv.py").unlink()
    assert fingerprint.code_fingerprint(root) == before
