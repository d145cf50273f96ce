"""A daemon that finds a rollout journal it cannot read (written by a newer reconciler, or garbled) in its state
database: one error event naming the file and what to do, no traceback, no run, and the journal left as it was
(neither resumed nor overwritten by a new rollout). A real SQLite store and the repository's desired state."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from reconciler.daemon.config import DaemonConfig
from reconciler.daemon.loop import Reconciler
from reconciler.daemon.metrics import Metrics
from reconciler.daemon.store import JOURNAL_KEY, Store, journal_where
from reconciler.rollout.journal import refusal

REPO = Path(__file__).resolve().parents[2]
V1 = REPO / "tests" / "rollout" / "fixtures" / "journal_v1_upgrade.json"


def daemon(tmp_path: Path, mode: str, journal: dict[str, Any]) -> tuple[Reconciler, Store, Path]:
    """A daemon on the repository's desired state whose state database holds JOURNAL; its store and db path."""
    config = DaemonConfig.model_validate({"watch": str(REPO / "desired-state"), "mode": mode,
                                          "metrics_listen": None, "state_dir": str(tmp_path / "state")})
    config.state_path.mkdir(parents=True)
    store = Store(config.state_path / "state.db")
    store.set(JOURNAL_KEY, journal)
    return Reconciler(config, store, Metrics(), threading.Event(), config_dir=tmp_path), store, store.path


@pytest.mark.parametrize("journal,said", [
    ({**json.loads(V1.read_text()), "version": 7}, "version 7, written by a newer reconciler"),
    ({**json.loads(V1.read_text()), "phase": "teleporting"}, "phase: Input should be"),
], ids=["newer", "garbled"])
def test_a_journal_it_cannot_read_stops_the_daemon_from_acting_and_stays(tmp_path: Path, journal: dict[str, Any],
                                                                      said: str) -> None:
    rec, store, db = daemon(tmp_path, "enforce", journal)
    with capture_logs() as logs:
        assert rec.cycle("start") is None
    refused = [e for e in logs if e["event"] == "rollout.journal_refused"]
    assert len(refused) == 1 and refused[0]["log_level"] == "error", logs
    message = refused[0]["error"]
    assert message.startswith(f"{db} (meta row 'rollout_journal'): the rollout journal")
    assert said in message and "Traceback" not in message
    assert not [e for e in logs if e.get("exc_info") or e["log_level"] == "exception"], logs
    assert store.get(JOURNAL_KEY) == journal  # nothing changed
    assert store.last_run() is None  # no run: neither a recovery nor an apply
    store.close()


def test_in_report_mode_it_goes_on_reporting_and_leaves_the_journal(tmp_path: Path) -> None:
    """Report mode never applies, so it never overwrites the journal: the cycle still plans and records its run."""
    journal = {**json.loads(V1.read_text()), "version": 7}
    rec, store, _ = daemon(tmp_path, "report", journal)
    with capture_logs() as logs:
        rec.cycle("start")
    assert [e["event"] for e in logs][:2] == ["rollout.journal_refused", "run.start"], logs
    run = store.last_run()
    assert run is not None and run.mode == "report" and run.applied == 0
    assert store.get(JOURNAL_KEY) == journal
    store.close()


def test_status_says_the_journal_is_refused_and_why(tmp_path: Path) -> None:
    """`reconciler status` (text and JSON) names the refusal, exits 0, no traceback; an unversioned one is not."""
    state = tmp_path / "state"
    state.mkdir()
    store = Store(state / "state.db")
    newer = {**json.loads(V1.read_text()), "version": 7}
    store.set(JOURNAL_KEY, newer)
    store.close()

    def status(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "reconciler.cli", "status", "--state-dir", str(state), *args],
                              capture_output=True, text=True, timeout=60, cwd=REPO)
    text, js = status(), status("--format", "json")
    assert text.returncode == js.returncode == 0 and "Traceback" not in text.stderr + js.stderr, text.stderr
    refused = [line for line in text.stdout.splitlines() if line.startswith("rollout journal REFUSED: ")]
    expected = refusal(newer, journal_where(state / "state.db"))  # what the daemon logs
    assert expected is not None and "written by a newer reconciler" in expected
    assert refused == [f"rollout journal REFUSED: {expected}"], text.stdout
    assert json.loads(js.stdout)["rollout_journal_refused"] == refused[0].removeprefix("rollout journal REFUSED: ")
    store = Store(state / "state.db")
    store.set(JOURNAL_KEY, json.loads(V1.read_text()))
    store.close()
    assert "REFUSED" not in status().stdout and json.loads(status("--format", "json").stdout)[
        "rollout_journal_refused"] is None
