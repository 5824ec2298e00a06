"""A part's tarball: OUT/PART.tar.gz from its folder in the scratch area, checked against what a slot returns (files
of at most 16 MiB): a log that makes it too big keeps its end, a test report is dropped, and what is still too big
is named."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Protocol

from scripts.gpu_parts import Part


class Context(Protocol):
    """What packing needs of the campaign's context (``gpu_campaign.Context``): where a part's tarball goes, and
    where its folder is."""

    out: Path

    def pack(self, part: Part) -> Path: ...

RETURN_LIMIT_BYTES = 16 * 2**20  # the largest file a slot brings back
LOG_TAIL_BYTES = 2**20  # what is kept of a log that makes the tarball too big


def tar_command(part: Part, ctx: Context) -> list[str]:
    """The command that packs the part's folder into OUT/PART.tar.gz."""
    return ["tar", "-czf", f"{ctx.out}/{part.name}.tar.gz", "-C", str(ctx.pack(part)), "."]


def pack_part(part: Part, ctx: Context, limit: int | None = None) -> bool:
    """OUT/PART.tar.gz from the part's folder, checked against what a slot returns: a log that makes it too big
    keeps only its end; if it is still too big, say which files to drop. True when it is packed and fits."""
    limit = limit or RETURN_LIMIT_BYTES
    folder, tarball = ctx.pack(part), ctx.out / f"{part.name}.tar.gz"
    ctx.out.mkdir(parents=True, exist_ok=True)
    for attempt in range(2):
        if subprocess.run(tar_command(part, ctx)).returncode != 0:
            print(f"could not write {tarball}", file=sys.stderr)
            return False
        problem = size_problem(tarball, folder, limit)
        if not problem:
            break
        print(problem, file=sys.stderr)
        if attempt or not shrink(folder):
            return False
    if os.environ.get("KEEP") != "1":
        shutil.rmtree(folder, ignore_errors=True)
    print(f"wrote {tarball} ({tarball.stat().st_size / 2**20:.2f} MiB)")
    return True


def size_problem(tarball: Path, folder: Path, limit: int = RETURN_LIMIT_BYTES) -> str:
    """"" when ``tarball`` fits what a slot returns; else which files of ``folder`` make it big."""
    size = tarball.stat().st_size
    if size <= limit:
        return ""
    files = sorted((p for p in folder.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size, reverse=True)
    biggest = ", ".join(f"{p.relative_to(folder)} ({p.stat().st_size / 2**20:.1f} MiB)" for p in files[:5])
    return (f"{tarball.name} is {size / 2**20:.1f} MiB, over the {limit / 2**20:.0f} MiB a slot returns, so it would "
            f"not come back. Its largest files: {biggest}. Drop the biggest that are not records "
            f"(results/runs/) from {folder} and pack again: tar -czf {tarball} -C {folder} .")


def shrink(folder: Path) -> list[str]:
    """Cut logs to their last MiB and drop test reports; what was cut or dropped."""
    done = []
    for path in sorted(folder.glob("*.log")):
        if path.stat().st_size > LOG_TAIL_BYTES:
            with open(path, "rb") as f:
                f.seek(-LOG_TAIL_BYTES, os.SEEK_END)
                tail = f.read()
            path.write_bytes(b"[... cut to its last MiB to fit the returned tarball ...]\n" + tail)
            done.append(f"{path.name} (cut to its last MiB)")
    for path in sorted(folder.glob("*.xml")):
        path.unlink()
        done.append(f"{path.name} (dropped)")
    if done:
        print(f"to fit: {', '.join(done)}", file=sys.stderr)
    return done
