"""docs/contributing.md's layout names every module under harness/, each in its folder's part of the tree: a module
added without a line there fails here, and so does a line naming a module that is gone."""

from __future__ import annotations

import re

from tests.conftest import REPO

PAGE = REPO / "docs" / "contributing.md"
TOP = re.compile(r"^  (\S+?)(/|\.py)\s")  # a line of the tree naming a folder or a module of harness/ itself


def _tree() -> str:
    text = PAGE.read_text()
    start = text.index("```\nharness/\n") + len("```\nharness/\n")
    return text[start:text.index("```", start)]


def _parts() -> dict[str, str]:
    """The tree's text for each folder of harness/ (``run``: its lines, nested folders included) and for the
    modules of harness/ itself (``""``)."""
    parts: dict[str, str] = {"": ""}
    current = None
    for line in _tree().splitlines():
        top = TOP.match(line)
        if top:
            current = top.group(1) if top.group(2) == "/" else ""
            parts.setdefault(current, "")
        if not line.startswith("  ") or current is None:
            current = None if not line.startswith("  ") else current
            continue
        parts[current] += line + "\n"
    return parts


def _modules() -> list[tuple[str, str]]:
    """(the folder of harness/ it is under, its file name) of every module but the packages' faces."""
    found = []
    for path in sorted((REPO / "harness").rglob("*.py")):
        rel = path.relative_to(REPO / "harness")
        if path.name == "__init__.py":
            continue
        found.append((rel.parts[0] if len(rel.parts) > 1 else "", path.name))
    return found


def test_the_layout_names_every_module_of_harness_in_its_folder():
    parts = _parts()
    missing = [f"harness/{folder + '/' if folder else ''}...{name}" for folder, name in _modules()
               if not re.search(rf"(?<![\w.]){re.escape(name)}", parts.get(folder, ""))]
    assert not missing, f"docs/contributing.md's layout does not name: {missing}"


def test_the_layout_names_no_module_that_is_gone():
    named = {name for text in _parts().values() for name in re.findall(r"(?<![\w./])(\w+\.py)\b", text)}
    there = {path.name for path in (REPO / "harness").rglob("*.py")}
    assert not named - there, f"docs/contributing.md names modules that do not exist: {sorted(named - there)}"
