"""The daemon's state in SQLite (WAL): runs, drift events, the current drift, and small key/values."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reconciler.engine.plan import Change

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL UNIQUE,
    trigger TEXT NOT NULL,
    mode TEXT NOT NULL,
    commit_sha TEXT,
    subject TEXT,
    started REAL NOT NULL,
    ended REAL,
    outcome TEXT NOT NULL DEFAULT 'running',
    changes INTEGER NOT NULL DEFAULT 0,
    applied INTEGER NOT NULL DEFAULT 0,
    nodes INTEGER NOT NULL DEFAULT 0,
    error TEXT
);
CREATE TABLE IF NOT EXISTS drift_events (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL,
    detected REAL NOT NULL,
    commit_sha TEXT,
    node TEXT NOT NULL,
    driver TEXT NOT NULL,
    resource TEXT NOT NULL,
    action TEXT NOT NULL,
    summary TEXT NOT NULL,
    healed INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS current_drift (
    node TEXT NOT NULL,
    driver TEXT NOT NULL,
    resource TEXT NOT NULL,
    action TEXT NOT NULL,
    summary TEXT NOT NULL,
    pending_commit INTEGER NOT NULL,
    since REAL NOT NULL,
    diff TEXT,
    PRIMARY KEY (node, driver, resource)
);
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS rollouts (
    id INTEGER PRIMARY KEY,
    run_id TEXT,
    commit_sha TEXT,
    previous_sha TEXT,
    started REAL NOT NULL,
    ended REAL,
    status TEXT NOT NULL,
    reason TEXT,
    record TEXT NOT NULL
);
"""

JOURNAL_KEY = "rollout_journal"  # the rollout in flight (reconciler/rollout/runner.py), for crash recovery
PENDING_FOLLOWUPS = "pending_followups"  # follow-ups of an apply not yet run (a crash journal)
ROLLED_BACK_KEY = "rolled_back"  # commit -> why it was rolled back: never applied again unless retried
# Slurm's draining/drained nodes as last seen: {"at": recorded, "asked": when the view was asked for (the view is
# at least that new), "nodes": [{"node", "state", "reason"}]}
DRAINED_KEY = "drained_nodes"

MAX_DIFF = 64 * 1024  # characters of a drift diff kept for the status page

RUN_COLUMNS = "run_id, trigger, mode, commit_sha, subject, started, ended, outcome, changes, applied, nodes, error"


def journal_where(db: Path) -> str:
    """Where the daemon keeps the rollout journal, as a refusal of it names it."""
    return f"{db} (meta row {JOURNAL_KEY!r})"


@dataclass
class RunRecord:
    """One reconcile run as stored."""

    run_id: str
    trigger: str
    mode: str
    commit: str | None
    subject: str | None
    started: float
    ended: float | None
    outcome: str
    changes: int
    applied: int
    nodes: int
    error: str | None


@dataclass
class DriftRecord:
    """A resource that differs from the desired state right now."""

    node: str
    driver: str
    resource: str
    action: str
    summary: str
    pending_commit: bool
    since: float
    diff: str | None = None


def recover_if_corrupt(path: Path) -> str | None:
    """Move a state database that SQLite cannot read (garbage, truncated, malformed) aside, with its WAL files;
    return what was done (None when it is sound or absent). The daemon then starts a fresh one and says so."""
    if not path.exists():
        return None
    problem = None
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            verdict = conn.execute("PRAGMA quick_check").fetchone()
            tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            if verdict is None or verdict[0] != "ok":
                problem = f"integrity check: {verdict[0] if verdict else 'no answer'}"
            elif path.stat().st_size > 0 and not tables[0]:
                problem = "no tables"
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        problem = str(exc)
    if problem is None:
        return None
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    aside = path.with_name(f"{path.name}.corrupt-{stamp}")
    path.rename(aside)
    for suffix in ("-wal", "-shm"):
        extra = path.with_name(path.name + suffix)
        if extra.exists():
            extra.rename(aside.with_name(aside.name + suffix))
    return f"{path} was unreadable ({problem}): moved to {aside}; starting a fresh state database"


def connect(path: Path) -> sqlite3.Connection:
    """Open (and create) the state database in WAL mode."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(path), timeout=30, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.executescript(SCHEMA)
    if "diff" not in {row[1] for row in conn.execute("PRAGMA table_info(current_drift)")}:
        conn.execute("ALTER TABLE current_drift ADD COLUMN diff TEXT")  # a database of an older daemon
    try:
        from reconciler.checks import store as check_store
    except ImportError:  # the checks package is optional for the store
        pass
    else:
        check_store.ensure_schema(conn)
    return conn


class Store:
    """Typed access to the state database."""

    def __init__(self, path: Path, conn: sqlite3.Connection | None = None) -> None:
        self.path = path
        self.conn = conn or connect(path)

    @classmethod
    def open_read_only(cls, path: Path) -> Store:
        """A reader that cannot write (SQLite `mode=ro`), for the status page's thread; schema left as it is."""
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5, check_same_thread=False)
        return cls(path, conn)

    def close(self) -> None:
        """Close the database."""
        self.conn.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    # ------------------------------------------------------------ runs

    def start_run(self, run_id: str, trigger: str, mode: str, commit: str | None, subject: str | None) -> None:
        """Record the start of a run."""
        self.conn.execute("INSERT INTO runs (run_id, trigger, mode, commit_sha, subject, started) VALUES (?,?,?,?,?,?)",
                          (run_id, trigger, mode, commit, subject, time.time()))

    def finish_run(self, run_id: str, outcome: str, *, changes: int = 0, applied: int = 0, nodes: int = 0,
                   error: str | None = None, commit: str | None = None) -> None:
        """Record how a run ended."""
        self.conn.execute(
            "UPDATE runs SET ended=?, outcome=?, changes=?, applied=?, nodes=?, error=?, "
            "commit_sha=COALESCE(?, commit_sha) WHERE run_id=?",
            (time.time(), outcome, changes, applied, nodes, error, commit, run_id))

    def close_interrupted_runs(self) -> int:
        """Mark runs left 'running' by a crash as 'interrupted'; return how many."""
        cur = self.conn.execute("UPDATE runs SET outcome='interrupted', ended=? WHERE outcome='running'",
                                (time.time(),))
        return cur.rowcount

    def runs(self, limit: int = 20) -> list[RunRecord]:
        """The most recent runs, newest first."""
        rows = self.conn.execute(
            f"SELECT {RUN_COLUMNS} FROM runs ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
        return [RunRecord(*row) for row in rows]

    def last_run(self) -> RunRecord | None:
        """The newest run."""
        runs = self.runs(1)
        return runs[0] if runs else None

    # ------------------------------------------------------------ drift

    def record_drift(self, run_id: str, commit: str | None, changes: list[Change], pending_commit: bool) -> None:
        """Replace the current drift with this plan's changes; log newly seen ones as drift events."""
        now = time.time()
        with self._tx() as conn:
            before = {(r[0], r[1], r[2]): r[3] for r in conn.execute(
                "SELECT node, driver, resource, since FROM current_drift")}
            conn.execute("DELETE FROM current_drift")
            for change in changes:
                key = (change.node, change.driver, change.resource)
                since = before.get(key, now)
                conn.execute("INSERT OR REPLACE INTO current_drift (node, driver, resource, action, summary, "
                             "pending_commit, since, diff) VALUES (?,?,?,?,?,?,?,?)",
                             (*key, change.action, change.summary or change.resource, int(pending_commit), since,
                              change.diff[:MAX_DIFF] if change.diff else None))
                if key not in before and not pending_commit:
                    conn.execute("INSERT INTO drift_events (run_id, detected, commit_sha, node, driver, resource, "
                                 "action, summary) VALUES (?,?,?,?,?,?,?,?)",
                                 (run_id, now, commit, *key, change.action, change.summary or change.resource))

    def mark_healed(self, changes: list[Change]) -> None:
        """Mark the open drift events of these resources healed and drop them from the current drift."""
        with self._tx() as conn:
            for change in changes:
                key = (change.node, change.driver, change.resource)
                conn.execute("UPDATE drift_events SET healed=1 WHERE node=? AND driver=? AND resource=? AND healed=0",
                             key)
                conn.execute("DELETE FROM current_drift WHERE node=? AND driver=? AND resource=?", key)

    def current_drift(self) -> list[DriftRecord]:
        """What differs from the desired state, as of the last run that could tell."""
        rows = self.conn.execute("SELECT node, driver, resource, action, summary, pending_commit, since, diff "
                                 "FROM current_drift ORDER BY node, driver, resource").fetchall()
        return [DriftRecord(r[0], r[1], r[2], r[3], r[4], bool(r[5]), r[6], r[7]) for r in rows]

    def drift_events(self, limit: int = 50) -> list[dict[str, Any]]:
        """Recent drift events, newest first."""
        rows = self.conn.execute("SELECT detected, commit_sha, node, driver, resource, action, summary, healed "
                                 "FROM drift_events ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
        keys = ("detected", "commit", "node", "driver", "resource", "action", "summary", "healed")
        return [dict(zip(keys, row, strict=True)) for row in rows]

    # ------------------------------------------------------------ rollouts

    def record_rollout(self, run_id: str | None, record: dict[str, Any], started: float) -> None:
        """Keep how a rollout ended (waves, gates, timeline, rollback) for `status`, `history` and the page."""
        self.conn.execute("INSERT INTO rollouts (run_id, commit_sha, previous_sha, started, ended, status, reason, "
                          "record) VALUES (?,?,?,?,?,?,?,?)",
                          (run_id, record.get("commit"), record.get("previous"), started, time.time(),
                           record.get("status"), record.get("reason"), json.dumps(record)))

    def rollouts(self, limit: int = 20) -> list[dict[str, Any]]:
        """The most recent rollouts, newest first, each its stored record plus run_id/started/ended."""
        rows = self.conn.execute("SELECT run_id, started, ended, record FROM rollouts ORDER BY id DESC LIMIT ?",
                                 (limit,)).fetchall()
        return [{**json.loads(r[3]), "run_id": r[0], "started": r[1], "ended": r[2]} for r in rows]

    def rolled_back(self) -> dict[str, Any]:
        """Commits rolled back (commit -> record): the daemon does not apply them again."""
        return dict(self.get(ROLLED_BACK_KEY) or {})

    def mark_rolled_back(self, commit: str, why: dict[str, Any]) -> None:
        """Never apply COMMIT again (until `reconciler rollout retry`)."""
        marked = self.rolled_back()
        marked[commit] = why
        self.set(ROLLED_BACK_KEY, marked)

    def retry_commit(self, commit: str) -> list[str]:
        """Forget the rollback of the commits starting with COMMIT; return the full hashes forgotten."""
        marked = self.rolled_back()
        hits = [c for c in marked if c.startswith(commit)]
        for sha in hits:
            del marked[sha]
        self.set(ROLLED_BACK_KEY, marked)
        return hits

    # ------------------------------------------------------------ key/values

    def set(self, key: str, value: Any) -> None:
        """Store a JSON value under a key."""
        self.conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))

    def get(self, key: str, default: Any = None) -> Any:
        """Read a JSON value (or the default)."""
        row = self.conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return json.loads(row[0]) if row else default
