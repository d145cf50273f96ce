"""What earlier GPU checks saw on each node, in SQLite: boot id, last XID seen and acknowledged, bus -> index."""

from __future__ import annotations

import json
import sqlite3

from reconciler.checks.gpu.xid import XidMemory, acknowledged

SCHEMA = """
CREATE TABLE IF NOT EXISTS gpu_memory (
    node TEXT PRIMARY KEY,
    boot TEXT,
    seen_until REAL,
    acked_until REAL,
    buses TEXT NOT NULL DEFAULT '{}'
)
"""


def ensure_schema(conn: sqlite3.Connection) -> None:
    """Create the table when missing."""
    conn.execute(SCHEMA)


def load(conn: sqlite3.Connection | None, nodes: list[str]) -> dict[str, XidMemory]:
    """Each node's memory (empty for a node never seen, or without a database)."""
    if conn is None:
        return {node: XidMemory() for node in nodes}
    ensure_schema(conn)
    query = "SELECT node, boot, seen_until, acked_until, buses FROM gpu_memory"
    rows = {row[0]: row[1:] for row in conn.execute(query)}
    found = {}
    for node in nodes:
        if node in rows:
            boot, seen, acked, buses = rows[node]
            found[node] = XidMemory(boot, seen, acked, {str(k): int(v) for k, v in json.loads(buses or "{}").items()})
        else:
            found[node] = XidMemory()
    return found


def save(conn: sqlite3.Connection | None, memories: dict[str, XidMemory]) -> None:
    """Store each node's memory (replacing what was there)."""
    if conn is None or not memories:
        return
    ensure_schema(conn)
    was_open = conn.in_transaction
    conn.executemany(
        "INSERT INTO gpu_memory (node, boot, seen_until, acked_until, buses) VALUES (?,?,?,?,?) "
        "ON CONFLICT(node) DO UPDATE SET boot=excluded.boot, seen_until=excluded.seen_until, "
        "acked_until=excluded.acked_until, buses=excluded.buses",
        [(node, m.boot, m.seen_until, m.acked_until, json.dumps(m.buses, sort_keys=True))
         for node, m in memories.items()])
    if conn.in_transaction and not was_open:
        conn.commit()


def acknowledge(conn: sqlite3.Connection, nodes: list[str]) -> dict[str, XidMemory]:
    """Acknowledge every XID seen so far on NODES (after their GPUs were reset): they fail the node no more."""
    memories = {node: acknowledged(memory) for node, memory in load(conn, nodes).items()}
    save(conn, memories)
    return memories
