"""The daemon's read-only status page (`/` on metrics_listen): a snapshot of the state database as one HTML page.

Everything shown comes from the cluster or from Git (node names, diffs, drain reasons, errors), so every text
goes through the log redactor (`logs.scrub`) and `html.escape`; the page has no script and loads nothing from
elsewhere (the bus-bandwidth plot is an inline SVG drawn here).
"""

from __future__ import annotations

import html
import math
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from reconciler.daemon import fleet_view, promotion_view, upgrade_view
from reconciler.daemon import operator as operator_view
from reconciler.daemon.logs import scrub
from reconciler.daemon.metrics import GpuFault, gpu_faults
from reconciler.daemon.store import DRAINED_KEY, JOURNAL_KEY, DriftRecord, RunRecord, Store
from reconciler.ha.role import HA_KEY
from reconciler.rollout.journal import glance
from reconciler.rollout.rollback_text import FIRST_COMMIT, restore_headline, rollback_lines

MAX_RUNS = 20
MAX_ROLLOUTS = 3  # rollouts shown with their timelines
MAX_DRIFT = 300  # drift rows shown (the rest counted)
OPEN_DIFFS = 10  # up to this many drifted resources, their diffs are shown unfolded
MAX_POINTS = 100  # busbw results per node in the plot
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")
OURS = "reconciler:"


@dataclass(frozen=True)
class DrainedNode:
    """A node Slurm reports draining or drained, with its reason."""

    node: str
    state: str
    reason: str | None

    @property
    def ours(self) -> bool:
        """True when the reconciler set the drain (its reasons start with `reconciler:`)."""
        return (self.reason or "").startswith(OURS)


@dataclass(frozen=True)
class FailingCheck:
    """The latest result of a health check on a node, when it failed."""

    check: str
    node: str
    message: str
    started: datetime


@dataclass(frozen=True)
class BusbwPoint:
    """One NCCL check result: when, bus bandwidth in GB/s, whether it passed."""

    when: datetime
    gbps: float
    ok: bool


@dataclass
class Snapshot:
    """Everything the page shows, read at one moment."""

    generated: float
    mode: str | None = None
    source: str | None = None
    applied_commit: str | None = None
    applied_at: float | None = None
    head: dict[str, Any] = field(default_factory=dict)
    source_error: dict[str, Any] | None = None
    runs: list[RunRecord] = field(default_factory=list)
    drift: list[DriftRecord] = field(default_factory=list)
    failing: list[FailingCheck] = field(default_factory=list)
    gpu_faults: list[GpuFault] = field(default_factory=list)  # in the latest node check results
    drained: list[DrainedNode] = field(default_factory=list)
    drained_at: float | None = None
    drained_view: dict[str, Any] = field(default_factory=dict)  # the record itself (DRAINED_KEY)
    busbw: dict[str, dict[str, list[BusbwPoint]]] = field(default_factory=dict)  # check -> node -> points
    rollout_in_flight: dict[str, Any] | None = None  # the journal of the rollout under way
    rollouts: list[dict[str, Any]] = field(default_factory=list)  # recent rollout records, newest first
    rolled_back: dict[str, Any] = field(default_factory=dict)  # commit -> why, never applied again
    ha: dict[str, Any] | None = None  # this daemon's role in a pair (reconciler/ha/role.py snapshot)
    daemon: str | None = None  # this daemon's name in a pair: the runs table then shows both daemons' runs
    peer_runs: list[tuple[str, RunRecord]] = field(default_factory=list)
    peer_errors: dict[str, str] = field(default_factory=dict)  # peer -> why its runs are missing
    promotion: dict[str, Any] | None = None  # cluster, promotion decision, lags (promotion_view.load)
    operator: dict[str, Any] | None = None  # the operator's pause, requests, acts (operator_view.shown)
    fleet: Any = None  # every GPU's standing and history (fleet_view.load)


def load_snapshot(db: Path, mode: str | None = None, source: str | None = None) -> Snapshot:
    """Read a snapshot from the state database through a read-only connection."""
    from reconciler.checks import store as check_store

    snap = Snapshot(generated=time.time(), mode=mode, source=source)
    if not db.exists():
        return snap
    store = Store.open_read_only(db)
    try:
        snap.applied_commit, snap.applied_at = store.get("applied_commit"), store.get("applied_at")
        snap.head, snap.source_error = store.get("head_status") or {}, store.get("source_error")
        snap.runs, snap.drift = store.runs(MAX_RUNS), store.current_drift()
        snap.rollout_in_flight = store.get(JOURNAL_KEY)
        snap.rollouts, snap.rolled_back = store.rollouts(MAX_ROLLOUTS), store.rolled_back()
        snap.ha = store.get(HA_KEY)
        snap.promotion = promotion_view.load(store)
        snap.operator = operator_view.shown(store.get(operator_view.KEY))
        drained = store.get(DRAINED_KEY) or {}
        snap.drained_view = drained
        snap.drained_at = drained.get("at")
        snap.drained = [DrainedNode(d["node"], d["state"], d.get("reason")) for d in drained.get("nodes", [])]
        if store.conn.execute("SELECT 1 FROM sqlite_master WHERE name='check_results'").fetchone():
            latest = check_store.latest(store.conn)
            snap.failing = [FailingCheck(r.check, r.node, r.message, r.started) for r in latest if not r.ok]
            snap.gpu_faults = gpu_faults(latest)
            for (check, node), points in check_store.busbw_series(store.conn, MAX_POINTS).items():
                snap.busbw.setdefault(check, {})[node] = [BusbwPoint(w, v, ok) for w, v, ok in points]
        snap.fleet = fleet_view.load(store.conn, snap.generated)
    finally:
        store.close()
    return snap


# ---------------------------------------------------------------- rendering (pure)


def _t(value: object) -> str:
    """Text from the cluster or Git, made safe: secrets scrubbed, HTML escaped."""
    return html.escape(scrub(str(value)), quote=True)


def _when(ts: float | None, now: float) -> str:
    if not ts:
        return "-"
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))
    ago = now - ts
    return f"{stamp} ({_ago(ago)} ago)" if ago >= 0 else stamp


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h" if seconds < 172800 else f"{seconds / 86400:.0f} d"


def _commit(sha: str | None) -> str:
    return f'<code title="{_t(sha)}">{_t(sha[:12])}</code>' if sha else "-"


def _table(headers: list[str], rows: list[list[str]], cls: str) -> str:
    head = "".join(f"<th>{h}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _diff(text: str) -> str:
    """A unified diff with added and removed lines marked (each line escaped)."""
    out = []
    for line in scrub(text).splitlines():
        kind = "add" if line.startswith("+") and not line.startswith("+++") else \
            "del" if line.startswith("-") and not line.startswith("---") else "ctx"
        out.append(f'<span class="{kind}">{html.escape(line)}</span>')
    return "\n".join(out)


def _source_section(s: Snapshot) -> str:
    head = s.head or {}
    lines = [f"<dt>applied commit</dt><dd>{_commit(s.applied_commit)} at {_when(s.applied_at, s.generated)}</dd>"]
    if head:
        status = str(head.get("status", "?"))
        lines.append(f'<dt>newest commit</dt><dd>{_commit(head.get("commit"))} '
                     f'<span class="badge {_t(status)}">{_t(status)}</span></dd>')
        errors = "".join(f"<li><code>{_t(e)}</code></li>" for e in head.get("errors", []))
        if errors:
            lines.append(f'<dt>errors</dt><dd><ul class="errors">{errors}</ul></dd>')
    if s.source_error:
        lines.append(f'<dt>source</dt><dd class="bad">unreachable since {_when(s.source_error.get("at"), s.generated)}'
                     f': {_t(s.source_error.get("error", ""))}</dd>')
    if s.mode:
        mode = s.mode if not s.ha or s.ha.get("role") == "leader" else f"{s.mode} (standby: report only)"
        lines.append(f"<dt>mode</dt><dd>{_t(mode)}</dd>")
    if s.ha:
        lines.append(f'<dt>role</dt><dd id="role">{_t(role_line(s.ha))}</dd>')
    if s.source:
        lines.append(f"<dt>following</dt><dd><code>{_t(s.source)}</code></dd>")
    return '<section id="source"><h2>Source</h2><dl>' + "".join(lines) + "</dl></section>"


def _runs_section(s: Snapshot) -> str:
    from reconciler.daemon.peers import merge

    rows = []
    runs = merge(s.daemon, s.runs, s.peer_runs, MAX_RUNS) if s.daemon else [("", r) for r in s.runs]
    for daemon, r in runs:
        secs = f"{r.ended - r.started:.1f}" if r.ended else "-"
        error = _t(r.error.splitlines()[0][:300]) if r.error else ""
        row = [_when(r.started, s.generated), secs, _t(r.trigger), _t(r.mode), _commit(r.commit),
               f'<span class="badge {_t(r.outcome)}">{_t(r.outcome)}</span>', f"{r.applied}/{r.changes}", error]
        rows.append([_t(daemon), *row] if s.daemon else row)
    head = ["started", "seconds", "trigger", "mode", "commit", "outcome", "applied/changes", "error"]
    table = _table(["daemon", *head] if s.daemon else head, rows, "runs") if rows else "<p>No run yet.</p>"
    missing = "".join(f'<p class="bad">runs of {_t(peer)} missing: {_t(why)}</p>'
                      for peer, why in sorted(s.peer_errors.items()))
    return f'<section id="runs"><h2>Last runs</h2>{table}{missing}</section>'


def role_line(ha: dict[str, Any]) -> str:
    """One line on a daemon's role in a pair (status page and `reconciler status`)."""
    where = f"lease on {ha.get('lease_node') or 'the controller'}"
    if ha.get("role") == "leader":
        return f"leader: {ha.get('name')} (epoch {ha.get('epoch')}, {where}, {ha.get('expires_in')}s left)"
    leader = ha.get("leader")
    line = f"standby: {ha.get('name')}; leader " + (f"{leader} (epoch {ha.get('lease_epoch')}"
                                                     + (f", {ha['leader_address']}" if ha.get("leader_address") else "")
                                                     + ")" if leader else "none")
    if ha.get("error"):
        line += f"; lease node unreachable: {ha['error']}"
    if ha.get("stepped_down"):
        line += f"; stepped down: {ha['stepped_down']}"
    return line


def _drift_section(s: Snapshot) -> str:
    if not s.drift:
        return '<section id="drift"><h2>Drift</h2><p class="ok">In sync: nothing differs from the desired state.</p>' \
               "</section>"
    nodes: dict[str, dict[str, list[DriftRecord]]] = {}
    for d in s.drift[:MAX_DRIFT]:
        nodes.setdefault(d.node, {}).setdefault(d.driver, []).append(d)
    parts = [f"<p>{len(s.drift)} resource(s) on {len({d.node for d in s.drift})} node(s) differ.</p>"]
    opened = " open" if len(s.drift) <= OPEN_DIFFS else ""
    for node, drivers in nodes.items():
        parts.append(f'<div class="node" data-node="{_t(node)}"><h3>{_t(node)}</h3>')
        for driver, items in drivers.items():
            parts.append(f'<h4>{_t(driver)}</h4><ul class="changes">')
            for d in items:
                kind = "pending commit" if d.pending_commit else "drift"
                head = (f'<span class="badge {_t(d.action)}">{_t(d.action)}</span> {_t(d.summary)} '
                        f'<span class="muted">({kind}, since {_when(d.since, s.generated)})</span>')
                if d.diff:
                    parts.append(f'<li><details{opened}><summary>{head}</summary><pre class="diff">{_diff(d.diff)}'
                                 "</pre></details></li>")
                else:
                    parts.append(f"<li>{head}</li>")
            parts.append("</ul>")
        parts.append("</div>")
    if len(s.drift) > MAX_DRIFT:
        parts.append(f"<p>... and {len(s.drift) - MAX_DRIFT} more (reconciler status --format json).</p>")
    return '<section id="drift"><h2>Drift</h2>' + "".join(parts) + "</section>"


def _gate_cell(gate: dict[str, Any]) -> str:
    """One gate's verdict, seconds and message."""
    verdict = "skipped" if gate.get("skipped") else ("ok" if gate.get("ok") else "failed")
    cls = {"ok": "applied", "failed": "failed"}.get(verdict, "muted")
    return (f'<span class="badge {cls}">{_t(gate.get("gate"))} {verdict}</span> '
            f'{float(gate.get("seconds") or 0):.1f}s <span class="muted">{_t(gate.get("message") or "")}</span>')


def _timeline_rows(record: dict[str, Any]) -> list[list[str]]:
    """Per wave: its nodes, the apply, each gate, the soak."""
    rows = []
    for entry in record.get("timeline") or []:
        started = float(entry.get("started") or 0)
        applied = float(entry.get("applied_at") or started) - started
        gates = [_gate_cell(g) for g in entry.get("gates") or []]
        if entry.get("soak"):
            gates.append(_gate_cell(entry["soak"]))
        rows.append([f"{_t(entry.get('wave'))} {_t(entry.get('name'))}", f"<code>{_t(entry.get('nodes'))}</code>",
                     f"{applied:.1f}s ({_t(entry.get('changes', 0))} change(s))",
                     "<br>".join(gates) or '<span class="muted">no gates</span>',
                     '<span class="ok">passed</span>' if entry.get("ok") else '<span class="bad">FAILED</span>'])
    return rows


UPGRADE_BADGE = {"done": "applied", "failed": "failed", "rolled-back": "failed", "rolling-back": "failed",
                 "rollback-failed": "failed", "upgrade-required": "muted"}


def _upgrade_table(upgrade: dict[str, Any] | None, in_flight: bool, now: float) -> str:
    """The per-node states of a reboot-aware upgrade, folded by state: nodes (jobs, reasons) and for how long."""
    if upgrade is None:
        return ""
    rows = []
    for group in upgrade_view.groups(upgrade_view.node_states(upgrade)):
        cls = UPGRADE_BADGE.get(group.state, "drift")
        nodes = "<br>".join(f"<code>{_t(n)}</code>" + (f" {_t(detail)}" if detail else "") for n, detail in group.parts)
        rows.append([f'<span class="badge {cls}">{_t(group.state)}</span>', str(group.count), nodes,
                     _t(upgrade_view.for_how_long(group, now))])
    head = _t(upgrade_view.headline(upgrade, in_flight))
    found = upgrade_view.waiting(upgrade, in_flight)
    note = (f'<p class="waiting">Not started: {_t(upgrade_view.waiting_text(found, now))}</p>'
            if found is not None else "")
    return (f'<div class="upgrade"><h4>Upgrade, node by node ({head})</h4>' + note
            + _table(["state", "nodes", "which", "in it"], rows, "upgrade") + "</div>")


def _rollout_section(s: Snapshot) -> str:
    """The rollout under way (wave n of m), the last rollouts with their timelines, the commits rolled back."""
    parts = []
    flight = glance(s.rollout_in_flight)
    if flight:
        index, sets = flight.wave, flight.nodesets
        nodes = (sets[index] or "") if index < len(sets) else ""
        parts.append(f'<p><span class="badge drift">in flight</span> {_commit(flight.commit)} wave '
                     f'{index + 1} of {len(sets)} (<code>{_t(nodes)}</code>): {_t(flight.phase)}</p>')
        parts.append(_upgrade_table(upgrade_view.in_flight_upgrade(s.rollout_in_flight), True, s.generated))
    said = operator_view.status_lines(s.operator)
    if said:  # the operator's pause, requests and acts (`reconciler upgrade ...`)
        parts.append(f'<pre class="operator">{_t(chr(10).join(line.strip() for line in said))}</pre>')
    for number, record in enumerate(s.rollouts):
        status = str(record.get("status"))
        cls = {"complete": "applied", "rolled-back": "failed", "rollback-failed": "failed"}.get(status, "partial")
        parts.append(f'<h3>{_commit(record.get("commit"))} <span class="badge {cls}">{_t(status)}</span> '
                     f'<span class="muted">{_when(record.get("started"), s.generated)}</span></h3>'
                     f'<p>{_t(record.get("reason") or "")}</p>')
        rollback = record.get("rollback") or {}
        if rollback.get("before_image"):  # a first commit: the before-images, no commit to name
            lines = [restore_headline(rollback)] + rollback_lines(rollback, why=FIRST_COMMIT)
            parts.append(f'<pre class="restore">{_t(chr(10).join(lines))}</pre>')
        elif rollback.get("nodes") and not rollback.get("ok", True):  # what failed, never "rolled back"
            parts.append(f'<pre class="restore">{_t(chr(10).join(rollback_lines(rollback)))}</pre>')
        elif rollback.get("nodes"):
            parts.append(f'<p>Rolled back <code>{_t(rollback["nodes"])}</code> to {_commit(rollback.get("to"))}'
                         f'; resumed: {_t(", ".join(rollback.get("resumed") or []) or "none")}</p>')
        rows = _timeline_rows(record)
        if rows:
            parts.append(_table(["wave", "nodes", "apply", "gates and soak", "result"], rows, "timeline"))
        if number == 0 and not flight:  # the last upgrade, as it stands now
            found = upgrade_view.current(None, record, s.drained_view)
            parts.append(_upgrade_table(found[0] if found else None, False, s.generated))
    if s.rolled_back:
        rows = [[_commit(commit), _t(why.get("gate")), f"<code>{_t(why.get('nodes'))}</code>",
                 _t(why.get("message")) + (f'<br><span class="bad">rollback FAILED: {_t("; ".join(why["errors"]))}'
                                           "</span>" if why.get("status") == "rollback-failed" and why.get("errors")
                                           else ""),
                 f"<code>reconciler rollout retry {_t(commit[:12])}</code>"]
                for commit, why in sorted(s.rolled_back.items(), key=lambda kv: -float(kv[1].get("at") or 0))]
        parts.append("<h3>Rolled back (not applied again)</h3>"
                     + _table(["commit", "gate", "nodes", "why", "to try it again"], rows, "rolled-back"))
    body = "".join(parts) or "<p>No rollout recorded yet.</p>"
    return f'<section id="rollout"><h2>Rollouts</h2>{body}</section>'


def _checks_section(s: Snapshot) -> str:
    rows = [[_t(f.check), _t(f.node), _t(f.message), _when(f.started.timestamp(), s.generated)] for f in s.failing]
    body = _table(["check", "node", "message", "at"], rows, "failing") if rows else \
        '<p class="ok">No failing health check.</p>'
    return f'<section id="checks"><h2>Failing checks</h2>{body}</section>'


def _gpu_faults_section(s: Snapshot) -> str:
    """The GPU faults of the latest node check results; nothing at all when there are none."""
    if not s.gpu_faults:
        return ""
    rows = [[_t(f.node), _t(f.gpu) if f.gpu else '<span class="muted">all</span>', _t(f.kind), _t(f.message),
             _t(f.check), _when(f.started.timestamp(), s.generated)] for f in s.gpu_faults]
    table = _table(["node", "GPU", "kind", "message", "check", "checked"], rows, "gpu-faults")
    return f'<section id="gpu-faults"><h2>GPU faults</h2>{table}</section>'


def _drained_section(s: Snapshot) -> str:
    rows = [[_t(d.node), _t(d.state), _t(d.reason or ""), "reconciler" if d.ours else "someone else"]
            for d in s.drained]
    body = _table(["node", "state", "reason", "drained by"], rows, "drained") if rows else \
        "<p>No drained node.</p>"
    seen = f' <span class="muted">(Slurm, {_when(s.drained_at, s.generated)})</span>' if s.drained_at else ""
    return f'<section id="drained"><h2>Drained nodes{seen}</h2>{body}</section>'


def busbw_svg(check: str, series: dict[str, list[BusbwPoint]], width: int = 760, height: int = 260) -> str:
    """An inline SVG line plot of bus bandwidth over time, one line per node; failed runs ringed in red."""
    left, right, top, bottom = 56, 120, 14, 34
    plot_w, plot_h = width - left - right, height - top - bottom
    points = [p for pts in series.values() for p in pts]
    t0 = min(p.when.timestamp() for p in points)
    t1 = max(p.when.timestamp() for p in points)
    step = _tick_step(max(p.gbps for p in points) * 1.05 / 4)
    ymax = step * 4

    def x(p: BusbwPoint) -> float:
        return left + (plot_w / 2 if t1 == t0 else (p.when.timestamp() - t0) / (t1 - t0) * plot_w)

    def y(value: float) -> float:
        return top + plot_h - value / ymax * plot_h

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="busbw" data-check="{_t(check)}" width="{width}" '
           f'height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="NCCL bus bandwidth of '
           f'{_t(check)}">']
    for i in range(5):
        value = step * i
        out.append(f'<line class="grid" x1="{left}" y1="{y(value):.1f}" x2="{left + plot_w}" y2="{y(value):.1f}"/>'
                   f'<text class="tick" x="{left - 6}" y="{y(value) + 4:.1f}" text-anchor="end">{value:g}</text>')
    out.append(f'<text class="tick" x="{left - 44}" y="{top + plot_h / 2:.0f}" transform="rotate(-90 {left - 44} '
               f'{top + plot_h / 2:.0f})" text-anchor="middle">GB/s</text>')
    for stamp, anchor, xpos in ((t0, "start", left), (t1, "end", left + plot_w)):
        label = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(stamp))
        out.append(f'<text class="tick" x="{xpos}" y="{height - 12}" text-anchor="{anchor}">{label} UTC</text>')
    for index, (node, pts) in enumerate(series.items()):
        color = PALETTE[index % len(PALETTE)]
        coords = " ".join(f"{x(p):.1f},{y(p.gbps):.1f}" for p in pts)
        out.append(f'<g class="series" data-node="{_t(node)}"><polyline points="{coords}" fill="none" '
                   f'stroke="{color}" stroke-width="2"/>')
        for p in pts:
            ring = "" if p.ok else ' stroke="#d62728" stroke-width="2.5" class="failed"'
            tip = f"{node} {p.gbps:.1f} GB/s {p.when:%Y-%m-%d %H:%M:%S} {'pass' if p.ok else 'FAIL'}"
            out.append(f'<circle cx="{x(p):.1f}" cy="{y(p.gbps):.1f}" r="3.5" fill="{color}"{ring}>'
                       f"<title>{_t(tip)}</title></circle>")
        ly = top + 14 + index * 18
        out.append(f'<rect x="{left + plot_w + 12}" y="{ly - 9}" width="12" height="12" fill="{color}"/>'
                   f'<text class="legend" x="{left + plot_w + 30}" y="{ly + 1}">{_t(node)}</text></g>')
    out.append("</svg>")
    return "".join(out)


def _tick_step(raw: float) -> float:
    """A round step (1, 2, 2.5 or 5 times a power of ten) at least RAW, for the y axis's ticks."""
    if raw <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)


def _busbw_section(s: Snapshot) -> str:
    if not s.busbw:
        return '<section id="busbw"><h2>NCCL bus bandwidth</h2><p>No NCCL check result yet.</p></section>'
    plots = []
    for check, series in s.busbw.items():
        latest = ", ".join(f"{_t(node)} {pts[-1].gbps:.1f}" for node, pts in series.items())
        plots.append(f"<h3>{_t(check)}</h3><p class=\"muted\">latest GB/s: {latest}</p>{busbw_svg(check, series)}")
    return '<section id="busbw"><h2>NCCL bus bandwidth</h2>' + "".join(plots) + "</section>"


STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.2em 2em;color:#222;max-width:1200px}
h1{font-size:1.4em;margin:0 0 .2em}
h2{font-size:1.15em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.4em}
h3{font-size:1em;margin:.8em 0 .2em}h4{font-size:.95em;margin:.4em 0 .1em;color:#555}
table{border-collapse:collapse}th,td{text-align:left;padding:.2em .7em .2em 0;border-bottom:1px solid #eee;
vertical-align:top}th{color:#555;font-weight:600}code{font-size:.95em}
dl{display:grid;grid-template-columns:max-content auto;gap:.2em 1em}dt{color:#555}dd{margin:0}
.badge{display:inline-block;padding:0 .45em;border-radius:3px;background:#eee;font-size:.9em}
.applied,.in-sync,.valid,.create{background:#d9f2d9}.drift,.partial,.update,.unverified{background:#fff0c2}
.failed,.error,.invalid,.delete{background:#f9d0d0}.ok{color:#267326}.bad{color:#b00}.muted{color:#777}
pre.diff{background:#f7f7f7;padding:.5em;overflow-x:auto;margin:.3em 0}.add{color:#1a7f37}.del{color:#cf222e}
.ctx{color:#444}ul.changes{margin:.1em 0;padding-left:1.2em}ul.errors{margin:0;padding-left:1.2em}
svg.busbw .grid{stroke:#e5e5e5}svg.busbw text{font-size:11px;fill:#555}
"""


def render(snapshot: Snapshot) -> str:
    """The whole page."""
    generated = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(snapshot.generated))
    body = "".join([_source_section(snapshot), promotion_view.section(snapshot.promotion),
                    _rollout_section(snapshot), _runs_section(snapshot), _drift_section(snapshot),
                    _checks_section(snapshot), _gpu_faults_section(snapshot), fleet_view.section(snapshot.fleet),
                    _drained_section(snapshot), _busbw_section(snapshot)])
    return ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            '<meta http-equiv="refresh" content="30"><title>reconciler status</title>'
            f"<style>{STYLE}</style></head><body><header><h1>reconciler status</h1>"
            f'<p class="muted">read-only; generated {generated}; refreshes every 30 s; '
            '<a href="/metrics">/metrics</a></p></header>'
            f"<main>{body}</main></body></html>\n")
