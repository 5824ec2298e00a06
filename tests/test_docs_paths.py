"""Every path the README and the docs name exists: a link's target, and a repository path in backticks
(``harness/...``, ``docs/...``, ``examples/...``, ...). A page that names a moved file fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
ROOTS = ("harness/", "harness_models/", "docs/", "examples/", "scripts/", "benchmarks/", "tests/", ".ci/")
LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE = re.compile(r"`([^`\s]+)`")


def _named(page: Path) -> set[tuple[str, Path]]:
    """(the path as written, the file it names) of every link and backticked repository path on ``page``."""
    text = page.read_text()
    named = set()
    for target in LINK.findall(text):
        path = target.split("#")[0]
        if path and not re.match(r"[a-z]+:", path):
            named.add((target, (page.parent / path).resolve()))
    for token in CODE.findall(text):
        path = token.split(":")[0].rstrip(".,;")
        if path.startswith(ROOTS) and not re.search(r"[<>{}*|]|\.\.\.|\b[A-Z]{2,}\b", path):  # no pattern, no NAME
            named.add((token, REPO / path))
    return named


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_path_a_page_names_exists(page):
    missing = sorted(written for written, path in _named(page) if not path.exists())
    assert not missing, f"{page.name} names paths that do not exist: {missing}"
