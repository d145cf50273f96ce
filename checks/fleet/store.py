"""Every GPU's history in the daemon's SQLite store, keyed by UUID: where it was (node, index, since when), its
readings, its XIDs, and a summary row kept current at each insert so that ranking the fleet reads one row per GPU.

Sizes (bench/gpu_fleet.py measures them): a reading is one WITHOUT ROWID row of small integers keyed by
(gpu id, second); boots are interned; the node is kept only when a GPU moves (`gpu_place`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from reconciler.checks.fleet.readings import REMAP_PENDING, RETIRED_PENDING, GpuReading, XidSeen
from reconciler.model.fleet import FleetRules

SCHEMA = """
CREATE TABLE IF NOT EXISTS gpu (
    id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE, serial TEXT, name TEXT NOT NULL DEFAULT '',
    node TEXT NOT NULL, idx INTEGER NOT NULL, bus TEXT NOT NULL DEFAULT '', driver TEXT NOT NULL DEFAULT '',
    first_seen REAL NOT NULL, last_seen REAL NOT NULL, boot INTEGER, temperature REAL, ecc_volatile INTEGER,
    ecc_aggregate INTEGER, flags INTEGER NOT NULL DEFAULT 0, reasons INTEGER, nvlinks INTEGER,
    pending_boot INTEGER, pending_again REAL, sbe_volatile INTEGER, sbe_aggregate INTEGER, pcie_replays INTEGER
);
CREATE TABLE IF NOT EXISTS gpu_boot (id INTEGER PRIMARY KEY, boot TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS gpu_place (
    gpu INTEGER NOT NULL, since REAL NOT NULL, node TEXT NOT NULL, idx INTEGER NOT NULL, PRIMARY KEY (gpu, since)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS gpu_driver (
    gpu INTEGER NOT NULL, since REAL NOT NULL, driver TEXT NOT NULL, PRIMARY KEY (gpu, since)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS gpu_reading (
    gpu INTEGER NOT NULL, at INTEGER NOT NULL, boot INTEGER, temperature INTEGER, ecc_volatile INTEGER,
    ecc_aggregate INTEGER, flags INTEGER NOT NULL, reasons INTEGER, nvlinks INTEGER, sbe_volatile INTEGER,
    sbe_aggregate INTEGER, pcie_replays INTEGER, PRIMARY KEY (gpu, at)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS gpu_xid (
    gpu INTEGER NOT NULL, at INTEGER NOT NULL, code INTEGER NOT NULL, count INTEGER NOT NULL, node TEXT NOT NULL,
    PRIMARY KEY (gpu, at, code)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS gpu_pruned (at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS gpu_rules (rules TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS gpu_rma (
    gpu INTEGER NOT NULL, rule TEXT NOT NULL, since REAL NOT NULL, detail TEXT NOT NULL, PRIMARY KEY (gpu, rule)
) WITHOUT ROWID;
"""
PENDING = RETIRED_PENDING | REMAP_PENDING


def ensure_schema(conn: sqlite3.Connection) -> None:
    """Create the tables when missing."""
    was_open = conn.in_transaction
    for statement in SCHEMA.split(";"):
        if statement.strip():
            conn.execute(statement)
    if conn.in_transaction and not was_open:
        conn.commit()


def _boot_id(conn: sqlite3.Connection, boot: str | None, cache: dict[str, int]) -> int | None:
    if boot is None:
        return None
    if boot not in cache:
        conn.execute("INSERT OR IGNORE INTO gpu_boot (boot) VALUES (?)", (boot,))
        cache[boot] = int(conn.execute("SELECT id FROM gpu_boot WHERE boot=?", (boot,)).fetchone()[0])
    return cache[boot]


def _gpu_row(conn: sqlite3.Connection, reading: GpuReading) -> tuple[int, dict[str, Any] | None]:
    """The GPU's id and summary (None for a GPU never seen before: inserted now)."""
    row = conn.execute("SELECT id, node, idx, pending_boot, pending_again, driver FROM gpu WHERE uuid=?",
                       (reading.uuid,)).fetchone()
    if row is not None:
        return int(row[0]), {"node": row[1], "idx": row[2], "pending_boot": row[3], "pending_again": row[4],
                             "driver": row[5]}
    cur = conn.execute("INSERT INTO gpu (uuid, serial, name, node, idx, bus, driver, first_seen, last_seen) "
                       "VALUES (?,?,?,?,?,?,?,?,?)", (reading.uuid, reading.serial, reading.name, reading.node,
                                                      reading.index, reading.bus, reading.driver, reading.at,
                                                      reading.at))
    return int(cur.lastrowid or 0), None


def record(conn: sqlite3.Connection, readings: Iterable[GpuReading], xids: Iterable[XidSeen] = ()) -> int:
    """Store READINGS and XIDS in one transaction; a GPU seen on another node or index starts a new place.
    Returns how many readings were stored."""
    was_open = conn.in_transaction
    boots: dict[str, int] = {}
    ids: dict[str, int] = {}
    stored = 0
    for r in readings:
        gpu, known = _gpu_row(conn, r)
        ids[r.uuid] = gpu
        boot = _boot_id(conn, r.boot, boots)
        if known is None or (known["node"], known["idx"]) != (r.node, r.index):
            conn.execute("INSERT OR REPLACE INTO gpu_place VALUES (?,?,?,?)", (gpu, r.at, r.node, r.index))
        if known is None or known["driver"] != r.driver:
            conn.execute("INSERT OR REPLACE INTO gpu_driver VALUES (?,?,?)", (gpu, r.at, r.driver))
        pending_boot, again = (known or {}).get("pending_boot"), (known or {}).get("pending_again")
        if r.flags & PENDING and boot is not None:
            if pending_boot is None:
                pending_boot = boot
            elif boot != pending_boot and again is None:
                again = r.at  # still pending in another boot: a reset did not apply it
        conn.execute("UPDATE gpu SET serial=coalesce(?, serial), name=?, node=?, idx=?, bus=?, driver=?, "
                     "last_seen=max(last_seen, ?), boot=?, temperature=?, ecc_volatile=?, ecc_aggregate=?, flags=?, "
                     "reasons=?, nvlinks=?, pending_boot=?, pending_again=?, sbe_volatile=?, sbe_aggregate=?, "
                     "pcie_replays=? WHERE id=?",
                     (r.serial, r.name, r.node, r.index, r.bus, r.driver, r.at, boot, r.temperature,
                      r.ecc_volatile, r.ecc_aggregate, r.flags, r.reasons, r.nvlinks, pending_boot, again,
                      r.sbe_volatile, r.sbe_aggregate, r.pcie_replays, gpu))
        conn.execute("INSERT OR REPLACE INTO gpu_reading VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                     (gpu, int(r.at), boot, None if r.temperature is None else round(r.temperature),
                      r.ecc_volatile, r.ecc_aggregate, r.flags, r.reasons, r.nvlinks, r.sbe_volatile,
                      r.sbe_aggregate, r.pcie_replays))
        stored += 1
    for x in xids:
        known_id = (ids.get(x.uuid) or _known_id(conn, x.uuid)) if x.uuid else _at_bus(conn, x.node, x.bus)
        if known_id is not None:
            conn.execute("INSERT INTO gpu_xid VALUES (?,?,?,?,?) ON CONFLICT (gpu, at, code) DO UPDATE SET "
                         "count = count + excluded.count", (known_id, int(x.at), x.code, x.count, x.node))
    if conn.in_transaction and not was_open:
        conn.commit()
    return stored


def _at_bus(conn: sqlite3.Connection, node: str, bus: str) -> int | None:
    """The GPU last seen at BUS of NODE (an XID of a GPU this query did not list)."""
    row = conn.execute("SELECT id FROM gpu WHERE node=? AND bus=? ORDER BY last_seen DESC LIMIT 1",
                       (node, bus)).fetchone()
    return int(row[0]) if row else None


def _known_id(conn: sqlite3.Connection, uuid: str) -> int | None:
    row = conn.execute("SELECT id FROM gpu WHERE uuid=?", (uuid,)).fetchone()
    return int(row[0]) if row else None


PRUNE_EVERY = 86_400.0  # a prune reads every reading: once a day


def prune(conn: sqlite3.Connection, now: float, retention: float, every: float = PRUNE_EVERY) -> int:
    """Forget readings and XIDs older than RETENTION seconds (a GPU's identity, places and RMA rows stay), at most
    once per EVERY seconds (0: now)."""
    was_open = conn.in_transaction
    last = conn.execute("SELECT MAX(at) FROM gpu_pruned").fetchone()[0]
    if every and last is not None and now - float(last) < every:
        return 0
    cutoff = int(now - retention)
    gone = conn.execute("DELETE FROM gpu_reading WHERE at < ?", (cutoff,)).rowcount
    gone += conn.execute("DELETE FROM gpu_xid WHERE at < ?", (cutoff,)).rowcount
    conn.execute("DELETE FROM gpu_pruned")
    conn.execute("INSERT INTO gpu_pruned VALUES (?)", (now,))
    if conn.in_transaction and not was_open:
        conn.commit()
    return gone


@dataclass(frozen=True)
class Place:
    """Where a GPU was from SINCE on."""

    since: float
    node: str
    index: int


@dataclass
class GpuHistory:
    """One GPU: identity, places, readings (oldest first), XIDs (oldest first)."""

    uuid: str
    serial: str | None
    name: str
    node: str
    index: int
    places: list[Place]
    drivers: list[tuple[float, str]]  # (since, driver version), oldest first
    readings: list[dict[str, Any]]
    xids: list[dict[str, Any]]


_READING = ("at", "boot", "temperature", "ecc_volatile", "ecc_aggregate", "flags", "reasons", "nvlinks",
            "sbe_volatile", "sbe_aggregate", "pcie_replays")


def history(conn: sqlite3.Connection, uuid: str, since: float | None = None, limit: int = 5000) -> GpuHistory | None:
    """The history of the GPU with UUID (a prefix of at least 8 characters will do), or None."""
    rows = conn.execute("SELECT id, uuid, serial, name, node, idx FROM gpu WHERE uuid=? OR (length(?) >= 8 AND "
                        "uuid LIKE ? || '%') LIMIT 2", (uuid, uuid, uuid)).fetchall()
    if len(rows) != 1:
        return None
    gpu, full, serial, name, node, idx = rows[0]
    places = [Place(float(s), str(n), int(i)) for s, n, i in conn.execute(
        "SELECT since, node, idx FROM gpu_place WHERE gpu=? ORDER BY since", (gpu,))]
    drivers = [(float(t), str(d)) for t, d in conn.execute(
        "SELECT since, driver FROM gpu_driver WHERE gpu=? ORDER BY since", (gpu,))]
    low = int(since or 0)
    readings = [dict(zip(_READING, r, strict=True)) for r in conn.execute(
        "SELECT r.at, b.boot, r.temperature, r.ecc_volatile, r.ecc_aggregate, r.flags, r.reasons, r.nvlinks, "
        "r.sbe_volatile, r.sbe_aggregate, r.pcie_replays "
        "FROM gpu_reading r LEFT JOIN gpu_boot b ON b.id = r.boot WHERE r.gpu=? AND r.at >= ? "
        "ORDER BY r.at DESC LIMIT ?", (gpu, low, limit))]
    xids = [{"at": a, "code": c, "count": n, "node": nd} for a, c, n, nd in conn.execute(
        "SELECT at, code, count, node FROM gpu_xid WHERE gpu=? AND at >= ? ORDER BY at", (gpu, low))]
    return GpuHistory(str(full), serial, str(name), str(node), int(idx), places, drivers, list(reversed(readings)),
                      xids)


def save_rules(conn: sqlite3.Connection, rules: FleetRules) -> None:
    """Keep the rules the daemon judges by: `reconciler gpus` reads the fleet with the same ones."""
    text = rules.model_dump_json()
    row = conn.execute("SELECT rules FROM gpu_rules").fetchone()
    if row is None or row[0] != text:
        was_open = conn.in_transaction
        conn.execute("DELETE FROM gpu_rules")
        conn.execute("INSERT INTO gpu_rules VALUES (?)", (text,))
        if conn.in_transaction and not was_open:
            conn.commit()


def load_rules(conn: sqlite3.Connection) -> FleetRules:
    """The rules the daemon last judged by (the defaults before it ever did)."""
    try:
        row = conn.execute("SELECT rules FROM gpu_rules").fetchone()
    except sqlite3.OperationalError:
        row = None
    return FleetRules.model_validate_json(row[0]) if row else FleetRules()


def sync_candidates(conn: sqlite3.Connection, met: dict[str, list[tuple[str, float, str]]]) -> list[tuple[str, str]]:
    """Keep `gpu_rma` to MET (uuid -> [(rule, since, detail)]); return the (uuid, rule) pairs new since the last
    call (a GPU that meets a rule again after it stopped is new again)."""
    was_open = conn.in_transaction
    ids = {str(u): int(i) for i, u in conn.execute("SELECT id, uuid FROM gpu")}
    now = {(ids[u], rule): (since, detail) for u, hits in met.items() if u in ids for rule, since, detail in hits}
    before = {(int(g), str(r)) for g, r in conn.execute("SELECT gpu, rule FROM gpu_rma")}
    for key in before - set(now):
        conn.execute("DELETE FROM gpu_rma WHERE gpu=? AND rule=?", key)
    new = sorted(set(now) - before)
    conn.executemany("INSERT INTO gpu_rma VALUES (?,?,?,?)", [(g, r, *now[(g, r)]) for g, r in new])
    if conn.in_transaction and not was_open:
        conn.commit()
    uuids = {i: u for u, i in ids.items()}
    return [(uuids[g], r) for g, r in new]
