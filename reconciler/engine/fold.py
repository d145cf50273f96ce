"""Fold a plan's changes by node set, as ClusterShell's clubak does: one entry per identical change.

Two changes fold together when their driver, resource, action, summary and diff are the same once what
names the node is set aside: the node's name in the diff's file headers (`gpu01:/etc/fstab (current)`) and
in the summary, our header comment line (it names the commit each node was last written from), and the
line numbers of the hunks (a managed block may sit lower in one node's file). Each folded entry keeps one
representative diff and the nodes as a Slurm hostlist (`gpu[001-512,514-1024]`) and as a list.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from reconciler.engine.nodesets import (
    NODE_TOKEN,
    SET_CAP,
    SHORT_CAP,
    cap_nodeset,
    fold_mentions,
    fold_names,
    fold_reasons_by_node,
    mask_node,
    node_key,
    nodes_phrase,
)
from reconciler.engine.plan import Change

HEADER_MARK = ": managed by reconciler from "  # drivers.base.HEADER_MARK (drivers import the engine, not back)


@dataclass(frozen=True)
class FoldedChange:
    """One change made identically on a set of nodes: one summary, one representative diff."""

    driver: str
    resource: str
    action: str
    summary: str
    diff: str | None
    nodes: tuple[str, ...]
    nodeset: str
    phase: int = 0
    drift: bool = False

    @property
    def count(self) -> int:
        """How many nodes the change is made on."""
        return len(self.nodes)

    def to_json(self) -> dict[str, Any]:
        """The entry as JSON data (what `reconciler plan --format json` prints per change)."""
        return {"driver": self.driver, "resource": self.resource, "action": self.action, "summary": self.summary,
                "diff": self.diff, "nodeset": self.nodeset, "count": self.count, "nodes": list(self.nodes),
                "phase": self.phase, "drift": self.drift}


def _diff_body(diff: str) -> str:
    """The diff without its two file-header lines (they name the node)."""
    if diff.startswith("--- "):
        first = diff.find("\n")
        if first >= 0 and diff.startswith("+++ ", first + 1):
            second = diff.find("\n", first + 1)
            return diff[second + 1:] if second >= 0 else ""
    return diff


def _normalise_body(body: str) -> str:
    """Hunks without our header comment line and without line numbers; hunks left with no change dropped."""
    if HEADER_MARK not in body and "@@" not in body:
        return body
    hunks: list[list[str]] = []
    for line in body.splitlines():
        if line.startswith("@@"):
            hunks.append(["@@"])
        elif HEADER_MARK in line:
            continue
        elif hunks:
            hunks[-1].append(line)
        else:
            hunks.append([line])
    kept = [h for h in hunks if any(line[:1] in ("+", "-") for line in h[1:]) or h[0] != "@@"]
    return "\n".join("\n".join(h) for h in kept)


def _display_diff(diff: str, node: str) -> str:
    """The representative diff with the node's name dropped from the file headers."""
    body = _diff_body(diff)
    if body is diff:
        return diff
    head = diff[: len(diff) - len(body)]
    return head.replace(f"--- {node}:", "--- ", 1).replace(f"+++ {node}:", "+++ ", 1) + body


def fold_changes(changes: Iterable[Change]) -> list[FoldedChange]:
    """Fold identical changes (node name and header aside) into entries with their node sets.

    Entries come in apply order (phase), grouped by driver and resource in the order the plan first names
    them; within a group the largest node set first, so the common change leads and the exceptions follow.
    """
    groups: dict[tuple[Any, ...], list[Change]] = {}
    order: dict[tuple[str, str], int] = {}
    normalised: dict[str, str] = {}  # most nodes share one diff body: normalise it once
    for change in changes:
        body = None
        if change.diff is not None:
            raw = _diff_body(change.diff)
            body = normalised.get(raw)
            if body is None:
                body = normalised[raw] = _normalise_body(raw)
        key = (change.driver, change.resource, change.action, mask_node(change.summary, change.node), body)
        members = groups.get(key)
        if members is None:
            groups[key] = [change]
            order.setdefault((change.driver, change.resource), len(order))
        else:
            members.append(change)
    entries = []
    for key, members in groups.items():
        members.sort(key=lambda c: node_key(c.node))
        first = members[0]
        nodes = tuple(c.node for c in members)
        several = len(nodes) > 1
        entries.append(FoldedChange(
            driver=first.driver, resource=first.resource, action=first.action,
            summary=key[3] if several else first.summary,
            diff=(_display_diff(first.diff, first.node) if several else first.diff) if first.diff else None,
            nodes=nodes, nodeset=fold_names(nodes) if several else first.node, phase=first.phase,
            drift=all(c.drift for c in members)))
    entries.sort(key=lambda e: (e.phase, order[(e.driver, e.resource)], -e.count, node_key(e.nodes[0])))
    return entries


def by_nodeset(entries: Iterable[FoldedChange]) -> dict[str, list[FoldedChange]]:
    """Entries under their node set, in the order the sets first come (clubak's layout)."""
    grouped: dict[str, list[FoldedChange]] = {}
    for entry in entries:
        grouped.setdefault(entry.nodeset, []).append(entry)
    return grouped


def _label(resource: str, clash: set[str]) -> str:
    base = resource.rsplit("/", 1)[-1] if resource.startswith("/") else resource
    return resource if base in clash else base


def summary_line(entries: Sequence[FoldedChange], cap: int = 1000) -> str:
    """One line: per resource, the nodes it changes on and how many different diffs (or variants)."""
    groups: dict[tuple[str, str], list[FoldedChange]] = {}
    for entry in entries:
        groups.setdefault((entry.driver, entry.resource), []).append(entry)
    bases: dict[str, set[str]] = {}
    for _, resource in groups:
        bases.setdefault(resource.rsplit("/", 1)[-1] if resource.startswith("/") else resource, set()).add(resource)
    clash = {b for b, resources in bases.items() if len(resources) > 1}
    parts = []
    for (_, resource), items in groups.items():
        names = [n for e in items for n in e.nodes]
        expr = items[0].nodeset if len(items) == 1 else fold_names(names)
        where = cap_nodeset(expr, 60)
        diffs = sum(1 for e in items if e.diff)
        kind = (f"{diffs} diff{'s' if diffs != 1 else ''}" if diffs
                else f"{len(items)} variants" if len(items) > 1 else "")
        count = f"{len(names):,} nodes" if len(names) > 1 else ""
        detail = ", ".join(p for p in (count, kind) if p)
        parts.append(f"{_label(resource, clash)} on {where}" + (f" ({detail})" if detail else ""))
    text = ""
    for index, part in enumerate(parts):
        if text and len(text) + len(part) > cap:
            return text + f"; ... and {len(parts) - index} more"
        text += ("; " if text else "") + part
    return text


# Node-set words live in nodesets.py (the follow-ups use them without the plan); they are named here too, for
# readers of a folded plan.
__all__ = ["NODE_TOKEN", "SET_CAP", "SHORT_CAP", "FoldedChange", "by_nodeset", "cap_nodeset", "fold_changes",
           "fold_mentions", "fold_names", "fold_reasons_by_node", "mask_node", "node_key", "nodes_phrase",
           "summary_line"]
