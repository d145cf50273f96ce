"""Local mode's view of the watched directory: every file of it counts (not only YAML), scratch files do not;
the real watchdog observer wakes the daemon for a non-YAML edit and for an atomic save (rename of a temp file)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from reconciler.daemon.process import Watcher
from reconciler.daemon.watched import content_hash, ignored, state_files


def _desired(root: Path) -> Path:
    (root / "secrets").mkdir(parents=True)
    (root / "cluster.yaml").write_text("cluster: {name: c}\n")
    (root / "motd.txt").write_text("hello\n")
    (root / "secrets" / "db.conf.age").write_bytes(b"age-encryption.org/v1\n...")
    return root


def test_a_non_yaml_file_changes_the_hash(tmp_path: Path) -> None:
    root = _desired(tmp_path / "d")
    first = content_hash(root)
    (root / "motd.txt").write_text("hello again\n")
    second = content_hash(root)
    (root / "secrets" / "db.conf.age").write_bytes(b"age-encryption.org/v1\nother")
    third = content_hash(root)
    assert len({first, second, third}) == 3
    assert first.startswith("local:")


def test_git_scratch_files_and_the_state_dir_do_not_count(tmp_path: Path) -> None:
    root = _desired(tmp_path / "d")
    state = root / ".reconciler-state"
    before = content_hash(root, (state,))
    (root / ".git").mkdir()
    (root / ".git" / "index").write_bytes(b"x")
    for name in (".cluster.yaml.swp", "cluster.yaml~", "motd.txt.tmp", "4913", ".#motd.txt", "#motd.txt#"):
        (root / name).write_text("scratch")
    state.mkdir()
    (state / "state.db").write_bytes(b"sqlite")
    assert content_hash(root, (state,)) == before
    assert [p.relative_to(root).as_posix() for p in state_files(root, (state,))] == \
        ["cluster.yaml", "motd.txt", "secrets/db.conf.age"]
    assert not ignored(root, root / ".hidden" / "key.age")  # a hidden source is still a file of the state
    assert ignored(root, tmp_path / "elsewhere.yaml")


def _woken(wake: threading.Event, watcher: Watcher) -> bool:
    """Bounded wait for the watcher to record a change (the observer thread delivers events asynchronously)."""
    return any(wake.wait(0.1) and watcher.quiet_for() is not None for _ in range(100))


def test_watcher_wakes_for_a_non_yaml_edit_and_an_atomic_save(tmp_path: Path) -> None:
    root = _desired(tmp_path / "d")
    wake = threading.Event()
    watcher = Watcher(root, wake)
    try:
        (root / "motd.txt").write_text("edited\n")
        assert _woken(wake, watcher)
        watcher.consume()
        wake.clear()
        # An editor's atomic save: write a scratch name, rename it over the file (only the destination counts).
        scratch = root / "secrets" / "db.conf.age.tmp"
        scratch.write_bytes(b"age-encryption.org/v1\nnew")
        wake.clear()  # the scratch file's own events may or may not have woken it: only the rename is asserted
        watcher.consume()
        os.replace(scratch, root / "secrets" / "db.conf.age")
        assert _woken(wake, watcher)
    finally:
        watcher.stop()
