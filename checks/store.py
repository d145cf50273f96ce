"""Check results in SQLite, on a connection the caller owns (the daemon's WAL database, or a file of the CLI).

One table, `check_results`, one row per result. Writes commit only when they opened the transaction
themselves, so a caller's own transaction is left alone; autocommit connections work as they are.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from typing import Any

from reconciler.checks.results import CheckResult

SCHEMA = """
CREATE TABLE IF NOT EXISTS check_results (
    id INTEGER PRIMARY KEY,
    check_name TEXT NOT NULL,
    kind TEXT NOT NULL,
    node TEXT NOT NULL,
    ok INTEGER NOT NULL,
    skipped INTEGER NOT NULL DEFAULT 0,
    error INTEGER NOT NULL DEFAULT 0,
    message TEXT NOT NULL,
    value REAL,
    gpu_seconds REAL,
    started TEXT NOT NULL,
    duration REAL NOT NULL,
    job_id TEXT,
    details TEXT NOT NULL DEFAULT '[]'
);
CREATE INDEX IF NOT EXISTS check_results_by_check_node ON check_results (check_name, node, id);
"""

_COLUMNS = ("check_name, kind, node, ok, skipped, error, message, value, gpu_seconds, started, duration, job_id, "
            "details")


def ensure_schema(conn: sqlite3.Connection) -> None:
    """Create the table and its index when missing."""
    for statement in SCHEMA.split(";"):
        if statement.strip():
            conn.execute(statement)
    _commit_if_ours(conn, was_open=False)


def _commit_if_ours(conn: sqlite3.Connection, was_open: bool) -> None:
    """Commit a transaction that our statements opened (never one the caller had open)."""
    if conn.in_transaction and not was_open:
        conn.commit()


def record(conn: sqlite3.Connection, result: CheckResult) -> None:
    """Store one result."""
    record_many(conn, [result])


def record_many(conn: sqlite3.Connection, results: list[CheckResult]) -> None:
    """Store several results in one transaction."""
    was_open = conn.in_transaction
    conn.executemany(
        f"INSERT INTO check_results ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
        [(r.check, r.kind, r.node, int(r.ok), int(r.skipped), int(r.error), r.message, r.value, r.gpu_seconds,
          _timestamp(r.started), r.duration, r.job_id, json.dumps(r.details)) for r in results],
    )
    _commit_if_ours(conn, was_open)


def _timestamp(when: datetime) -> str:
    """UTC ISO 8601 with microseconds: sorts as text."""
    return when.astimezone(UTC).isoformat(timespec="microseconds")


def _result(row: tuple[Any, ...]) -> CheckResult:
    """A CheckResult from a row in _COLUMNS order."""
    (check, kind, node, ok, skipped, error, message, value, gpu_seconds, started, duration, job_id,
     details) = row
    return CheckResult(check=check, kind=kind, node=node, ok=bool(ok), skipped=bool(skipped), error=bool(error),
                       message=message, value=value, gpu_seconds=gpu_seconds,
                       started=datetime.fromisoformat(str(started)), duration=duration, job_id=job_id,
                       details=json.loads(str(details)))


def history(conn: sqlite3.Connection, check: str, node: str, limit: int = 10) -> list[float]:
    """The node's last LIMIT values (busbw) of passing runs of CHECK, oldest first (for regressions)."""
    rows = conn.execute(
        "SELECT value FROM check_results WHERE check_name=? AND node=? AND ok=1 AND skipped=0 AND value IS NOT NULL "
        "ORDER BY id DESC LIMIT ?", (check, node, limit)).fetchall()
    return [float(row[0]) for row in reversed(rows)]


def latest(conn: sqlite3.Connection, include_skipped: bool = False) -> list[CheckResult]:
    """The last result of every check on every node (skipped runs left out unless asked for)."""
    where = "" if include_skipped else "WHERE skipped=0"
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM check_results WHERE id IN "
        f"(SELECT MAX(id) FROM check_results {where} GROUP BY kind, check_name, node) "
        "ORDER BY check_name, node").fetchall()
    return [_result(row) for row in rows]


def results_for(conn: sqlite3.Connection, check: str, node: str | None = None, limit: int = 50) -> list[CheckResult]:
    """The newest results of a check (on one node), newest first."""
    if node is None:
        rows = conn.execute(f"SELECT {_COLUMNS} FROM check_results WHERE check_name=? ORDER BY id DESC LIMIT ?",
                            (check, limit)).fetchall()
    else:
        rows = conn.execute(f"SELECT {_COLUMNS} FROM check_results WHERE check_name=? AND node=? "
                            "ORDER BY id DESC LIMIT ?", (check, node, limit)).fetchall()
    return [_result(row) for row in rows]


def last_started(conn: sqlite3.Connection) -> dict[str, datetime]:
    """When each check last ran (any node, skipped runs included): for per-check intervals."""
    rows = conn.execute("SELECT check_name, MAX(started) FROM check_results GROUP BY check_name").fetchall()
    return {str(name): datetime.fromisoformat(str(when)) for name, when in rows}


Series = dict[tuple[str, str], list[tuple[datetime, float, bool]]]


def busbw_series(conn: sqlite3.Connection, per_node: int = 100) -> Series:
    """(check, node) -> the last PER_NODE NCCL bus bandwidths as (started, GB/s, passed), oldest first."""
    rows = conn.execute(
        "SELECT check_name, node, started, value, ok FROM (SELECT *, ROW_NUMBER() OVER "
        "(PARTITION BY check_name, node ORDER BY id DESC) AS newest FROM check_results "
        "WHERE kind='nccl' AND skipped=0 AND value IS NOT NULL) WHERE newest <= ? ORDER BY check_name, node, id",
        (per_node,)).fetchall()
    series: Series = {}
    for check, node, started, value, ok in rows:
        series.setdefault((str(check), str(node)), []).append(
            (datetime.fromisoformat(str(started)), float(value), bool(ok)))
    return series
