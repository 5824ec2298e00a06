"""``python -m harness guides [--check]``: write docs/guides.md, the guides' map, from ``harness/conf/guides.yaml``,
the ladders and the records under results/ (``harness.analysis.views.guides``); ``--check`` writes nothing and
exits 1 when the page differs from what it would write. Run from the repository's root. No torch, no Hydra."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.analysis.views import guides
from harness.commands.console import refuse
from harness.fileio import write_text_atomic


def main(command: str, argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m harness {command}", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/guides.md differs; write nothing")
    parser.add_argument("--root", default=".", help="the repository's root (default: the current folder)")
    args = parser.parse_args(argv)
    root = Path(args.root)
    if not (root / "docs").is_dir():
        return refuse(ValueError(f"--root {args.root}: no docs/ folder there; run from the repository's root"))
    try:
        page = guides.render_page(root)
    except ValueError as exc:
        return refuse(exc)
    path = root / guides.PAGE
    if args.check:
        same = path.is_file() and path.read_text() == page
        print(f"{guides.PAGE}: {'up to date' if same else 'differs from what `python -m harness guides` writes'}")
        return 0 if same else 1
    write_text_atomic(path, page)
    print(f"wrote {guides.PAGE}")
    return 0
