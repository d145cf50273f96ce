"""The operator's hand on promotion, in the daemon's state database: `reconciler promote approve|hold|release|
hotfix|back`.

The CLI writes into the `promotion_operator` row (one SQLite transaction, beside a running daemon: nothing is
signalled); the daemon's promotion gate (loop_promotion.py, promotion_steer.py) reads it each cycle and records
what it did. Everything stands across restarts: an approval until its commit is applied, a hold until released.

Row: {"approvals": {commit: request}, "hold": request + {"kind", "pin"} | None, "hotfix": request | None (asked,
not yet applied), "back": request | None (asked, not yet taken), "hotfixes": [request + {"applied_at"}],
"rollbacks_seen": [commit], "history": [request + {"effect", "done"}]}.
A request: {"op", "commit", "who", "reason", "at"}.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reconciler.common import clock
from reconciler.daemon.promotion_http import APPLIED_LOG_KEY, CLUSTER_KEY
from reconciler.daemon.store import connect
from reconciler.ha.role import HA_KEY

KEY = "promotion_operator"
HISTORY = 200
HOTFIXES = 20
MAX_TEXT = 200
OPS = ("approve", "hold", "release", "hotfix", "back")


class Refused(ValueError):
    """A command that cannot be taken: the message says why; nothing was changed."""


def update(path: Path, change: Callable[[dict[str, Any], dict[str, Any]], Any]) -> Any:
    """Read, change and write the row in one transaction (the daemon and the CLI may write at once); CHANGE gets
    the row and the store's meta values it is checked against (cluster, applied commit, applied log)."""
    conn = connect(path)
    try:
        # Most calls (the gate's, each cycle) change nothing: a read without the write lock answers them, and only
        # a change is made again inside BEGIN IMMEDIATE, on the row as it then stands. CHANGE must be pure.
        conn.execute("BEGIN")
        try:
            result, changed = _apply(conn, change)
        finally:
            conn.execute("ROLLBACK")
        if changed is None:
            return result
        conn.execute("BEGIN IMMEDIATE")
        try:
            result, changed = _apply(conn, change)
            if changed is not None:
                conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (KEY, json.dumps(changed)))
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return result
    finally:
        conn.close()


def _apply(conn: sqlite3.Connection,
           change: Callable[[dict[str, Any], dict[str, Any]], Any]) -> tuple[Any, dict[str, Any] | None]:
    """CHANGE's result on the row read through CONN, and the changed row (None when CHANGE left it as it was)."""
    keys = (KEY, CLUSTER_KEY, "applied_commit", APPLIED_LOG_KEY, HA_KEY)
    rows = dict(conn.execute(f"SELECT key, value FROM meta WHERE key IN ({', '.join('?' * len(keys))})", keys))
    row = json.loads(rows[KEY]) if rows.get(KEY) else {}
    meta = {k: json.loads(rows[k]) if rows.get(k) else None for k in keys[1:]}
    result = change(row, meta)
    return result, (row if json.dumps(row) != rows.get(KEY, "{}") else None)


def request(op: str, commit: str | None, who: str, reason: str, at: float | None = None) -> dict[str, Any]:
    """A request as the row keeps it (WHO and REASON cut to one short line)."""
    def line(text: str) -> str:
        return " ".join(text.split())[:MAX_TEXT]

    return {"op": op, "commit": commit, "who": line(who), "reason": line(reason),
            "at": clock.wall() if at is None else at}


def note(row: dict[str, Any], req: dict[str, Any], effect: str) -> None:
    """Add REQ and what came of it to the row's history."""
    row["history"] = [*row.get("history", []), {**req, "effect": effect, "done": clock.wall()}][-HISTORY:]


def by(req: dict[str, Any]) -> str:
    """`alice@login1 at 2026-11-29 10:00 UTC: the reason`."""
    reason = f": {req['reason']}" if req.get("reason") else ""
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(float(req.get("at") or 0)))
    return f"{req.get('who') or '?'} at {stamp}{reason}"


def previous_applied(log: list[dict[str, Any]] | None, applied: str | None) -> str | None:
    """The commit this cluster applied before APPLIED (the applied log, newest last); None when there is none."""
    for entry in reversed(log or []):
        commit = entry.get("commit") if isinstance(entry, dict) else None
        if commit and commit != applied:
            return str(commit)
    return None


def _check(row: dict[str, Any], meta: dict[str, Any], req: dict[str, Any], cluster: str) -> str:
    """Refused unless REQ can be taken by this daemon now; what it will do."""
    mine = meta.get(CLUSTER_KEY)
    if mine != cluster:
        raise Refused(f"this daemon reconciles cluster {mine or '(none: no `cluster:` in its config)'}, not "
                      f"{cluster}" + ("" if mine else "; promotion commands need a cluster's daemon"))
    role = meta.get(HA_KEY) or {}
    if role.get("role") == "standby":
        raise Refused(f"this daemon is the standby of a pair: give the command on the leader "
                      f"({role.get('leader') or 'unknown now'}), whose store its promotion gate reads")
    op, commit, applied = req["op"], str(req.get("commit")), meta.get("applied_commit")
    hold = row.get("hold")
    if op == "approve":
        if commit in (row.get("approvals") or {}):
            raise Refused(f"{commit[:12]} is approved already ({by(row['approvals'][commit])})")
        if commit == applied:
            raise Refused(f"{commit[:12]} is the commit {cluster} applied already: nothing to approve")
        return (f"approved {commit[:12]}: {cluster} applies it once its upstream verdict holds too (this commit "
                "only: a later one needs its own approval)")
    if op == "hold":
        if hold:
            raise Refused(f"held already ({hold.get('kind')}, {by(hold)}); `reconciler promote release` first")
        return f"held: {cluster} applies nothing new until `reconciler promote release` (drift is still healed)"
    if op == "release":
        if not hold:
            raise Refused("not held: nothing to release")
        return f"released: {cluster} promotes again (the hold was {hold.get('kind')}, {by(hold)})"
    if op == "hotfix":
        if not req.get("reason"):
            raise Refused("a hotfix needs --reason: it is recorded and shown wherever the status is")
        if row.get("hotfix"):
            raise Refused(f"a hotfix of {row['hotfix']['commit'][:12]} is asked already ({by(row['hotfix'])}) "
                          "and not yet applied")
        if commit == applied:
            raise Refused(f"{commit[:12]} is the commit {cluster} applied already")
        return (f"asked: {cluster} applies {commit[:12]} at its next cycle, through its own rollout and gates, "
                "without its upstream's verdict or soak")
    if op == "back":
        if row.get("back"):
            raise Refused(f"going back is asked already ({by(row['back'])}) and not yet taken")
        before = previous_applied(meta.get(APPLIED_LOG_KEY), applied)
        if before is None:
            raise Refused(f"{cluster} has applied no commit before {str(applied)[:12]}: nothing to go back to")
        return (f"asked: {cluster} goes back from {str(applied)[:12]} to {before[:12]} at its next cycle (its "
                "rollout and gates, no soak), then holds until `reconciler promote release`")
    raise Refused(f"unknown command {op!r} (one of {', '.join(OPS)})")


def give(path: Path, req: dict[str, Any], cluster: str) -> str:
    """Record REQ for CLUSTER's daemon whose state database is PATH; what it will do, or Refused (nothing written)."""
    def change(row: dict[str, Any], meta: dict[str, Any]) -> str:
        effect = _check(row, meta, req, cluster)
        op = req["op"]
        if op == "approve":
            row["approvals"] = {**(row.get("approvals") or {}), str(req["commit"]): req}
        elif op == "hold":
            row["hold"] = {**req, "kind": "manual", "pin": None}
        elif op == "release":
            row["hold"] = None
        else:
            row[op] = req
        note(row, req, effect)
        return effect

    return str(update(path, change))


def read(path: Path) -> dict[str, Any]:
    """The row as it stands (a copy)."""
    return dict(update(path, lambda row, _: json.loads(json.dumps(row))))
