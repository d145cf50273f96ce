"""The promotion verdict over HTTP: what a cluster's daemon answers at /promotion.json, and how the next cluster's
daemon asks for it.

The answer is read from the daemon's own SQLite store (it survives restarts): every commit it applied (when, until a
newer one replaced it, since when its health checks were clean), the commits it rolled back, its failing checks.
"""

from __future__ import annotations

import json
import sqlite3
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from reconciler.common import clock
from reconciler.daemon.promotion import Upstream, parse_upstream
from reconciler.daemon.store import Store

APPLIED_LOG_KEY = "applied_log"  # meta: [{"commit", "at"}], oldest first: each commit this cluster applied
PROMOTION_KEY = "promotion"  # meta: this cluster's promotion decision (promotion.journal)
PROMOTED_KEY = "promoted"  # meta: [{"commit", "upstream_applied_at", "applied_at", "seconds"}], newest last
CLUSTER_KEY = "cluster"  # meta: the cluster this daemon reconciles (config `cluster:`)
MAX_LOG = 100
FETCH_TIMEOUT = 5.0  # seconds: an earlier daemon slower than this counts as unreachable this cycle


def note_applied(store: Store, commit: str, at: float, checks: bool = False) -> None:
    """Add COMMIT to the applied log, unless it is already the last entry (a drift check of the same commit);
    CHECKS: its desired state has health checks that run after an apply (the next cluster waits for one)."""
    log = list(store.get(APPLIED_LOG_KEY) or [])
    if log and log[-1].get("commit") == commit:
        return
    store.set(APPLIED_LOG_KEY, [*log, {"commit": commit, "at": at, "checks": checks}][-MAX_LOG:])


def note_promoted(store: Store, commit: str, upstream_applied_at: float, at: float) -> None:
    """Record that COMMIT, applied upstream at UPSTREAM_APPLIED_AT, was applied here at AT (once per commit)."""
    log = list(store.get(PROMOTED_KEY) or [])
    if log and log[-1].get("commit") == commit:
        return
    entry = {"commit": commit, "upstream_applied_at": upstream_applied_at, "applied_at": at,
             "seconds": round(at - upstream_applied_at, 1)}
    store.set(PROMOTED_KEY, [*log, entry][-MAX_LOG:])


def answer(store: Store, cluster: str | None, now: float | None = None) -> dict[str, Any]:
    """This daemon's /promotion.json, from its store."""
    now = clock.wall() if now is None else now
    log = [e for e in store.get(APPLIED_LOG_KEY) or [] if isinstance(e, dict)]
    history = _check_history(store.conn)
    applied: dict[str, dict[str, Any]] = {}
    for index, entry in enumerate(log):
        until = log[index + 1]["at"] if index + 1 < len(log) else None
        start, end = float(entry["at"]), now if until is None else float(until)
        applied[str(entry["commit"])] = {"applied_at": start, "until": until,
                                         "clean_since": clean_since(history, start, end),
                                         "checks": bool(entry.get("checks")),
                                         "checked": any(start <= r[0] <= end for r in history)}
    rolled = {c: {k: why.get(k) for k in ("gate", "message", "nodes", "at", "status")}
              for c, why in store.rolled_back().items()}
    failing = [f"{r[1]} on {r[2]}: {r[3]}" for r in _latest(history) if not r[4]]
    return {"cluster": cluster, "now": now, "applied_commit": store.get("applied_commit"), "applied": applied,
            "rolled_back": rolled, "failing": failing}


def answer_json(db: Path, cluster: str | None) -> str:
    """/promotion.json read through a read-only connection (the listener's thread)."""
    if not db.exists():
        return json.dumps({"cluster": cluster, "now": clock.wall(), "applied": {}, "rolled_back": {}, "failing": []})
    store = Store.open_read_only(db)
    try:
        return json.dumps(answer(store, cluster))
    finally:
        store.close()


def fetch(url: str, timeout: float = FETCH_TIMEOUT) -> Upstream:
    """The earlier daemon's answer at URL (its listener's base URL); OSError or ValueError when none came."""
    with urllib.request.urlopen(f"{url.rstrip('/')}/promotion.json", timeout=timeout) as reply:
        return parse_upstream(json.loads(reply.read(8 << 20)))


# A check result as (time, check, node, message, ok), oldest first.
Result = tuple[float, str, str, str, bool]


def _check_history(conn: sqlite3.Connection, limit: int = 20000) -> list[Result]:
    """The newest LIMIT health-check results (skipped ones left out), oldest first; [] without a checks table."""
    try:
        rows = conn.execute("SELECT started, check_name, node, message, ok FROM check_results WHERE skipped=0 "
                            "ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
    except sqlite3.OperationalError:  # no check has ever run here
        return []
    return [(datetime.fromisoformat(str(r[0])).astimezone(UTC).timestamp(), r[1], r[2], r[3], bool(r[4]))
            for r in reversed(rows)]


def _latest(history: list[Result]) -> list[Result]:
    last: dict[tuple[str, str], Result] = {}
    for result in history:
        last[(result[1], result[2])] = result
    return sorted(last.values(), key=lambda r: (r[1], r[2]))


def clean_since(history: list[Result], start: float, end: float) -> float | None:
    """Since when every check was passing in [START, END]: START, or the first pass after the last failure in it;
    None when a check failed in it and has not passed since (up to END)."""
    state: dict[tuple[str, str], bool] = {}
    since = start
    for when, check, node, _, ok in history:
        if when > end:
            break
        key = (check, node)
        if ok and state.get(key) is False and when >= start:
            since = max(since, when)
        state[key] = ok
    if any(ok is False for ok in state.values()):
        return None
    return since
