"""The fleet, worst first: each GPU's score and why, and the RMA rules (`checks.fleet.rma`) it meets, since when.

Reads the summary row of every GPU, its XIDs within the rules' windows and its node's NCCL bandwidth trend: one
pass over `gpu` plus one grouped read of `gpu_xid`, whatever the length of the history. "Since when" is looked
up for the few GPUs that meet a rule only.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

from reconciler.checks.fleet.bandwidth import Slide, slides
from reconciler.checks.fleet.readings import FLAG_NAMES, HW_SLOW, PCIE_DEGRADED, REMAP_FAILURE
from reconciler.checks.fleet.store import PENDING
from reconciler.checks.gpu.xid import meaning
from reconciler.model import parse_duration
from reconciler.model.fleet import FleetRules

RMA_WEIGHT = 1000  # any RMA rule puts a GPU above every GPU that meets none


@dataclass(frozen=True)
class RmaHit:
    """An RMA rule a GPU meets: which, since when, with what."""

    rule: str
    since: float
    detail: str


@dataclass
class Standing:
    """One GPU's place in the fleet."""

    uuid: str
    serial: str | None
    name: str
    node: str
    index: int
    last_seen: float
    score: float = 0.0
    why: list[str] = field(default_factory=list)
    rma: list[RmaHit] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        """For JSON."""
        return {"uuid": self.uuid, "serial": self.serial, "name": self.name, "node": self.node, "index": self.index,
                "last_seen": self.last_seen, "score": round(self.score, 1), "why": self.why,
                "rma": [{"rule": h.rule, "since": h.since, "detail": h.detail} for h in self.rma]}


def _xid_counts(conn: sqlite3.Connection, now: float, rules: FleetRules) -> dict[int, dict[int, int]]:
    """gpu id -> code -> events within the longest window of the rules (and 7 days for the score)."""
    longest = max([parse_duration(r.within) for r in rules.rma.xids] + [7 * 86_400])
    counts: dict[int, dict[int, int]] = {}
    for gpu, code, total in conn.execute("SELECT gpu, code, SUM(count) FROM gpu_xid WHERE at >= ? "
                                         "GROUP BY gpu, code", (int(now - longest),)):
        counts.setdefault(int(gpu), {})[int(code)] = int(total)
    return counts


def _xid_hits(conn: sqlite3.Connection, gpu: int, now: float, rules: FleetRules) -> list[RmaHit]:
    """The XID rules GPU meets, each since the event that made its count."""
    hits = []
    for rule in rules.rma.xids:
        start = int(now - parse_duration(rule.within))
        marks = ",".join("?" * len(rule.codes))
        rows = conn.execute(f"SELECT at, code, count FROM gpu_xid WHERE gpu=? AND at >= ? AND code IN ({marks}) "
                            "ORDER BY at", (gpu, start, *rule.codes)).fetchall()
        total = 0
        for at, _, count in rows:
            total += int(count)
            if total >= rule.count:
                codes = ", ".join(f"{c} ({meaning(c)})" for c in sorted({int(c) for _, c, _ in rows}))
                hits.append(RmaHit(rule.name, float(at), f"{total} XID(s) {codes} within {rule.within} (rule: "
                                   f"{rule.count} or more)"))
                break
    return hits


def _first(conn: sqlite3.Connection, gpu: int, where: str, args: tuple[object, ...]) -> float | None:
    row = conn.execute(f"SELECT MIN(at) FROM gpu_reading WHERE gpu=? AND {where}", (gpu, *args)).fetchone()
    return float(row[0]) if row and row[0] is not None else None


def rma_hits(conn: sqlite3.Connection, gpu: int, summary: sqlite3.Row | tuple[object, ...], now: float,
             rules: FleetRules, xids: dict[int, int]) -> list[RmaHit]:
    """The RMA rules the GPU with id GPU meets (SUMMARY: its `gpu` row as `standings` reads it)."""
    flags, ecc, pending_again = int(str(summary[7] or 0)), summary[8], summary[10]
    rma = rules.rma
    hits: list[RmaHit] = []
    if rma.row_remap_failure and flags & REMAP_FAILURE:
        since = _first(conn, gpu, "flags & ? != 0", (REMAP_FAILURE,)) or now
        hits.append(RmaHit("row-remap-failure", since, "the GPU reports a row-remapping failure (NVIDIA's RMA "
                           "criterion for its memory)"))
    if rma.uncorrectable_ecc and ecc is not None and int(str(ecc)) >= rma.uncorrectable_ecc:
        since = _first(conn, gpu, "ecc_aggregate >= ?", (rma.uncorrectable_ecc,)) or now
        hits.append(RmaHit("uncorrectable-ecc", since, f"{ecc} uncorrectable ECC error(s) over its life (rule: "
                           f"{rma.uncorrectable_ecc} or more)"))
    if rma.pending_after_reset and pending_again is not None:
        hits.append(RmaHit("pending-after-reset", float(str(pending_again)), "a retired page or row remap still "
                           "pending after the GPU was reset (seen pending in two boots)"))
    if any(code in xids for rule in rma.xids for code in rule.codes):
        hits += _xid_hits(conn, gpu, now, rules)
    return hits


_SUMMARY = ("SELECT id, uuid, serial, name, node, idx, last_seen, flags, ecc_aggregate, ecc_volatile, pending_again, "
            "temperature, reasons, nvlinks, sbe_aggregate, pcie_replays FROM gpu")
SBE_NOTED = 1000  # lifetime corrected ECC errors from which they are named (alone they are no RMA reason)
REPLAYS_NOTED = 100  # PCIe replays since the last reset from which the link is named (a marginal link)


def standings(conn: sqlite3.Connection, now: float, rules: FleetRules, *, node: str | None = None,
              since: float | None = None, nccl_checks: list[str] | None = None) -> list[Standing]:
    """Every GPU (seen since SINCE, on NODE), worst first, with why and the RMA rules it meets."""
    where: list[str] = []
    args: list[object] = []
    if node is not None:
        where.append("node = ?")
        args.append(node)
    if since is not None:
        where.append("last_seen >= ?")
        args.append(since)
    rows = conn.execute(_SUMMARY + (" WHERE " + " AND ".join(where) if where else ""), args).fetchall()
    xids = _xid_counts(conn, now, rules)
    trends = {s.node: s for s in slides(conn, rules.bandwidth_drop, nccl_checks)}
    links = max((int(str(r[13])) for r in rows if r[13] is not None), default=None)
    out = []
    for row in rows:
        gpu = int(row[0])
        standing = Standing(str(row[1]), row[2], str(row[3]), str(row[4]), int(row[5]), float(row[6]))
        _score(standing, row, xids.get(gpu, {}), trends.get(standing.node), links)
        standing.rma = rma_hits(conn, gpu, row, now, rules, xids.get(gpu, {}))
        standing.score += RMA_WEIGHT * len(standing.rma)
        out.append(standing)
    out.sort(key=lambda s: (-s.score, s.node, s.index))
    return out


def _score(standing: Standing, row: tuple[object, ...], xids: dict[int, int], slide: Slide | None,
           links: int | None) -> None:
    """Add what makes a GPU worse than a healthy one, with why."""
    flags = int(str(row[7] or 0))
    for bit, name in FLAG_NAMES.items():
        if flags & bit:
            weight = {REMAP_FAILURE: 300, HW_SLOW: 30, PCIE_DEGRADED: 30}.get(bit, 100)
            standing.score += weight
            standing.why.append(name)
    if flags & PENDING == 0 and row[10] is not None:
        standing.why.append("pending after a reset (cleared since)")
    ecc, volatile = row[8], row[9]
    if ecc:
        standing.score += 50 * min(int(str(ecc)), 20)
        standing.why.append(f"{ecc} uncorrectable ECC error(s) (lifetime)")
    if volatile:
        standing.score += 20
        standing.why.append(f"{volatile} uncorrectable ECC error(s) since the last reset")
    sbe = row[14]
    if sbe is not None and int(str(sbe)) >= SBE_NOTED:
        standing.score += 5
        standing.why.append(f"{sbe} corrected ECC error(s) (lifetime)")
    replays = row[15]
    if replays is not None and int(str(replays)) >= REPLAYS_NOTED:
        standing.score += 30
        standing.why.append(f"{replays} PCIe replays since the last reset")
    for code, count in sorted(xids.items()):
        standing.score += 10 * count
        standing.why.append(f"XID {code} ({meaning(code)}) x{count}")
    if links is not None and row[13] is not None and int(str(row[13])) < links:
        standing.score += 40
        standing.why.append(f"{row[13]} of {links} NVLink links active")
    temperature = row[11]
    if temperature is not None and float(str(temperature)) >= 85:
        standing.score += 10
        standing.why.append(f"{float(str(temperature)):.0f} C")
    if slide is not None:
        standing.score += 5 * slide.drop
        standing.why.append(slide.text())
