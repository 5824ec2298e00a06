"""Which code a run was measured with: the code fingerprint, and the checkout's git state.

The fingerprint is part of ``env_key``, so a stored run is served from the cache only while the code that measured it
is unchanged. The git state (the commit, whether tracked files differ from it) is recorded beside it but not hashed:
two git processes, asked only for a run measured or skipped (:func:`with_git`), never for a copy.

It covers the code the measured process runs, found from the imports and not from a list of paths: every module of
the child's side (``CHILD_SIDE``: ``harness.run.child`` and the reference models, which a workload names by its
``_target_``s) and every harness module those import, lazy imports included (the workload's torch side, the
settings, the monitor's readers, the helpers). What the measured process never imports (the parent and its warm
launcher, the sweeps and the ladder reader, the climb, the commands, analysis, the parent's meta-device check) is
left out: editing it makes no stored run stale.

A module counts by its own name and its code, not by where its file sits: its code is its syntax tree without
docstrings (comments are not in the tree), with every harness or harness_models module it imports named by its own
name alone. So a file moved to another package (its importers' import lines follow it), a comment or a docstring edited,
keeps the fingerprint; a change to what any of that code does changes it. Syntax trees differ between Python
versions, which ``env_key`` tells apart anyway (``python_version``).
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from harness.fileio import write_text_atomic

REPO_ROOT = Path(__file__).resolve().parents[3]
TOP_PACKAGES = ("harness", "harness_models")  # the source trees under the repository root whose modules may count
# what the measured process runs first; the rest is what they import. The reference models' modules count by their
# own names (``segmentation3d``), so their move from models/ to harness_models/ kept the fingerprint.
CHILD_SIDE = ("harness.run.child", "harness_models")

# (file, its stat, the modules there are) -> (digest of its code, the modules it imports)
_DIGESTS: dict[tuple, tuple[str, frozenset[str]]] = {}


def code_fingerprint(root: Path = REPO_ROOT) -> str:
    """sha256 (16 hex) of the measured code as it is on disk (committed or not): each measured module's own name
    and the digest of its code, in order. Remembered (:func:`_remembered`) while no source file changed."""
    seen = _SEEN.get(str(root))
    if seen is not None and _identities(seen[0]) == seen[1]:
        return seen[2]
    tree = _tree_paths(root)
    before = _identities(tree)  # taken first: an edit made while the code is read is seen at the next call
    modules = source_modules(root)
    files = _files_now(modules)
    known = _remembered(root, files)
    if known:
        _SEEN[str(root)] = tree, before, known
        return known
    digest = hashlib.sha256()
    for name in sorted(measured_modules(modules), key=lambda m: (own_name(m, modules), m)):
        code = _digest(name, modules)[0]
        if code:  # a module with no code (a package's docstring alone) adds nothing, wherever it sits
            digest.update(f"{own_name(name, modules)}\0{code}\0".encode())
    _remember(root, files, digest.hexdigest()[:16])
    _SEEN[str(root)] = tree, before, digest.hexdigest()[:16]
    return digest.hexdigest()[:16]


# A sweep asks for the fingerprint at every rung (a fully cached phase2 some fifty times), and listing the source
# trees again costs ~3 ms each time. So the process keeps, by root, every folder and module file of the trees with
# its identity when the fingerprint was last found: while none changed (a file added, removed or renamed changes
# its folder's mtime; an edit, its own), no module was added, removed or edited, and the fingerprint stands.
_SEEN: dict[str, tuple[list[str], tuple | None, str]] = {}


def _tree_paths(root: Path) -> list[str]:
    """The root, every folder under its source trees and every module file in them."""
    paths = [str(root)]
    for top in TOP_PACKAGES:
        for folder, subfolders, names in os.walk(root / top):
            subfolders[:] = sorted(d for d in subfolders if d != "__pycache__")  # bytecode written is no edit
            paths.append(folder)
            paths += [os.path.join(folder, name) for name in names if name.endswith(".py")]
    return paths


def _identities(paths: list[str]) -> tuple | None:
    """(inode, size, mtime_ns) of each path; None when one is gone."""
    out = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            return None
        out.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


# Parsing the measured modules costs ~0.2-0.5 s a process, which every command that looks up the sweep's cache (a
# fully cached sweep) would pay; so the fingerprint is kept, by repository root, with what every source file was
# (inode, size, mtime: a file edited, added or removed is seen), in this file, and in the process.
_KEPT: dict[str, tuple[str, str]] = {}
KEPT_ROOTS = 8  # the most repository roots the file remembers (tests fingerprint trees in temporary folders)


def kept_file() -> Path:
    """Where fingerprints are remembered between processes (``$XDG_CACHE_HOME/harness/``, else ``~/.cache``)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "harness" / "code-fingerprint.json"


def _files_now(modules: dict[str, Path]) -> str:
    """A digest of every source module's name and file identity, and of the Python (its syntax trees differ)."""
    digest = hashlib.sha256(sys.version.encode())
    for name, path in sorted(modules.items()):
        st = path.stat()
        digest.update(f"{name}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return digest.hexdigest()


def _remembered(root: Path, files: str) -> str:
    kept = _KEPT.get(str(root)) or _read_kept().get(str(root))
    return kept[1] if kept and kept[0] == files else ""


def _remember(root: Path, files: str, fingerprint: str) -> None:
    _KEPT[str(root)] = (files, fingerprint)
    kept = {k: v for k, v in _read_kept().items() if k != str(root)}
    kept = dict(list(kept.items())[-(KEPT_ROOTS - 1):] + [(str(root), [files, fingerprint])])
    try:
        kept_file().parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(kept_file(), json.dumps(kept))
    except OSError:
        pass  # a cache only: the next process parses again


def _read_kept() -> dict:
    try:
        kept = json.loads(kept_file().read_text())
    except (OSError, ValueError):
        return {}
    return kept if isinstance(kept, dict) else {}


# The checkout's git state: recorded beside the fingerprint, never hashed.

def git_state(repo: Path | None = None) -> tuple[str, bool | None]:
    """The commit checked out at ``repo`` (default: the harness's own) and whether tracked files differ from it;
    ``("", None)`` where git or the repository is missing."""
    repo = repo or REPO_ROOT
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, timeout=5)
        if commit.returncode != 0:
            return "", None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo, capture_output=True,
                               text=True, timeout=5)
        return commit.stdout.strip(), bool(dirty.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return "", None


def with_git(env: dict) -> dict:
    """``env`` with the git state a record carries (as it was, where it has it): collected once a run."""
    if "git_commit" in env:
        return env
    commit, dirty = git_state()
    return {**env, "git_commit": commit, "git_dirty": dirty}


def measured_files(root: Path = REPO_ROOT) -> list[str]:
    """The files whose code the fingerprint covers, relative to ``root`` (posix paths, sorted)."""
    modules = source_modules(root)
    return sorted(modules[m].relative_to(root).as_posix() for m in measured_modules(modules))


def measured_modules(modules: dict[str, Path]) -> set[str]:
    """The child side's modules and every module they import (and the packages above each), by dotted name."""
    todo = [m for m in modules if any(m == side or m.startswith(side + ".") for side in CHILD_SIDE)]
    found: set[str] = set()
    while todo:
        name = todo.pop()
        if name in found:
            continue
        found.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in modules]
        todo += _digest(name, modules)[1]
    return found


def own_name(module: str, modules: dict[str, Path]) -> str:
    """A module's name without the packages it sits in; a package's ends in "/" (``workload/``, the package,
    is not ``workload``, the module)."""
    leaf = module.rpartition(".")[2]
    return leaf + "/" if modules[module].name == "__init__.py" else leaf


def source_modules(root: Path) -> dict[str, Path]:
    """Every module under the repository's source trees, by dotted name."""
    out = {}
    for top in TOP_PACKAGES:
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root).with_suffix("")
            out[".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)] = path
    return out


def _digest(module: str, modules: dict[str, Path]) -> tuple[str, frozenset[str]]:
    """(digest of the module's code, "" when it has none; the modules it imports); parsed again only when its file
    changed."""
    path = modules[module]
    stat = path.stat()
    key = (path, stat.st_mtime_ns, stat.st_size, frozenset(modules))  # a module added may take an import's name
    if key not in _DIGESTS:
        imported = _Imports(modules)
        tree = imported.visit(_without_docstrings(ast.parse(path.read_bytes())))
        code = hashlib.sha256(ast.dump(tree).encode()).hexdigest() if tree.body else ""
        _DIGESTS[key] = code, frozenset(imported.found)
    return _DIGESTS[key]


def _without_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                node.body = node.body[1:] or ([] if isinstance(node, ast.Module) else [ast.Pass()])
    return tree


class _Imports(ast.NodeTransformer):
    """Each import of a harness or harness_models module replaced by what it binds, the module named by its own name;
    the modules imported are collected in ``found``."""

    def __init__(self, modules: dict[str, Path]):
        self.modules, self.found = modules, set()

    def _resolve(self, dotted: str) -> str | None:
        while dotted and dotted not in self.modules:
            dotted = dotted.rpartition(".")[0]
        if dotted:
            self.found.add(dotted)
        return dotted or None

    def visit_Import(self, node: ast.Import) -> ast.AST:
        if not any(a.name.split(".")[0] in TOP_PACKAGES for a in node.names):
            return node
        bound = [(own_name(m, self.modules) if (m := self._resolve(a.name)) else a.name, a.asname) for a in node.names]
        return ast.Expr(ast.Constant(repr(("import", bound))))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST:
        if node.level or (node.module or "").split(".")[0] not in TOP_PACKAGES:
            return node
        source = self._resolve(node.module)
        bound = []
        for a in node.names:
            full = f"{node.module}.{a.name}"
            if full in self.modules:  # ``from package import module``: the module, by its own name
                self.found.add(full)
                bound.append((own_name(full, self.modules), "", a.asname))
            else:
                bound.append((own_name(source, self.modules) if source else node.module, a.name, a.asname))
        return ast.Expr(ast.Constant(repr(("from", bound))))
