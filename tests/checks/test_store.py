"""The results store on real SQLite files (WAL), with the daemon's autocommit connection and a default one."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from reconciler.checks import store
from reconciler.checks.results import CheckResult

T0 = datetime(2026, 11, 21, 2, 0, tzinfo=UTC)


def nccl(node: str, value: float | None, ok: bool = True, minutes: int = 0, **kw: object) -> CheckResult:
    return CheckResult(check="nightly", kind="nccl", node=node, ok=ok, message="m", value=value,
                       gpu_seconds=8.0, started=T0 + timedelta(minutes=minutes), duration=1.0, **kw)  # type: ignore[arg-type]


@pytest.fixture(params=["autocommit", "deferred"])
def conn(request: pytest.FixtureRequest, tmp_path: Path) -> sqlite3.Connection:
    if request.param == "autocommit":
        db = sqlite3.connect(str(tmp_path / "state.db"), isolation_level=None)
    else:
        db = sqlite3.connect(str(tmp_path / "state.db"))
    db.execute("PRAGMA journal_mode=WAL")
    store.ensure_schema(db)
    store.ensure_schema(db)  # idempotent
    return db


def reader(conn: sqlite3.Connection) -> sqlite3.Connection:
    """A second connection to the same file: sees only committed rows."""
    path = conn.execute("PRAGMA database_list").fetchone()[2]
    return sqlite3.connect(path)


def test_round_trip_of_every_field(conn: sqlite3.Connection) -> None:
    result = CheckResult(check="basics", kind="node", node="gpu01", ok=False, message="mount /shared: not mounted",
                         started=T0, duration=0.25, details=["fail: mount /shared: not mounted", "pass: munge running"])
    store.record(conn, result)
    [back] = store.latest(reader(conn))
    assert back == result
    assert back.started.tzinfo is not None


def test_history_is_passing_values_of_one_node_and_check_oldest_first(conn: sqlite3.Connection) -> None:
    store.record_many(conn, [
        nccl("gpu01", 360.0, minutes=1),
        nccl("gpu02", 200.0, minutes=2),
        nccl("gpu01", 120.0, ok=False, minutes=3),  # failing runs do not set the baseline
        nccl("gpu01", None, ok=True, skipped=True, minutes=4),
        nccl("gpu01", 362.0, minutes=5),
        nccl("gpu01", 364.0, minutes=6),
    ])
    store.record(conn, CheckResult(check="other", kind="nccl", node="gpu01", ok=True, message="m", value=1.0))
    db = reader(conn)
    assert store.history(db, "nightly", "gpu01", 10) == [360.0, 362.0, 364.0]
    assert store.history(db, "nightly", "gpu01", 2) == [362.0, 364.0]
    assert store.history(db, "nightly", "gpu02") == [200.0]
    assert store.history(db, "nightly", "gpu09") == []


def test_latest_is_the_last_result_per_check_and_node(conn: sqlite3.Connection) -> None:
    store.record_many(conn, [nccl("gpu01", 360.0), nccl("gpu01", 120.0, ok=False, minutes=1),
                             nccl("gpu02", 300.0), nccl("gpu02", None, skipped=True, minutes=1)])
    latest = {(r.check, r.node): r for r in store.latest(reader(conn))}
    assert latest[("nightly", "gpu01")].value == 120.0 and not latest[("nightly", "gpu01")].ok
    assert latest[("nightly", "gpu02")].value == 300.0  # a skipped run does not hide the last verdict
    with_skips = {(r.check, r.node): r for r in store.latest(conn, include_skipped=True)}
    assert with_skips[("nightly", "gpu02")].skipped


def test_a_callers_transaction_is_left_to_the_caller(tmp_path: Path) -> None:
    db = sqlite3.connect(str(tmp_path / "x.db"), isolation_level=None)
    store.ensure_schema(db)
    db.execute("BEGIN")
    store.record(db, nccl("gpu01", 1.0))
    assert db.in_transaction  # not committed behind the caller's back
    db.execute("ROLLBACK")
    assert store.latest(db) == []


def test_results_for_and_last_started(conn: sqlite3.Connection) -> None:
    store.record_many(conn, [nccl("gpu01", 1.0, minutes=1), nccl("gpu02", 2.0, minutes=7), nccl("gpu01", 3.0, minutes=3)])
    assert [r.value for r in store.results_for(conn, "nightly")] == [3.0, 2.0, 1.0]
    assert [r.value for r in store.results_for(conn, "nightly", "gpu01", limit=1)] == [3.0]
    assert store.last_started(conn) == {"nightly": T0 + timedelta(minutes=7)}


def test_coexists_with_the_daemon_schema(tmp_path: Path) -> None:
    daemon = pytest.importorskip("reconciler.daemon.store")
    db = daemon.connect(tmp_path / "daemon.db")  # creates its tables and ours
    store.record(db, nccl("gpu01", 5.0))
    assert store.history(reader(db), "nightly", "gpu01") == [5.0]
