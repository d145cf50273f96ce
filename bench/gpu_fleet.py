"""The GPU fleet history at scale (issue 48): store size and the time of `reconciler gpus`, the status page's
fleet section, one GPU's history, one fleet-wide check's insert and a prune, for NODES x GPUS GPUs and DAYS of
hourly checks: `python -m bench.gpu_fleet --nodes 1000 --days 30 --out bench/results/gpu-fleet-DATE`.

The history is SYNTHESISED (no fleet of 8,000 GPUs here): each GPU an hourly reading with a temperature that
wanders, 1 GPU in 200 with uncorrectable ECC errors, 1 in 400 a row remap pending, 1 in 1,000 a row-remap
failure, 1 in 100 a few XIDs (13, 31, 48, 79, 94), one node in 20 an NCCL run every 6 h whose bandwidth slides.
The 30 days are bulk-inserted in the store's own layout; the daemon's path (`record`, one reading at a time, as a
check run stores them) is timed on one more fleet-wide check. The peer, measured in the same run on the same
readings, is the plain layout a first version would use: one rowid table with the UUID and node as text in every
reading, ranked with a GROUP BY over all readings.

Goals (set before the run): store <= 300 MB; `reconciler gpus` <= 2 s; the page's fleet section <= 2 s; one
GPU's history <= 0.1 s; one fleet-wide check recorded <= 5 s; the daily prune <= 30 s.
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from reconciler.checks import store as check_store
from reconciler.checks.fleet import store as fleet
from reconciler.checks.fleet.rank import standings
from reconciler.checks.fleet.readings import HW_SLOW, REMAP_FAILURE, REMAP_PENDING, GpuReading
from reconciler.checks.results import CheckResult
from reconciler.daemon import fleet_view
from reconciler.model.fleet import FleetRules

HOUR = 3600
GOALS = {"store_mb": 300, "gpus_s": 2.0, "page_s": 2.0, "history_s": 0.1, "record_s": 5.0, "prune_s": 30.0}


def synthesise(conn: sqlite3.Connection, nodes: int, gpus: int, days: int, now: float, seed: int = 7) -> int:
    """Fill the store with DAYS of hourly readings of NODES x GPUS GPUs (bulk, in the store's layout)."""
    rng = random.Random(seed)
    fleet.ensure_schema(conn)
    check_store.ensure_schema(conn)
    start = int(now - days * 86_400)
    gpu_rows, places, faults = [], [], {}
    for n in range(nodes):
        for i in range(gpus):
            gid = n * gpus + i + 1
            uuid = f"GPU-{gid:08x}-0000-4000-8000-{rng.getrandbits(48):012x}"
            kind = rng.random()
            faults[gid] = ("failure" if kind < 0.001 else "ecc" if kind < 0.006 else "pending" if kind < 0.0085
                           else "xid" if kind < 0.0185 else "")
            gpu_rows.append((gid, uuid, f"{1650000000000 + gid}", "NVIDIA H200", f"gpu{n + 1:04d}", i,
                             f"0000:{i + 6:02x}:00", "580.159.04", float(start), now))
            places.append((gid, float(start), f"gpu{n + 1:04d}", i))
    conn.executemany("INSERT INTO gpu (id, uuid, serial, name, node, idx, bus, driver, first_seen, last_seen) "
                     "VALUES (?,?,?,?,?,?,?,?,?,?)", gpu_rows)
    conn.executemany("INSERT INTO gpu_place VALUES (?,?,?,?)", places)
    conn.execute("INSERT INTO gpu_boot (id, boot) VALUES (1, 'b0')")
    rows = 0
    for hour in range(days * 24):
        at = start + hour * HOUR
        batch = []
        for gid, fault in faults.items():
            flags = (REMAP_FAILURE if fault == "failure" and hour > 100 else 0) | \
                (REMAP_PENDING if fault == "pending" else 0) | (HW_SLOW if rng.random() < 0.001 else 0)
            ecc = 2 if fault == "ecc" and hour > 200 else 0
            batch.append((gid, at, 1, 30 + (gid + hour) % 25, ecc, ecc, flags, 1, 18, 0, 0, 0))
        conn.executemany("INSERT INTO gpu_reading VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", batch)
        rows += len(batch)
    conn.executemany("UPDATE gpu SET boot=1, temperature=40, ecc_volatile=?, ecc_aggregate=?, flags=?, nvlinks=18 "
                     "WHERE id=?", [(2 if f == "ecc" else 0, 2 if f == "ecc" else 0,
                                     REMAP_FAILURE if f == "failure" else REMAP_PENDING if f == "pending" else 0, g)
                                    for g, f in faults.items()])
    xids = [(g, start + rng.randrange(days * 24) * HOUR, rng.choice([13, 31, 48, 79, 94]), 1, "n")
            for g, f in faults.items() if f == "xid" for _ in range(rng.randrange(1, 4))]
    conn.executemany("INSERT OR IGNORE INTO gpu_xid VALUES (?,?,?,?,?)", xids)
    results = []
    for n in range(0, nodes, 20):
        for run in range(days * 4):
            busbw = 480.0 * (1 - 0.2 * run / (days * 4))
            results.append(CheckResult(check="nccl", kind="nccl", node=f"gpu{n + 1:04d}", ok=True, message="",
                                       value=busbw, started=datetime.fromtimestamp(start + run * 6 * HOUR, UTC),
                                       duration=30.0))
    check_store.record_many(conn, results)
    conn.commit()
    return rows


def plain_peer(path: Path, conn: sqlite3.Connection) -> dict[str, float]:
    """The same readings in the plain layout; its size and the time of its ranking query."""
    peer = sqlite3.connect(path)
    peer.execute("CREATE TABLE reading (id INTEGER PRIMARY KEY, uuid TEXT, node TEXT, idx INTEGER, at REAL, "
                 "temperature REAL, ecc_volatile INTEGER, ecc_aggregate INTEGER, retired_pending INTEGER, "
                 "remap_pending INTEGER, remap_failure INTEGER, reasons INTEGER, nvlinks INTEGER, "
                 "sbe_volatile INTEGER, sbe_aggregate INTEGER, pcie_replays INTEGER, driver TEXT)")
    peer.execute("CREATE INDEX reading_by_uuid ON reading (uuid, at)")
    cursor = conn.execute("SELECT g.uuid, g.node, g.idx, r.at, r.temperature, r.ecc_volatile, r.ecc_aggregate, "
                          "r.flags & 1, r.flags & 2, r.flags & 4, r.reasons, r.nvlinks, r.sbe_volatile, "
                          "r.sbe_aggregate, r.pcie_replays, g.driver FROM gpu_reading r "
                          "JOIN gpu g ON g.id = r.gpu")
    while batch := cursor.fetchmany(100_000):
        peer.executemany("INSERT INTO reading (uuid, node, idx, at, temperature, ecc_volatile, ecc_aggregate, "
                         "retired_pending, remap_pending, remap_failure, reasons, nvlinks, sbe_volatile, "
                         "sbe_aggregate, pcie_replays, driver) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", batch)
    peer.commit()
    started = time.perf_counter()
    peer.execute("SELECT uuid, MAX(at), MAX(ecc_aggregate), MAX(remap_failure), MAX(remap_pending) FROM reading "
                 "GROUP BY uuid").fetchall()
    ranked = time.perf_counter() - started
    peer.execute("VACUUM")
    peer.close()
    return {"store_mb": path.stat().st_size / 1e6, "gpus_s": ranked}


def timed(what: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    value = what()
    return time.perf_counter() - started, value


def run(nodes: int, gpus: int, days: int, work: Path) -> dict[str, Any]:
    """One measurement."""
    now = time.time()
    db = work / "state.db"
    conn = sqlite3.connect(db)
    synth_s, rows = timed(lambda: synthesise(conn, nodes, gpus, days, now))
    conn.execute("VACUUM")
    size = db.stat().st_size / 1e6
    rules = FleetRules()
    gpus_s, ranked = timed(lambda: standings(conn, now, rules))
    page_s, html = timed(lambda: fleet_view.section(fleet_view.load(conn, now)))
    worst = ranked[0].uuid
    history_s, _ = timed(lambda: fleet.history(conn, worst))
    check = [GpuReading(uuid=str(u), serial=None, name="NVIDIA H200", node=str(n), index=int(i), bus="", driver="580",
                        at=now + HOUR, boot="b0", temperature=41.0, ecc_volatile=0, ecc_aggregate=0)
             for u, n, i in conn.execute("SELECT uuid, node, idx FROM gpu")]
    record_s, _ = timed(lambda: fleet.record(conn, check))
    prune_s, gone = timed(lambda: fleet.prune(conn, now + HOUR, (days - 1) * 86_400, every=0))
    peer = plain_peer(work / "peer.db", conn)
    conn.close()
    return {"nodes": nodes, "gpus": nodes * gpus, "days": days, "readings": rows, "synthesis_s": round(synth_s, 1),
            "store_mb": round(size, 1), "gpus_s": round(gpus_s, 3), "page_s": round(page_s, 3),
            "page_kb": round(len(html) / 1000, 1), "history_s": round(history_s, 4), "record_s": round(record_s, 3),
            "prune_s": round(prune_s, 2), "pruned": gone, "rma": sum(1 for s in ranked if s.rma),
            "peer_store_mb": round(peer["store_mb"], 1), "peer_gpus_s": round(peer["gpus_s"], 3)}


def main() -> None:
    """Measure, print a table, write results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpu-fleet-") as tmp:
        result = run(args.nodes, args.gpus, args.days, Path(tmp))
    lines = [f"| {k} | {v} | {GOALS.get(k, '')} |" for k, v in result.items()]
    table = "| measure | value | goal |\n| --- | --- | --- |\n" + "\n".join(lines)
    print(table)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "result.json").write_text(json.dumps(result, indent=1) + "\n")
        (args.out / "table.md").write_text(table + "\n")


if __name__ == "__main__":
    main()
