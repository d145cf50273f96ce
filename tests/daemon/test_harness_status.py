"""The test harness reads a daemon's status in its own process (tests/daemon/harness.py): the same dict as
`reconciler status --format json` prints."""

from __future__ import annotations

from pathlib import Path

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
