"""`reconciler gpus [UUID]`: the fleet's GPUs worst first, with why and the RMA rules each meets; or one GPU's
history (where it was, its readings, its XIDs). Read from the daemon's store, judged by the rules the daemon last
used (`checks.fleet` of its desired state)."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import click

from reconciler.cli.daemon import WHERE_OPTIONS, state_dir_of, with_options
from reconciler.model import parse_duration


def _stamp(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ts)) if ts else "-"


def _open(config_path: str | None, state_dir: str | None) -> sqlite3.Connection:
    path = state_dir_of(config_path, state_dir) / "state.db"
    if not path.exists():
        raise click.ClickException(f"no daemon state at {path} (has `reconciler run` started?)")
    return sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True)


def fleet_table(rows: list[Any], limit: int) -> list[str]:
    """The standings as text lines (a header, then one line per GPU, worst first)."""
    lines = [f"{'#':>3}  {'score':>6}  {'node':<10} {'gpu':>3}  {'uuid':<22} {'serial':<14} rma / why"]
    for rank, s in enumerate(rows[:limit], 1):
        rma = "; ".join(f"RMA {h.rule} since {_stamp(h.since)}: {h.detail}" for h in s.rma)
        why = ", ".join(s.why) or "healthy"
        lines.append(f"{rank:>3}  {s.score:>6.0f}  {s.node:<10} {s.index:>3}  {s.uuid[:22]:<22} "
                     f"{(s.serial or '-')[:14]:<14} {rma + ' | ' if rma else ''}{why}")
    if len(rows) > limit:
        lines.append(f"... {len(rows) - limit} more (--limit)")
    return lines


def history_lines(found: Any, hits: list[Any]) -> list[str]:
    """One GPU's history as text."""
    from reconciler.checks.fleet.readings import FLAG_NAMES

    out = [f"GPU {found.uuid} (serial {found.serial or '-'}, {found.name}): now {found.node} gpu {found.index}"]
    for hit in hits:
        out.append(f"  RMA candidate: {hit.rule} since {_stamp(hit.since)}: {hit.detail}")
    out.append("  places:")
    out += [f"    since {_stamp(p.since)}: {p.node} gpu {p.index}" for p in found.places]
    out.append("  drivers:")
    out += [f"    since {_stamp(since)}: {driver}" for since, driver in found.drivers]
    out.append(f"  XIDs ({len(found.xids)}):")
    out += [f"    {_stamp(x['at'])} {x['node']}: XID {x['code']} x{x['count']}" for x in found.xids[-20:]]
    out.append(f"  readings ({len(found.readings)}, the last 20):")
    for r in found.readings[-20:]:
        flags = ",".join(n for b, n in FLAG_NAMES.items() if r["flags"] & b) or "-"
        out.append(f"    {_stamp(r['at'])} temp {r['temperature'] if r['temperature'] is not None else '-'} C, "
                   f"ecc {r['ecc_volatile']}/{r['ecc_aggregate']} uncorrected, "
                   f"{r['sbe_volatile']}/{r['sbe_aggregate']} corrected (since reset/lifetime), flags {flags}, "
                   f"nvlinks {r['nvlinks'] if r['nvlinks'] is not None else '-'}")
    return out


@click.command("gpus")
@click.argument("uuid", required=False)
@with_options(*WHERE_OPTIONS)
@click.option("--node", default=None, help="Only this node's GPUs.")
@click.option("--since", default=None, help="Only GPUs seen in this long (e.g. 7d); with UUID, readings since.")
@click.option("--rma", "rma_only", is_flag=True, help="Only RMA candidates.")
@click.option("--limit", default=50, show_default=True, help="Lines of the table.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def gpus(uuid: str | None, config_path: str | None, state_dir: str | None, node: str | None, since: str | None,
         rma_only: bool, limit: int, fmt: str) -> None:
    """The fleet's GPUs worst first, with why and the RMA rules met; or the history of the GPU with UUID."""
    from reconciler.checks.fleet.rank import standings
    from reconciler.checks.fleet.store import history, load_rules

    try:
        low = time.time() - parse_duration(since) if since else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--since") from None
    conn = _open(config_path, state_dir)
    try:
        rules = load_rules(conn)
        now = time.time()
        try:
            rows = standings(conn, now, rules, node=node, since=low)
        except sqlite3.OperationalError:  # no GPU history yet
            rows = []
        if uuid is not None:
            found = history(conn, uuid, since=low)
            if found is None:
                many = conn.execute("SELECT COUNT(*) FROM gpu WHERE length(?) >= 8 AND uuid LIKE ? || '%'",
                                    (uuid, uuid)).fetchone()[0]
                raise click.ClickException(f"{uuid!r} matches {many} GPUs: give more of the UUID" if many > 1 else
                                           f"no GPU {uuid!r} in the history (a UUID, or 8+ characters of one)")
            hits = next((s.rma for s in rows if s.uuid == found.uuid), [])
            if fmt == "json":
                click.echo(json.dumps({"uuid": found.uuid, "serial": found.serial, "name": found.name,
                                       "node": found.node, "index": found.index,
                                       "places": [p.__dict__ for p in found.places],
                                       "drivers": [{"since": t, "driver": d} for t, d in found.drivers],
                                       "readings": found.readings,
                                       "xids": found.xids, "rma": [h.__dict__ for h in hits]}, indent=1))
            else:
                click.echo("\n".join(history_lines(found, hits)))
            return
        if rma_only:
            rows = [s for s in rows if s.rma]
        if fmt == "json":
            click.echo(json.dumps([s.as_dict() for s in rows], indent=1))
        else:
            click.echo("\n".join(fleet_table(rows, limit)))
    finally:
        conn.close()
