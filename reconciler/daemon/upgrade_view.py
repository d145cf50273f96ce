"""The per-node states of a reboot-aware upgrade, as `reconciler status`, the status page and the metric show them.

The upgrade machine (reconciler/rollout/upgrade.py) journals its part of the rollout journal before each step
(reconciler/rollout/journal.py: UpgradeRecord, `{"nodes": {NODE: {"state", "since", "reason", "boot_id", "jobs"}},
"max_unavailable": N, "failed": [...]}` as stored); the journal in flight is read through journal.glance, the last
rollout's record (RolloutResult.as_dict) keeps the same part. This module only reads them; it never writes.

An ended upgrade is shown as it stands now, not as it ended (`present`): a node it left drained for a human (failed,
rollback-failed, or failed and rolled back) whose upgrade drain Slurm no longer shows, in a view of Slurm asked for
after the node got there (the daemon's drained-nodes record), is `released`: a human took it over (resumed it, or
drained it with a reason of their own). The journal and the rollout history keep what happened.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reconciler.common import hostlist
from reconciler.drivers.node_state import UPGRADE_PREFIX
from reconciler.rollout.journal import STATES, glance

# STATES: the machine's states in the order a node goes through them (status lists states in this order).
# where the node's reason says why (upgrade-required: why it was skipped, e.g. an admin's drain)
REASON_STATES = frozenset({"upgrade-required", "failed", "rolling-back", "rolled-back", "rollback-failed",
                           "skipped"})  # skipped: by whom and why (the operator's `reconciler upgrade skip`)
JOB_STATES = frozenset({"draining", "waiting-for-jobs"})  # where the node's running jobs are worth a word
RELEASED = "released"  # not a machine state: an ended upgrade's node that a human has taken over since
VIEW_STATES = (*STATES, RELEASED)
HELD = frozenset({"failed", "rollback-failed"})  # final states in which the upgrade leaves the node drained


@dataclass(frozen=True)
class NodeUpgrade:
    """One node's upgrade state as journalled."""

    node: str
    state: str
    since: float | None
    reason: str | None
    boot_id: str | None
    jobs: int
    reserved_from: str | None = None  # reservation mode: when the node's maintenance reservation starts
    requeued: tuple[str, ...] = ()

    @property
    def detail(self) -> str | None:
        """What is said beside the node: its running jobs while it drains (and when its reservation starts), why
        it failed or was rolled back."""
        if self.state in JOB_STATES and (self.jobs > 0 or self.reserved_from):  # -1: could not be counted
            said = [f"{self.jobs} job" + ("s" if self.jobs != 1 else "")] if self.jobs > 0 else []
            return "; ".join(said + ([f"reserved from {self.reserved_from}"] if self.reserved_from else []))
        if (self.state in REASON_STATES or self.state == RELEASED) and self.reason:
            return self.reason
        return None


@dataclass(frozen=True)
class StateGroup:
    """The nodes in one state: node sets by detail (jobs, reason), the oldest and newest `since`."""

    state: str
    count: int
    parts: tuple[tuple[str, str | None], ...]  # (hostlist, detail)
    oldest: float | None
    newest: float | None

    @property
    def nodes(self) -> str:
        """Every node of the group as one hostlist."""
        return ",".join(nodes for nodes, _ in self.parts)


def upgrade_of(record: dict[str, Any] | None) -> dict[str, Any] | None:
    """An ended rollout's record's upgrade part, if it has one with nodes."""
    upgrade = record.get("upgrade") if isinstance(record, dict) else None
    return _with_nodes(upgrade)


def in_flight_upgrade(journal: Any) -> dict[str, Any] | None:
    """The upgrade part of the rollout journal in flight (as stored), if it has one with nodes."""
    seen = glance(journal)
    return _with_nodes(seen.upgrade) if seen is not None else None


def _with_nodes(upgrade: Any) -> dict[str, Any] | None:
    return upgrade if isinstance(upgrade, dict) and isinstance(upgrade.get("nodes"), dict) else None


def current(in_flight: dict[str, Any] | None, last: dict[str, Any] | None,
            drained: dict[str, Any] | None = None) -> tuple[dict[str, Any], bool] | None:
    """The upgrade to show: the one in flight, else the last rollout's as it stands now (`present`, by DRAINED);
    with in-flight or not."""
    if in_flight is not None:
        upgrade = in_flight_upgrade(in_flight)
        return (upgrade, True) if upgrade is not None else None
    upgrade = upgrade_of(last) or from_timeline(last)
    return (present(upgrade, drained), False) if upgrade is not None else None


def failed_last(last: dict[str, Any] | None) -> dict[str, str]:
    """The nodes that ended `failed` in the LAST rollout's record, with why."""
    upgrade = upgrade_of(last) or from_timeline(last)
    nodes = (upgrade or {}).get("nodes") or {}
    return {str(n): str((e or {}).get("reason") or "failed") for n, e in nodes.items()
            if isinstance(e, dict) and e.get("state") == "failed"}


def from_timeline(record: dict[str, Any] | None) -> dict[str, Any] | None:
    """The final states of an ended rollout's upgrade, from its waves' summaries (`timeline[i]["upgrade"]`:
    done, failed {node: why}, skipped {node: why}, rolled_back), when the record keeps no `upgrade` of its own.

    Those summaries have no times: the nodes come without `since` (the upgrade's `ended` is the last wave's end). A
    skipped node never started: upgrade-required. `failed` names every node that failed, rolled back since or not.
    """
    nodes: dict[str, dict[str, Any]] = {}
    failed: set[str] = set()
    ended: float | None = None
    for entry in (record or {}).get("timeline") or []:
        summary = entry.get("upgrade") if isinstance(entry, dict) else None
        if not isinstance(summary, dict):
            continue
        ended = _number(entry.get("ended")) or ended
        failed |= {str(n) for n in summary.get("failed") or []}
        for node in summary.get("done") or []:
            nodes[str(node)] = {"state": "done"}
        for key, state in (("skipped", "upgrade-required"), ("failed", "failed")):
            found = summary.get(key) or {}
            for node, why in (found.items() if isinstance(found, dict) else ((n, None) for n in found)):
                nodes[str(node)] = {"state": state, "reason": why}
        for node in summary.get("rolled_back") or []:
            nodes[str(node)] = {"state": "rolled-back", "reason": (nodes.get(str(node)) or {}).get("reason")}
        for node, why in dict(summary.get("rollback_errors") or {}).items():
            nodes[str(node)] = {"state": "rollback-failed", "reason": why}
    return {"nodes": nodes, "failed": sorted(failed & set(nodes)), "ended": ended} if nodes else None


def present(upgrade: dict[str, Any], drained: dict[str, Any] | None) -> dict[str, Any]:
    """An ENDED upgrade as it stands now, by DRAINED (the daemon's record of Slurm's drained nodes): a node the
    upgrade left drained whose drain is no longer the upgrade's, in a view asked for after the node reached its
    final state (`since`), is `released`, its reason saying what it was and what Slurm shows now. Without such a
    view (none yet, or older than the node's state) the journalled state stands."""
    asked = _number((drained or {}).get("asked"))
    if asked is None:
        return upgrade
    now = {str(d.get("node")): d for d in (drained or {}).get("nodes") or [] if isinstance(d, dict)}
    failed = set(upgrade.get("failed") or [])
    nodes = dict(upgrade.get("nodes") or {})
    for node, entry in nodes.items():
        entry = entry if isinstance(entry, dict) else {}
        state, since = entry.get("state"), _number(entry.get("since")) or _number(upgrade.get("ended"))
        held = state in HELD or (state == "rolled-back" and node in failed)
        if not held or since is None or asked <= since:
            continue
        seen = now.get(node)
        reason = str((seen or {}).get("reason") or "")
        if seen is not None and reason.startswith(UPGRADE_PREFIX):
            continue  # still the upgrade's drain: what the journal says is what is
        was = f"was {state}" + (f": {entry.get('reason')}" if entry.get("reason") else "")
        is_now = (f"now {str(seen.get('state') or 'drained').lower()}" + (f" ({reason})" if reason else "")
                  if seen is not None else "no longer drained")
        nodes[node] = {**entry, "state": RELEASED, "reason": f"{is_now}; {was}", "since": asked}
    return {**upgrade, "nodes": nodes, "failed": [n for n in upgrade.get("failed") or []
                                                 if (nodes.get(n) or {}).get("state") != RELEASED]}


def node_states(upgrade: dict[str, Any]) -> list[NodeUpgrade]:
    """Every node of UPGRADE, by name; a field the record lacks or garbles reads as absent, never raises."""
    out = []
    for node, entry in sorted((upgrade.get("nodes") or {}).items()):
        entry = entry if isinstance(entry, dict) else {}
        out.append(NodeUpgrade(str(node), str(entry.get("state") or "unknown"), _number(entry.get("since")),
                               _text(entry.get("reason")), _text(entry.get("boot_id")),
                               int(_number(entry.get("jobs")) or 0),
                               _text(entry.get("reservation_start")) if entry.get("reservation") else None,
                               tuple(str(j) for j in entry.get("requeued") or [] if isinstance(j, (str, int)))))
    return out


def _number(value: Any) -> float | None:
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def state_order(state: str) -> tuple[int, str]:
    """Known states in the machine's order, unknown ones after them by name."""
    return (VIEW_STATES.index(state), "") if state in VIEW_STATES else (len(VIEW_STATES), state)


def groups(nodes: Iterable[NodeUpgrade]) -> list[StateGroup]:
    """The nodes folded by state (then by detail, as hostlists), states in the machine's order."""
    by_state: dict[str, list[NodeUpgrade]] = {}
    for n in nodes:
        by_state.setdefault(n.state, []).append(n)
    out = []
    for state in sorted(by_state, key=state_order):
        members = by_state[state]
        by_detail: dict[str | None, list[str]] = {}
        for n in members:
            by_detail.setdefault(n.detail, []).append(n.node)
        parts = sorted(((hostlist.compress(names), detail) for detail, names in by_detail.items()),
                       key=lambda p: p[0])
        sinces = [n.since for n in members if n.since is not None]
        out.append(StateGroup(state, len(members), tuple(parts), min(sinces, default=None),
                              max(sinces, default=None)))
    return out


def duration(seconds: float) -> str:
    """A short duration: 45s, 12 min, 3.0 h."""
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f}s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def for_how_long(group: StateGroup, now: float) -> str:
    """How long the group's nodes have been in their state: one figure, or the shortest to the longest."""
    if group.oldest is None or group.newest is None:
        return ""
    longest, shortest = duration(now - group.oldest), duration(now - group.newest)
    return f"for {longest}" if longest == shortest else f"for {shortest} to {longest}"


def part_text(nodes: str, detail: str | None) -> str:
    """A node set with its detail: `gpu05 (1 job)`."""
    return f"{nodes} ({detail})" if detail else nodes


def headline(upgrade: dict[str, Any], in_flight: bool, commit: str | None = None) -> str:
    """One line: how many nodes, how many done and failed, the limit on nodes out at a time."""
    nodes = node_states(upgrade)
    shown = ("failed", "rolled-back", "rollback-failed", RELEASED)
    tally = {s: sum(1 for n in nodes if n.state == s) for s in ("done", *shown)}
    words = [f"{len(nodes)} node(s)", f"{tally['done']} done"]
    words += [f"{tally[s]} {s}" for s in shown if tally[s]]
    limit = upgrade.get("max_unavailable")
    where = ("in flight" if in_flight else "ended") + (f" ({commit[:12]})" if commit else "")
    return f"{where}: " + ", ".join(words) + (f"; at most {limit} out at a time" if limit is not None else "")


def waiting(upgrade: dict[str, Any], in_flight: bool) -> dict[str, Any] | None:
    """What the nodes not started wait for, as journalled (upgrade.waiting: a closed window, capacity, a pause),
    while the upgrade is in flight; None otherwise or when it is garbled."""
    found = upgrade.get("waiting") if in_flight else None
    if not isinstance(found, dict) or not isinstance(found.get("why"), str):
        return None
    nodes = [str(n) for n in found.get("nodes") or [] if isinstance(n, str)]
    return {"kind": "hold" if found.get("kind") == "hold" else "wait", "why": found["why"],
            "until": _number(found.get("until")), "nodes": hostlist.compress(nodes) if nodes else ""}


def waiting_text(found: dict[str, Any], now: float) -> str:
    """One line: `gpu[05-16] held: <why> (until 2026-11-28 22:00 UTC, in 1h 20m)`."""
    until = found.get("until")
    when = ""
    if until is not None:
        stamp = time.strftime("%Y-%m-%d %H:%M %Z", time.localtime(until))
        when = f" (until {stamp}, in {duration(max(0.0, until - now))})"
    verb = "held" if found["kind"] == "hold" else "waiting"
    return f"{found['nodes'] or 'nodes'} {verb}: {found['why']}{when}"


def lines(upgrade: dict[str, Any], in_flight: bool, now: float | None = None,
          commit: str | None = None) -> list[str]:
    """The upgrade part of `reconciler status`: a headline, what the rest waits for, then one line per state with
    its nodes and time."""
    now = time.time() if now is None else now
    out = [f"upgrade:        {headline(upgrade, in_flight, commit)}"]
    found = waiting(upgrade, in_flight)
    if found is not None:
        out.append(f"  not started: {waiting_text(found, now)}")
    for group in groups(node_states(upgrade)):
        text = ", ".join(part_text(nodes, detail) for nodes, detail in group.parts)
        took = for_how_long(group, now)
        out.append(f"  {group.state}: {text}" + (f"  ({took})" if took else ""))
    return out


def as_json(upgrade: dict[str, Any], in_flight: bool, now: float | None = None) -> dict[str, Any]:
    """The upgrade for `status --format json`: the states folded, and every node with its seconds in its state."""
    now = time.time() if now is None else now
    nodes = node_states(upgrade)
    return {
        "in_flight": in_flight,
        "waiting": waiting(upgrade, in_flight),
        "max_unavailable": upgrade.get("max_unavailable"),
        "failed": list(upgrade.get("failed") or []),
        "states": [{"state": g.state, "count": g.count, "nodes": g.nodes,
                    "parts": [{"nodes": nodes, "detail": detail} for nodes, detail in g.parts],
                    "longest_s": None if g.oldest is None else round(now - g.oldest, 1),
                    "shortest_s": None if g.newest is None else round(now - g.newest, 1)} for g in groups(nodes)],
        "nodes": {n.node: {"state": n.state, "since": n.since,
                           "seconds": None if n.since is None else round(now - n.since, 1),
                           "reason": n.reason, "jobs": n.jobs, "boot_id": n.boot_id,
                           "reserved_from": n.reserved_from, "requeued": list(n.requeued)} for n in nodes},
    }


def status_json(in_flight: dict[str, Any] | None, last: dict[str, Any] | None, now: float | None = None,
                drained: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """`status`'s "upgrade" key: the upgrade in flight or the last one as it stands now, with its commit; None
    without one."""
    found = current(in_flight, last, drained)
    if found is None:
        return None
    upgrade, flying = found
    return {"commit": _commit(in_flight, last, flying), **as_json(upgrade, flying, now)}


def status_lines(in_flight: dict[str, Any] | None, last: dict[str, Any] | None, now: float | None = None,
                 drained: dict[str, Any] | None = None) -> list[str]:
    """`status`'s upgrade lines for the upgrade in flight or the last one as it stands now; none without one."""
    found = current(in_flight, last, drained)
    if found is None:
        return []
    upgrade, flying = found
    return lines(upgrade, flying, now, _commit(in_flight, last, flying) or None)


def _commit(in_flight: Any, last: dict[str, Any] | None, flying: bool) -> str | None:
    """The commit of the upgrade shown: the journal's in flight, else the last rollout's."""
    if flying:
        seen = glance(in_flight)
        return seen.commit if seen is not None else None
    commit = (last or {}).get("commit")
    return None if commit is None else str(commit)


def metric_series(upgrade: dict[str, Any] | None) -> dict[tuple[str, str], int]:
    """(node, state) -> 1 or 0 for reconciler_node_upgrade_state: every known state per node, a state set.

    A node's current state is 1 and every other known state 0 (the convention of Prometheus state sets, as in
    kube-state-metrics), so `== 1` selects the current one and a missing series never means "not in it"; a state
    the machine wrote that this module does not know is exported too (as 1) rather than hidden.
    """
    series: dict[tuple[str, str], int] = {}
    for n in node_states(upgrade) if upgrade is not None else []:
        for state in VIEW_STATES:
            series[(n.node, state)] = 0
        series[(n.node, n.state)] = 1
    return series


def load(db: Path) -> dict[str, Any] | None:
    """The upgrade to export from the state database DB (read-only): in flight, else the last rollout's as it
    stands now."""
    from reconciler.daemon.store import DRAINED_KEY, JOURNAL_KEY, Store

    if not db.exists():
        return None
    store = Store.open_read_only(db)
    try:
        found = current(store.get(JOURNAL_KEY), next(iter(store.rollouts(1)), None), store.get(DRAINED_KEY))
    finally:
        store.close()
    return found[0] if found is not None else None
