"""A daemon that finds a rollout journal it cannot read (written by a newer reconciler, or garbled) in its state
database: one error event naming the file and what to do, no traceback, no run, and the journal left as it was
(neither resumed nor overwritten by a new rollout). A real SQLite store and the repository's desired state."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from reconciler.daemon.config import DaemonConfig
from reconciler.daemon.loop import Reconciler
from reconciler.daemon.metrics import Metrics
from reconciler.daemon.store import JOURNAL_KEY, Store

REPO = Path(__file__).resolve().parents[2]
V1 = REPO / "tests" / "rollout" / "fixtures" / "journal_v1_upgrade.json"


@pytest.mark.parametrize("journal,said", [
    ({**json.loads(V1.read_text()), "version": 7}, "version 7, written by a newer reconciler"),
    ({**json.loads(V1.read_text()), "phase": "teleporting"}, "phase: Input should be"),
], ids=["newer", "garbled"])
def test_a_journal_it_cannot_read_stops_the_daemon_from_acting_and_stays(tmp_path: Path, journal: dict[str, Any],
                                                                      said: str) -> None:
    config = DaemonConfig.model_validate({"watch": str(REPO / "desired-state"), "mode": "enforce",
                                          "metrics_listen": None, "state_dir": str(tmp_path / "state")})
    config.state_path.mkdir(parents=True)
    store = Store(config.state_path / "state.db")
    store.set(JOURNAL_KEY, journal)
    rec = Reconciler(config, store, Metrics(), threading.Event(), config_dir=tmp_path)
    with capture_logs() as logs:
        assert rec.cycle("start") is None
    refused = [e for e in logs if e["event"] == "rollout.journal_refused"]
    assert len(refused) == 1 and refused[0]["log_level"] == "error", logs
    message = refused[0]["error"]
    assert message.startswith(f"{config.state_path / 'state.db'} (meta row 'rollout_journal'): the rollout journal")
    assert said in message and "Traceback" not in message
    assert not [e for e in logs if e.get("exc_info") or e["log_level"] == "exception"], logs
    assert store.get(JOURNAL_KEY) == journal  # nothing changed
    assert store.last_run() is None  # no run: neither a recovery nor an apply
    store.close()
