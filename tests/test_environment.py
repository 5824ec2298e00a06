"""The environment a run is keyed by: a cache lookup gets the same key as a measured run, without starting git, and
package versions are read again once the import path changes."""

from __future__ import annotations

import subprocess
import sys

from harness.run.parent import env as env_mod


def test_the_cache_key_is_the_measured_runs_key_without_the_git_processes(monkeypatch):
    env, key = env_mod.environment("cpu")
    assert {"git_commit", "git_dirty"} <= set(env)
    started = []
    real = subprocess.run
    monkeypatch.setattr(subprocess, "run", lambda *args, **kwargs: started.append(args[0]) or real(*args, **kwargs))
    assert env_mod.environment_key("cpu") == key
    assert started == []  # no git: the key does not hash the commit
    assert "git_commit" not in env_mod.collect("cpu", git=False)


def test_package_versions_are_kept_until_a_folder_on_the_import_path_changes(tmp_path, monkeypatch):
    looked_up = []
    monkeypatch.setattr(env_mod.importlib.metadata, "version", lambda name: looked_up.append(name) or "1.0")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    assert env_mod._version("somepkg") == env_mod._version("somepkg") == "1.0"
    assert looked_up == ["somepkg"]
    (tmp_path / "somepkg-2.0.dist-info").mkdir()  # an install: the folder's listing, and its mtime, change
    assert env_mod._version("somepkg") == "1.0" and looked_up == ["somepkg", "somepkg"]
