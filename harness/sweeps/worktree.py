"""The two code trees of ``check --against REF``: the working tree as it is, and a git worktree of REF.

The measured repository is the one the command runs in (``git rev-parse --show-toplevel`` of the current
folder): the user's repository holding their ``_target_`` model, or this repository for the built-in
workloads. REF's tree is ``git worktree add --detach`` under the results folder (``<results>/.against/<sha>``),
made once and reused by later checks against the same commit; git's own refusal (an unknown REF, a shallow
clone without it) is a ``GitError`` with git's message. Nothing here changes the working tree.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

AGAINST_DIR = ".against"  # under the results folder: REF worktrees and each check's scratch stores
GIT_TIMEOUT_S = 300


class GitError(ValueError):
    """git refused; the message is one line with git's own words."""


@dataclass(frozen=True)
class Tree:
    """One side's code: its folder and commit; ``dirty``: uncommitted changes to tracked files, measured as they are."""

    root: Path
    commit: str
    dirty: bool = False

    @property
    def label(self) -> str:
        """The commit as the records keep it (``against_commit``): 40 hex digits, ``-dirty`` for uncommitted changes."""
        return self.commit + ("-dirty" if self.dirty else "")


def git(args: list[str], cwd: Path) -> str:
    """git's stdout (stripped); GitError with its message when it fails."""
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=GIT_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as exc:
        raise GitError(f"git {' '.join(args)} could not run in {cwd}: {exc}") from None
    if done.returncode != 0:
        lines = [line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip()]
        raise GitError(" / ".join(lines[-2:]) or f"git {' '.join(args)} exited {done.returncode}")
    return done.stdout.strip()


def repo_root(folder: Path) -> Path:
    """The top of the git repository holding ``folder`` (GitError outside one)."""
    try:
        return Path(git(["rev-parse", "--show-toplevel"], folder)).resolve()
    except GitError as exc:
        raise GitError(f"check --against measures the git repository of the current folder, and {folder} is in "
                       f"none ({exc}); run it inside your repository") from None


def resolve_commit(root: Path, ref: str) -> str:
    """The full sha of the commit ``ref`` names in the repository at ``root`` (GitError with git's message)."""
    if not ref or ref.startswith("-"):
        raise GitError(f"--against {ref!r}: expected a commit, branch or tag of {root} (e.g. HEAD~1, main)")
    try:
        return git(["rev-parse", f"{ref}^{{commit}}", "--"], root).splitlines()[0]
    except GitError as exc:
        raise GitError(f"--against {ref!r} is not a commit of {root}: {exc} (a shallow CI checkout needs "
                       "fetch-depth: 0)") from None


def working_tree(root: Path) -> Tree:
    """The working tree's commit, and whether tracked files have uncommitted changes."""
    commit = git(["rev-parse", "HEAD"], root)
    status = git(["status", "--porcelain", "--untracked-files=no"], root)
    return Tree(root, commit, dirty=bool(status))


def ref_tree(root: Path, commit: str, results_dir: Path) -> Tree:
    """A clean worktree of ``commit`` under ``<results>/.against/<sha>``: reused when it is there and clean,
    made with ``git worktree add --detach`` otherwise (GitError with git's message when git refuses)."""
    folder = against_dir(results_dir)
    path = (folder / commit).resolve()
    if (path / ".git").exists():
        try:
            at = git(["rev-parse", "HEAD"], path)
            changed = git(["status", "--porcelain", "--untracked-files=no"], path)
        except GitError:
            at, changed = "", "unreadable"
        if at == commit and not changed:
            return Tree(path, commit)
        git(["checkout", "--force", "--detach", commit], path)  # someone edited it: REF's code as committed
        return Tree(path, commit)
    git(["worktree", "prune"], root)  # a worktree folder deleted by hand leaves an entry that blocks the path
    git(["worktree", "add", "--detach", str(path), commit], root)
    return Tree(path, commit)


def against_dir(results_dir: Path) -> Path:
    """``<results>/.against``, ignored by git (its own ``.gitignore``), so that the working tree stays as it was."""
    folder = Path(results_dir) / AGAINST_DIR
    folder.mkdir(parents=True, exist_ok=True)
    ignore = folder / ".gitignore"
    if not ignore.exists():
        ignore.write_text("# worktrees of REF and scratch stores of `check --against`\n*\n")
    return folder
