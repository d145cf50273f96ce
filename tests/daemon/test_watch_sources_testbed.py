"""Local mode (`watch:`) on the testbed: editing a non-YAML file of the directory (a `files:` entry's `source:`),
in place or by an editor's atomic save, triggers a cycle at once and the new content reaches the nodes."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.daemon.conftest import DaemonBed

pytestmark = pytest.mark.timeout(600)

TARGET = "/etc/reconciler-watch/motd"
FILES = f"files:\n  - {{path: {TARGET}, nodes: \"gpu[01-02]\", source: text/motd.txt}}\n"


def on_nodes(d: DaemonBed) -> set[str]:
    """The target file's content on each compute node (a set: all equal when the rollout is complete)."""
    return {d.bed.exec(node, f"cat {TARGET} 2>&1", check=False).stdout for node in ("gpu01", "gpu02")}


def test_editing_a_source_file_triggers_a_cycle_that_reaches_the_nodes(dbed: DaemonBed, tmp_path: Path) -> None:
    """The drift interval is 10 minutes: only the watch can bring the edits in within the bounds below."""
    local = tmp_path / "desired"
    (local / "text").mkdir(parents=True)
    for path in dbed.remote.work.glob("*.yaml"):
        (local / path.name).write_bytes(path.read_bytes())
    (local / "files.yaml").write_text(FILES)
    source = local / "text" / "motd.txt"
    source.write_text("first\n")
    daemon = dbed.daemon(repository=None, watch=str(local), debounce=1.0, drift_interval="10m")
    try:
        daemon.wait_for("first content on the nodes", lambda: on_nodes(dbed) == {"first\n"}, timeout=180)
        watch_runs = len([e for e in daemon.events() if e["event"] == "run.start" and e["trigger"] == "watch"])

        source.write_text("second\n")  # in place
        saved = time.monotonic()
        daemon.wait_for("edited source on the nodes", lambda: on_nodes(dbed) == {"second\n"}, timeout=60)
        print(f"\nwatch mode, source edited in place: save-to-applied {time.monotonic() - saved:.2f}s")

        scratch = source.with_name("motd.txt.tmp")  # an editor's atomic save: scratch file renamed over it
        scratch.write_text("third\n")
        os.replace(scratch, source)
        saved = time.monotonic()
        daemon.wait_for("atomically saved source on the nodes", lambda: on_nodes(dbed) == {"third\n"}, timeout=60)
        print(f"watch mode, source saved by rename: save-to-applied {time.monotonic() - saved:.2f}s")

        runs = [e for e in daemon.events() if e["event"] == "run.start" and e["trigger"] == "watch"]
        assert len(runs) >= watch_runs + 2, runs
        # the run that wrote "third" ends a moment after the file is on the nodes: wait for its row's end
        last = daemon.wait_for("the watch run's end", lambda: (r := daemon.runs()[-1])["ended"] and r, timeout=30)
        assert last["trigger"] == "watch" and last["outcome"] == "applied", last
    finally:
        daemon.stop()
