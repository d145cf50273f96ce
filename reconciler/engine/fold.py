"""Fold a plan's changes by node set, as ClusterShell's clubak does: one entry per identical change.

Two changes fold together when their driver, resource, action, summary and diff are the same once what
names the node is set aside: the node's name in the diff's file headers (`gpu01:/etc/fstab (current)`) and
in the summary, our header comment line (it names the commit each node was last written from), and the
line numbers of the hunks (a managed block may sit lower in one node's file). Each folded entry keeps one
representative diff and the nodes as a Slurm hostlist (`gpu[001-512,514-1024]`) and as a list.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from reconciler.common import hostlist

if TYPE_CHECKING:
    from reconciler.engine.plan import Change

HEADER_MARK = ": managed by reconciler from "  # drivers.base.HEADER_MARK (drivers import the engine, not back)
NODE_TOKEN = "{node}"
SET_CAP = 400  # characters of a node set in a heading
SHORT_CAP = 120  # characters of a node set inside a sentence
_DIGITS = re.compile(r"^(.*?)(\d+)$")
_WORD = re.compile(r"[\w.-]+")


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


def node_key(name: str) -> tuple[str, int, str]:
    """Natural order of host names (gpu9 before gpu10), the order a folded hostlist expands in."""
    match = _DIGITS.match(name)
    return (match.group(1), int(match.group(2)), name) if match else (name, -1, name)


def cap_nodeset(expr: str, cap: int = SET_CAP) -> str:
    """A hostlist expression cut at a comma to at most CAP characters, with `...` where names were left out."""
    if len(expr) <= cap:
        return expr
    end = cap
    while True:
        cut = expr.rfind(",", 0, end)
        if cut <= 0:
            return expr[: max(1, cap - 3)] + "..."
        head = expr[:cut]
        text = head + (",...]" if head.count("[") > head.count("]") else ",...")
        if len(text) <= cap:
            return text
        end = cut


def fold_names(names: Iterable[str], cap: int | None = None) -> str:
    """Host names as one folded hostlist (Slurm's syntax), optionally capped in length."""
    expr = hostlist.compress(names)
    return cap_nodeset(expr, cap) if cap else expr


def nodes_phrase(names: Sequence[str], cap: int = SHORT_CAP, expr: str | None = None) -> str:
    """`gpu01` or `gpu[01-16] (16 nodes)`: the set, capped, and how many when more than one."""
    text = cap_nodeset(expr if expr is not None else fold_names(names), cap)
    return text if len(names) == 1 else f"{text} ({len(names):,} nodes)"


def mask_node(text: str, node: str) -> str:
    """TEXT with the node's own name (as a whole word) replaced by `{node}`."""
    if node not in text:
        return text
    return re.sub(rf"(?<![\w.-]){re.escape(node)}(?![\w.-])", NODE_TOKEN, text)


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


def fold_mentions(lines: Iterable[str], nodes: Iterable[str], cap: int = SHORT_CAP) -> list[str]:
    """Sentences that differ only by a node's name (`slurmd is not running on gpu07`) folded into one each."""
    known = set(nodes)
    grouped: dict[str, list[str]] = {}
    for line in lines:
        named = [w for w in _WORD.findall(line) if w in known]
        if len(named) == 1:
            grouped.setdefault(mask_node(line, named[0]), []).append(named[0])
        else:
            grouped.setdefault(line, [])
    out = []
    for text, names in grouped.items():
        if not names:
            out.append(text)
            continue
        unique = sorted(set(names), key=node_key)
        out.append(text.replace(NODE_TOKEN, nodes_phrase(unique, cap) if len(unique) > 1 else unique[0]))
    return out


def fold_reasons_by_node(reasons: dict[str, str], cap: int = SHORT_CAP) -> list[tuple[str, str]]:
    """node -> why (unreachable nodes) as (folded node set, why): one row per why, node names aside."""
    grouped: dict[str, list[str]] = {}
    single: dict[str, str] = {}
    for node, why in reasons.items():
        masked = mask_node(why, node)
        grouped.setdefault(masked, []).append(node)
        single[masked] = why
    rows = []
    for masked, names in grouped.items():
        names.sort(key=node_key)
        rows.append((nodes_phrase(names, cap), single[masked] if len(names) == 1 else masked))
    return sorted(rows, key=lambda row: node_key(row[0]))
