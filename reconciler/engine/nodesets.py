"""Node sets in words: a Slurm hostlist for a set of nodes, capped for headings and sentences, and sentences that
differ only by a node's name folded into one (`slurmd is not running on gpu[01-07]`)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from reconciler.common import hostlist

NODE_TOKEN = "{node}"
SET_CAP = 400  # characters of a node set in a heading
SHORT_CAP = 120  # characters of a node set inside a sentence
_DIGITS = re.compile(r"^(.*?)(\d+)$")
_WORD = re.compile(r"[\w.-]+")


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
