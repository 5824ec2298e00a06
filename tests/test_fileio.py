"""harness.fileio: a small text file is replaced whole or not at all, by any number of writers."""

import os
import threading

import pytest

from harness import fileio


def _temps(folder):
    return [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


def test_the_text_is_replaced_whole_with_the_umask_mode_and_no_temp_left(tmp_path):
    path = tmp_path / "manifest.json"
    path.write_text("old")
    old = os.umask(0o027)
    try:
        fileio.write_text_atomic(path, "new text", durable=True)
    finally:
        os.umask(old)
    assert path.read_text() == "new text" and _temps(tmp_path) == []
    assert path.stat().st_mode & 0o777 == 0o640


def test_a_failed_write_leaves_the_old_text_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "ladder.yaml"
    path.write_text("old")

    def refuse(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fileio.os, "replace", refuse)
    with pytest.raises(OSError, match="No space left"):
        fileio.write_text_atomic(path, "new")
    assert path.read_text() == "old" and _temps(tmp_path) == []


def test_writers_of_one_file_side_by_side_never_mix_or_trip_on_each_other(tmp_path):
    # two campaign jobs preparing one dataset wrote the same fixed temp name before: one of them failed or a
    # reader saw a mix; with a temp of its own each, the file is always one writer's whole text
    path = tmp_path / "manifest.json"
    texts = ["a" * 100_000, "b" * 100_000]
    errors, seen = [], set()

    def write(text):
        try:
            for _ in range(50):
                fileio.write_text_atomic(path, text)
        except Exception as exc:  # noqa: BLE001 - any failure fails the test
            errors.append(exc)

    writers = [threading.Thread(target=write, args=(t,)) for t in texts]
    for w in writers:
        w.start()
    while any(w.is_alive() for w in writers):
        if path.exists():
            seen.add(path.read_text())
    for w in writers:
        w.join()
    assert errors == [] and seen <= set(texts) and path.read_text() in texts and _temps(tmp_path) == []
