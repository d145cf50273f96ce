"""The status page's GPU fleet section: every node's GPUs at a glance (coloured by state), the worst GPUs with a
small history each, XIDs over time by code, and each node's NCCL bandwidth trend. Read from the daemon's store
(checks/fleet) with the rules the daemon judges by; pure HTML and inline SVG, no script."""

from __future__ import annotations

import html
import sqlite3
import time
from dataclasses import dataclass, field
from typing import Any

from reconciler.daemon.logs import scrub

WORST = 10  # GPUs shown with their history
DAYS = 30  # of XIDs by code
POINTS = 48  # readings per worst GPU's sparkline
COLOURS = {"rma": "#d62728", "warn": "#f0a020", "ok": "#2ca02c", "stale": "#bbbbbb"}
XID_COLOURS = ["#1f77b4", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]


@dataclass
class FleetData:
    """What the section draws."""

    standings: list[Any] = field(default_factory=list)
    histories: dict[str, list[tuple[float, float | None, bool]]] = field(default_factory=dict)  # uuid -> points
    xids: dict[int, list[int]] = field(default_factory=dict)  # code -> events per day, oldest first
    first_day: float = 0.0
    bandwidth: dict[str, tuple[list[float], Any]] = field(default_factory=dict)  # node -> values, slide or None
    now: float = 0.0


def load(conn: sqlite3.Connection, now: float | None = None) -> FleetData | None:
    """The fleet data from the store (None before any GPU was ever seen)."""
    from reconciler.checks.fleet.bandwidth import slides
    from reconciler.checks.fleet.rank import standings
    from reconciler.checks.fleet.store import load_rules
    from reconciler.checks.store import busbw_series

    if not conn.execute("SELECT 1 FROM sqlite_master WHERE name='gpu'").fetchone():
        return None
    now = time.time() if now is None else now
    rules = load_rules(conn)
    data = FleetData(standings=standings(conn, now, rules), now=now)
    if not data.standings:
        return None
    for s in data.standings[:WORST]:
        rows = conn.execute("SELECT r.at, r.temperature, r.flags FROM gpu_reading r JOIN gpu g ON g.id = r.gpu "
                            "WHERE g.uuid=? ORDER BY r.at DESC LIMIT ?", (s.uuid, POINTS)).fetchall()
        data.histories[s.uuid] = [(float(a), None if t is None else float(t), bool(f)) for a, t, f in reversed(rows)]
    day0 = (int(now) // 86_400 - DAYS + 1) * 86_400
    data.first_day = float(day0)
    for code, day, count in conn.execute("SELECT code, (at - ?) / 86400, SUM(count) FROM gpu_xid WHERE at >= ? "
                                         "GROUP BY code, (at - ?) / 86400", (day0, day0, day0)):
        data.xids.setdefault(int(code), [0] * DAYS)[min(int(day), DAYS - 1)] += int(count)
    sliding = {s.node: s for s in slides(conn, rules.bandwidth_drop)}
    try:
        series = busbw_series(conn, 50)
    except sqlite3.OperationalError:
        series = {}
    for (_, node), points in sorted(series.items()):
        values = [v for _, v, ok in points if ok]
        if len(values) >= 2 and (node not in data.bandwidth or node in sliding):
            data.bandwidth[node] = (values, sliding.get(node))
    return data


def _t(value: object) -> str:
    return html.escape(scrub(str(value)), quote=True)


def state_of(standing: Any, now: float) -> str:
    """rma, warn, ok, or stale (not seen for a day)."""
    if standing.rma:
        return "rma"
    if now - standing.last_seen > 86_400:
        return "stale"
    return "warn" if standing.score > 0 else "ok"


def _grid(data: FleetData) -> str:
    """Every node a row of squares, one per GPU, coloured by state; a tooltip says which GPU and why."""
    nodes: dict[str, list[Any]] = {}
    for s in data.standings:
        nodes.setdefault(s.node, []).append(s)
    cell, per_row = 12, 8
    width = 8 * (cell + 2) + 90
    cols = max(1, 1000 // width)
    rows = (len(nodes) + cols - 1) // cols
    out = [f'<svg class="fleet-grid" width="{cols * width}" height="{rows * (cell + 6) + 4}" role="img" '
           'aria-label="GPUs by node">']
    for n, (node, gpus) in enumerate(sorted(nodes.items())):
        x0, y0 = (n % cols) * width, (n // cols) * (cell + 6) + 2
        worst = max((s for s in gpus), key=lambda s: s.score)
        out.append(f'<g class="node" data-node="{_t(node)}" data-state="{state_of(worst, data.now)}">'
                   f'<text x="{x0}" y="{y0 + cell - 2}" font-size="10">{_t(node[:12])}</text>')
        for s in sorted(gpus, key=lambda s: s.index)[:per_row * 2]:
            state = state_of(s, data.now)
            why = "; ".join([f"RMA {h.rule}" for h in s.rma] + s.why) or "healthy"
            x = x0 + 80 + (s.index % per_row) * (cell + 2)
            tip = f"{_t(node)} GPU {s.index} {_t(s.uuid)}: {_t(why)}"
            out.append(f'<rect class="gpu {state}" x="{x}" y="{y0}" width="{cell}" height="{cell}" '
                       f'fill="{COLOURS[state]}"><title>{tip}</title></rect>')
        out.append("</g>")
    return "".join(out) + "</svg>"


def _spark(points: list[tuple[float, float | None, bool]], width: int = 160, height: int = 24) -> str:
    """A GPU's temperatures as a line, readings with a flag set as red dots."""
    temps = [t for _, t, _ in points if t is not None]
    if len(points) < 2 or not temps:
        return ""
    low, high = min(temps), max(max(temps), min(temps) + 1)

    def xy(i: int, t: float) -> str:
        across = i * (width - 4) / (len(points) - 1) + 2
        return f"{across:.1f},{height - 2 - (t - low) / (high - low) * (height - 4):.1f}"

    line = " ".join(xy(i, t) for i, (_, t, _) in enumerate(points) if t is not None)
    dots = "".join(f'<circle cx="{xy(i, t if t is not None else low).split(",")[0]}" cy="4" r="2" fill="#d62728"/>'
                   for i, (_, t, flagged) in enumerate(points) if flagged)
    return (f'<svg class="spark" width="{width}" height="{height}"><polyline points="{line}" fill="none" '
            f'stroke="#555" stroke-width="1"/>{dots}</svg>')


def _worst(data: FleetData) -> str:
    rows = []
    for rank, s in enumerate([s for s in data.standings[:WORST] if s.score > 0], 1):
        rma = "<br>".join(f'<span class="bad">RMA {_t(h.rule)}</span> since '
                          f'{_t(time.strftime("%Y-%m-%d %H:%M", time.gmtime(h.since)))}: {_t(h.detail)}'
                          for h in s.rma)
        rows.append(f'<tr class="worst {state_of(s, data.now)}"><td>{rank}</td><td>{_t(s.node)}</td>'
                    f"<td>{s.index}</td><td><code>{_t(s.uuid)}</code><br>{_t(s.serial or '-')}</td>"
                    f"<td>{s.score:.0f}</td><td>{rma}{'<br>' if rma and s.why else ''}{_t(', '.join(s.why))}</td>"
                    f"<td>{_spark(data.histories.get(s.uuid, []))}</td></tr>")
    if not rows:
        return "<p class=\"ok\">every GPU healthy</p>"
    return ('<table class="worst"><tr><th>#</th><th>node</th><th>GPU</th><th>UUID / serial</th><th>score</th>'
            "<th>RMA / why</th><th>temperature (red: a flag set)</th></tr>" + "".join(rows) + "</table>")


def _xid_chart(data: FleetData, width: int = 640, height: int = 120) -> str:
    if not data.xids:
        return '<p class="muted">no XIDs in the last 30 days</p>'
    top = max(sum(day) for day in zip(*data.xids.values(), strict=True)) or 1
    bar = (width - 40) / DAYS
    out = [f'<svg class="xids" width="{width}" height="{height + 30}" role="img" aria-label="XIDs per day by code">']
    stacked = [0.0] * DAYS
    legend = []
    for n, (code, days) in enumerate(sorted(data.xids.items())):
        colour = XID_COLOURS[n % len(XID_COLOURS)]
        legend.append(f'<tspan fill="{colour}">XID {code} ({sum(days)})</tspan> ')
        for d, count in enumerate(days):
            if count:
                h = count / top * height
                out.append(f'<rect class="xid" data-code="{code}" x="{30 + d * bar:.1f}" '
                           f'y="{height - stacked[d] - h:.1f}" width="{bar - 1:.1f}" height="{h:.1f}" '
                           f'fill="{colour}"><title>XID {code}: {count} on day {d + 1}</title></rect>')
                stacked[d] += h
    day0 = time.strftime("%m-%d", time.gmtime(data.first_day))
    out.append(f'<text x="30" y="{height + 14}" font-size="10">{day0}</text>'
               f'<text x="{width - 50}" y="{height + 14}" font-size="10">today</text>'
               f'<text x="30" y="{height + 28}" font-size="11">{"".join(legend)}</text></svg>')
    return "".join(out)


def _bandwidth(data: FleetData) -> str:
    rows = []
    for node, (values, slide) in sorted(data.bandwidth.items(), key=lambda kv: -(kv[1][1].drop if kv[1][1] else 0)):
        points: list[tuple[float, float | None, bool]] = [(float(i), v, False) for i, v in enumerate(values)]
        label = f'<span class="bad">{_t(slide.text())}</span>' if slide else f"{values[-1]:.1f} GB/s"
        rows.append(f'<tr class="bw" data-node="{_t(node)}"><td>{_t(node)}</td><td>{_spark(points)}</td>'
                    f"<td>{label}</td></tr>")
    if not rows:
        return ""
    return ("<h3>NCCL bus bandwidth per node (passing runs)</h3><table class=\"bandwidth\">" + "".join(rows[:40])
            + "</table>")


def section(data: FleetData | None) -> str:
    """The GPU fleet section ('' before any GPU was seen)."""
    if data is None:
        return ""
    rma = sum(1 for s in data.standings if s.rma)
    nodes = len({s.node for s in data.standings})
    summary = (f'<p>{len(data.standings)} GPUs on {nodes} nodes; <span class="{"bad" if rma else "ok"}" '
               f'id="rma-count">{rma} RMA candidate(s)</span>; <code>reconciler gpus</code> has the table.</p>')
    legend = " ".join(f'<span class="badge" style="background:{c}">{k}</span>' for k, c in COLOURS.items())
    return ('<section id="gpu-fleet"><h2>GPU fleet</h2>' + summary + f"<p>{legend}</p>" + _grid(data)
            + "<h3>Worst GPUs</h3>" + _worst(data) + "<h3>XIDs per day, by code</h3>" + _xid_chart(data)
            + _bandwidth(data) + "</section>")
