"""The operator's commands in the daemon's state database: `reconciler upgrade pause|resume|skip|retry`.

The CLI writes a request into the `upgrade_operator` row of the state database (one SQLite transaction, beside a
running daemon: nothing is signalled or stopped); the daemon's upgrade machine reads the standing requests on each
pass of its scheduler (rollout/operator.py) and records what it did with them. A request survives a restart: it
stands until acted on (a pause until `resume`).

In a pair (config `ha:`) a command may be given on either login node: there it goes to the row's outbox, each
daemon's lease renewal carries its outbox to the lease node (ha/lease.py, the same flock'd script), and the
leader's renewal takes what waits there into its own row (`take`), checking each against its rollout journal
then: a standby has no rollout in flight to check it against.

Row: {"pause": request | None, "skip": {node: request}, "retry": {node: request}, "outbox": [request],
"history": [request + effect, done]} (history: the newest HISTORY kept).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reconciler.daemon.store import JOURNAL_KEY, connect
from reconciler.daemon.upgrade_view import failed_last
from reconciler.rollout.journal import glance
from reconciler.rollout.operator import Request, Requests, pause_why

KEY = "upgrade_operator"
HISTORY = 200
MAX_TEXT = 200  # characters of --reason and --who (one line: status and a skipped node's reason show it)


class Refused(ValueError):
    """A command that cannot be taken: the message says why; nothing was changed."""


@dataclass(frozen=True)
class Seen:
    """What a command is checked against: the rollout journal in flight, the last rollout's record."""

    journal: Any
    last: dict[str, Any] | None


def _update(path: Path, change: Callable[[dict[str, Any], Any], Any]) -> Any:
    """Read, change and write the row in one transaction (the daemon and the CLI may write at once); CHANGE gets
    the row and what it is checked against (`Seen`)."""
    conn = connect(path)
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            rows = dict(conn.execute("SELECT key, value FROM meta WHERE key IN (?, ?)", (KEY, JOURNAL_KEY)))
            row = json.loads(rows[KEY]) if KEY in rows else {}
            last = conn.execute("SELECT record FROM rollouts ORDER BY id DESC LIMIT 1").fetchone()
            result = change(row, Seen(json.loads(rows[JOURNAL_KEY]) if JOURNAL_KEY in rows else None,
                                      json.loads(last[0]) if last else None))
            if json.dumps(row) != rows.get(KEY, "{}"):  # each lease renewal asks: written only when changed
                conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (KEY, json.dumps(row)))
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return result
    finally:
        conn.close()


def _history(row: dict[str, Any], request: Request, effect: str) -> None:
    row["history"] = [*row.get("history", []), {**request.as_dict(), "effect": effect, "done": time.time()}][
        -HISTORY:]


def _check(row: dict[str, Any], seen_now: Seen, request: Request) -> str:
    """Refused unless REQUEST can be taken now (against the rollout journal in flight, or for a retry with none in
    flight, the last rollout's record); what it will do."""
    op, node = request.op, request.node
    pause = row.get("pause")
    if op == "pause":
        if pause:
            raise Refused(f"already paused ({Request.from_dict(pause).by()}); `reconciler upgrade resume` first")
        return "paused: nodes in flight finish, no new node starts until `reconciler upgrade resume`"
    if op == "resume":
        if not pause:
            raise Refused("not paused: nothing to resume")
        return "resumed: nodes not started may start again"
    seen = glance(seen_now.journal)
    nodes = (seen.upgrade or {}).get("nodes") if seen else None
    if (not isinstance(nodes, dict) or not nodes) and op == "retry":
        return _retry_after(row, seen_now.last, str(node))
    if not isinstance(nodes, dict) or not nodes:
        raise Refused(f"no upgrade in flight: no node to {op}")
    if node not in nodes:
        raise Refused(f"{node} is not a node of the upgrade in flight (its nodes: {', '.join(sorted(nodes))})")
    state = str((nodes[node] or {}).get("state"))
    _not_asked(row, op, str(node))
    if op == "skip" and state != "upgrade-required":
        raise Refused(f"{node} is {state}: only a node not yet started can be skipped (a node in flight finishes "
                      "its upgrade; a node done is on the new version)")
    if op == "retry" and state != "failed":
        raise Refused(f"{node} is {state}, not failed: only a failed node can be retried")
    return ("asked: the daemon leaves it on the old version, reported skipped" if op == "skip" else
            "asked: the daemon puts it through the upgrade again (its own drain, resumed after the gates)")


def _not_asked(row: dict[str, Any], op: str, node: str) -> None:
    """Refused when OP of NODE is asked already and not yet acted on."""
    if node in row.get(op, {}):
        raise Refused(f"{node}: a {op} is already asked ({Request.from_dict(row[op][node]).by()}) and not yet "
                      "acted on")


def _retry_after(row: dict[str, Any], last: dict[str, Any] | None, node: str) -> str:
    """A retry with no rollout in flight: NODE must have failed in the last rollout (daemon/loop_retry.py)."""
    _not_asked(row, "retry", node)
    failed = failed_last(last)
    if node not in failed:
        raise Refused(f"no upgrade in flight, and {node} did not fail in the last one"
                      + (f" (failed there: {', '.join(sorted(failed))})" if failed else ""))
    return ("asked: no upgrade is in flight; the daemon's next cycle puts it through the upgrade again on its own "
            "(its drain, what is still to apply, the gates, the resume)")


def _take(row: dict[str, Any], seen: Seen, request: Request) -> str:
    """Check REQUEST and make it stand in ROW; what it will do (Refused: ROW unchanged)."""
    effect = _check(row, seen, request)
    if request.op == "pause":
        row["pause"] = request.as_dict()
    elif request.op == "resume":
        row["pause"] = None
    else:
        row.setdefault(request.op, {})[str(request.node)] = request.as_dict()
    if request.op in ("pause", "resume"):
        _history(row, request, effect)
    return effect


def give(path: Path, request: Request, *, pair: bool = False) -> str:
    """Take REQUEST at this login node's state database; what happens next (Refused: nothing changed). PAIR: a
    daemon of a pair, the request goes to the leader through the lease node."""
    if request.op in ("skip", "retry") and not request.node:
        raise Refused(f"{request.op} needs a NODE")
    for name, text in (("--reason", request.reason), ("--who", request.who)):
        if len(text) > MAX_TEXT or not text.isprintable():
            raise Refused(f"{name} must be one printable line of at most {MAX_TEXT} characters (status shows it; "
                          f"got {len(text)} characters{'' if text.isprintable() else ', with a control character'})")

    def change(row: dict[str, Any], seen: Seen) -> str:
        if not pair:
            return _take(row, seen, request)
        row["outbox"] = [*row.get("outbox", []), request.as_dict()]
        return ("queued for the leader: this daemon's next lease renewal carries it to the lease node, and the "
                "leader's takes it from there and checks it (see `reconciler status` on the leader)")
    return str(_update(path, change))


def outbox(path: Path) -> list[dict[str, Any]]:
    """The requests given here for the leader, not yet carried to the lease node."""
    return list(_update(path, lambda row, _: list(row.get("outbox", []))))


def carried(path: Path, sent: list[dict[str, Any]]) -> None:
    """SENT reached the lease node: out of the outbox."""
    def change(row: dict[str, Any], _: Any) -> None:
        row["outbox"] = [r for r in row.get("outbox", []) if r not in sent]
    _update(path, change)


def take(path: Path, requests: list[dict[str, Any]]) -> list[str]:
    """The leader takes REQUESTS from the lease node, in order, each checked here (a refusal is kept in the
    history, never lost); what became of each."""
    def change(row: dict[str, Any], seen: Seen) -> list[str]:
        out = []
        for data in requests:
            request = Request.from_dict(data)
            try:
                out.append(_take(row, seen, request))
            except Refused as exc:
                _history(row, request, f"refused: {exc}")
                out.append(f"refused: {exc}")
        return out
    return list(_update(path, change))


def load(row: Any) -> Requests:
    """The standing requests of a stored row (lenient: a garbled part reads as absent)."""
    row = row if isinstance(row, dict) else {}

    def many(name: str) -> dict[str, Request]:
        part = row.get(name)
        return {str(n): Request.from_dict(r) for n, r in part.items() if isinstance(r, dict)} \
            if isinstance(part, dict) else {}
    pause = row.get("pause")
    return Requests(Request.from_dict(pause) if isinstance(pause, dict) else None, many("skip"), many("retry"))


class StoreDesk:
    """The upgrade machine's desk (rollout/operator.py `Desk`) over the state database at PATH (a connection per
    call: the machine's scheduler runs in its own thread)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def requests(self) -> Requests:
        """The standing requests (none when the database cannot be read this time: asked again next pass)."""
        try:  # a plain reader (asked before each node: no schema work), the daemon's database exists
            conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=30)
            try:
                row = conn.execute("SELECT value FROM meta WHERE key=?", (KEY,)).fetchone()
            finally:
                conn.close()
        except sqlite3.Error:
            return Requests()
        return load(json.loads(row[0]) if row else None)

    def acted(self, op: str, node: str, effect: str) -> None:
        """The request is done: out of the standing ones, into the history."""
        def change(row: dict[str, Any], _: Any) -> None:
            data = (row.get(op) or {}).pop(node, None)
            if data is not None:
                _history(row, Request.from_dict(data), effect)
        _update(self.path, change)


class PairCarrier:
    """What a daemon of a pair's lease renewal does with operator commands (ha/role.py `Operator`): carries its
    outbox to the lease node; as the leader, takes what waits there into its own row."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def outbox(self) -> list[dict[str, Any]]:
        """This login node's commands for the leader."""
        return outbox(self.path)

    def carried(self, sent: list[dict[str, Any]]) -> None:
        """Out of the outbox."""
        if sent:
            carried(self.path, sent)

    def take(self, requests: list[dict[str, Any]]) -> None:
        """Into the leader's row, each checked."""
        take(self.path, requests)


# ---------------------------------------------------------------- what status and the page show


def shown(row: Any, last: int = 5) -> dict[str, Any]:
    """The row as status shows it: the pause, the skips and retries not yet acted on, the LAST acts done."""
    requests = load(row)
    history = (row or {}).get("history") if isinstance(row, dict) else None
    outbox = (row or {}).get("outbox") if isinstance(row, dict) else None
    return {"paused": requests.pause.as_dict() if requests.pause else None,
            "asked": [r.as_dict() for r in [*requests.skip.values(), *requests.retry.values()]],
            "outbox": [r for r in outbox or [] if isinstance(r, dict)],
            "history": [h for h in (history or [])[-last:] if isinstance(h, dict)]}


def status_lines(data: dict[str, Any] | None) -> list[str]:
    """`reconciler status` lines for SHOWN data (none when the operator never gave a command)."""
    if not data:
        return []
    out = []
    if data.get("paused"):
        out.append(f"upgrade:        PAUSED: {pause_why(Request.from_dict(data['paused']))} "
                   "(`reconciler upgrade resume` lifts it)")
    for key, what in (("asked", "not yet acted on"), ("outbox", "not yet carried to the leader")):
        for asked in data.get(key) or []:
            request = Request.from_dict(asked)
            out.append(f"  operator asked: {_what(request)} ({request.by()}), {what}")
    for done in data.get("history") or []:
        request = Request.from_dict(done)
        stamp = time.strftime("%H:%M:%S UTC", time.gmtime(float(done.get("done") or 0)))
        out.append(f"  operator {_what(request)} ({request.by()}) {stamp}: {done.get('effect')}")
    return out


def _what(request: Request) -> str:
    return f"{request.op} {request.node}" if request.node else request.op
