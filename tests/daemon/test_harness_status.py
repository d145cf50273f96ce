"""The test harness reads a daemon's status in its own process (tests/daemon/harness.py): the same dict as
`reconciler status --format json` prints."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from reconciler.daemon.store import Store
from tests.daemon.harness import DaemonProcess


def test_status_json_is_the_cli_output(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    store.set("applied_commit", "a" * 40)
    store.start_run("r1", "poll", "enforce", "a" * 40, "subject: é and \"quotes\"")
    store.finish_run("r1", "failed", changes=2, applied=1, nodes=3, error="gpu01: boom")
    store.mark_rolled_back("b" * 40, {"gate": "smoke-job", "message": "failed", "nodes": ["gpu02"], "at": 1.5})
    store.close()
    daemon = DaemonProcess(config=tmp_path / "config.yaml", state_dir=tmp_path, log_path=tmp_path / "daemon.log")
    shown = daemon.status()
    assert shown["applied_commit"] == "a" * 40 and shown["last_run"]["error"] == "gpu01: boom"
    assert shown["rolled_back"]["b" * 40]["gate"] == "smoke-job"
    assert shown == daemon.status_from_cli()


def test_wait_applied_waits_for_the_run_that_applied_to_end(tmp_path: Path) -> None:
    """applied_commit is written before the run's end: wait_applied returns only once that run has ended, and the
    runs table is read by commit with the daemon's own wall-clock times."""
    store = Store(tmp_path / "state.db")
    store.start_run("r1", "poll", "enforce", "a" * 40, "first")
    store.set("applied_commit", "a" * 40)
    store.set("applied_at", time.time())
    (tmp_path / "daemon.log").write_text("")
    daemon = DaemonProcess(config=tmp_path / "config.yaml", state_dir=tmp_path, log_path=tmp_path / "daemon.log")
    assert daemon.runs_open(started_by=time.time()) == 1
    with pytest.raises(AssertionError, match="applied and its run ended"):
        daemon.wait_applied("a" * 40, timeout=0.5)
    store.finish_run("r1", "applied", changes=1, applied=1, nodes=2)
    store.start_run("r2", "drift-check", "enforce", "a" * 40, "first")  # a later run: not waited for
    shown = daemon.wait_applied("a" * 40, timeout=5)
    assert shown["applied_commit"] == "a" * 40
    runs = daemon.runs("a" * 40)
    assert [(r["run_id"], r["outcome"], r["ended"] is not None) for r in runs] == [
        ("r1", "applied", True), ("r2", "running", False)]
    assert runs[0]["started"] <= runs[0]["ended"] and daemon.runs("b" * 40) == []
    store.close()
