"""The reconcile loop holds its parts as objects (issue 45 item 6): none of them inherits another's behaviour, and
the schedule part decides alone when a commit is reconciled again."""

from __future__ import annotations

import ast
import threading
from pathlib import Path

import pytest

from reconciler.daemon import loop_schedule
from reconciler.daemon.config import DaemonConfig
from reconciler.daemon.loop import Reconciler
from reconciler.daemon.loop_schedule import Schedule
from reconciler.daemon.metrics import Metrics
from reconciler.daemon.store import Store

DAEMON = Path(__file__).resolve().parents[2] / "reconciler" / "daemon"


def test_no_loop_class_inherits_from_another() -> None:
    """A class of the loop's modules has no base but Protocol or object: behaviour is never found through an MRO."""
    bases = {}
    for path in sorted(DAEMON.glob("loop*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases[f"{path.name}:{node.name}"] = [ast.unparse(b) for b in node.bases]
    assert bases["loop.py:Reconciler"] == []
    allowed = {"Protocol", "LoopHost"}  # WorkerHost(LoopHost, Protocol) widens a protocol: no behaviour
    assert {name: found for name, found in bases.items() if set(found) - allowed} == {}


def loop(tmp_path: Path) -> Reconciler:
    cfg = DaemonConfig.model_validate({"watch": str(tmp_path), "state_dir": str(tmp_path / "s"), "metrics_listen": None,
                                       "retry": {"initial": "2s", "max": "5s"}})
    cfg.state_path.mkdir()
    return Reconciler(cfg, Store(cfg.state_path / "state.db"), Metrics(), threading.Event())


def test_the_loop_holds_its_parts_and_applied_reaches_the_promotion(tmp_path: Path) -> None:
    """Every part shares the loop's one LoopState and Common; 'applied' reaches the promotion by its callback."""
    rec = loop(tmp_path)
    assert rec.targets.state is rec.state and rec.apply.state is rec.state and rec.promotion.state is rec.state
    assert {id(p.common) for p in (rec.schedule, rec.targets, rec.checks, rec.prs, rec.promotion, rec.apply)} == \
        {id(rec.common)}
    assert rec.apply.on_applied == rec.promotion.applied
    rec.store.close()


def test_schedule_backoff_doubles_to_its_cap_and_a_newer_commit_is_tried_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Failures of one commit back off 2, 4, 5 (capped) seconds; before the retry time only a new or forced run of
    it goes ahead; another commit, or success, resets the backoff; a stop keeps it."""
    rec = loop(tmp_path)
    now = 1000.0
    monkeypatch.setattr(loop_schedule.time, "monotonic", lambda: now)
    schedule: Schedule = rec.schedule
    schedule.last_reconcile = now  # a drift check is not due for drift_interval
    delays = []
    for _ in range(3):
        schedule.after_outcome("failed", "a")
        delays.append(schedule.retry_at - now)
    assert delays == [2.0, 4.0, 5.0] and schedule.failures == 3
    assert not schedule.wants("a", pending=True, new=False, force=False, now=now)
    assert schedule.wants("a", pending=True, new=True, force=False, now=now)
    assert schedule.wants("a", pending=True, new=False, force=True, now=now)
    assert schedule.wants("a", pending=True, new=False, force=False, now=now + 5)  # the retry is due
    schedule.after_outcome("stopped", "a")
    assert schedule.failures == 3
    schedule.after_outcome("partial", "b")
    assert (schedule.failures, schedule.failed_commit, schedule.retry_at - now) == (1, "b", 2.0)
    schedule.after_outcome("in-sync", "b")
    assert (schedule.failures, schedule.retry_at, schedule.failed_commit) == (0, 0.0, None)
    assert schedule.wants("b", pending=True, new=False, force=False, now=now)  # pending, no backoff
    assert not schedule.wants("b", pending=False, new=False, force=False, now=now)  # applied, nothing due
    rec.store.close()
