"""Slurm hostlist expressions, backed by python-hostlist (the HPC world's kept library for them)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

import hostlist as _hostlist

# Slurm 22.05+ rejects text after the last bracket group of an item ("a[1-3]b": Invalid hostlist).
_SUFFIX_AFTER_BRACKET = re.compile(r"\][^\[\]]+$")
_GROUP = re.compile(r"\[([^\[\]]*)\]")
_RANGE = re.compile(r"(\d+)-(\d+)")
_MAX_RANGE = 64 * 1024  # Slurm's MAX_RANGE: "Too many hosts in range"


_TRAILING_NUMBER = re.compile(r"^(.*?\D|)\d+$")


class HostlistError(ValueError):
    """A hostlist expression that cannot be parsed."""


def _items(expr: str) -> list[str]:
    """Split an expression at the commas outside brackets (empty items dropped, as Slurm does)."""
    items, depth, start = [], 0, 0
    for index, char in enumerate(expr):
        depth += (char == "[") - (char == "]")
        if char == "," and depth == 0:
            items.append(expr[start:index])
            start = index + 1
    items.append(expr[start:])
    return [item for item in items if item]


def split_top_level(expr: str) -> list[str]:
    """The comma-separated items of an expression (commas inside brackets kept), empty items dropped."""
    return _items(expr)


def _library(expr: str) -> list[str]:
    try:
        return list(_hostlist.expand_hostlist(expr, allow_duplicates=True))
    except _hostlist.BadHostlist as exc:
        raise HostlistError(f"invalid hostlist {expr!r}: {exc}") from None


def _slurm_order(prefix: str, tail: str) -> list[str]:
    """Expand as Slurm's _push_range_list does: last group fastest, then the others from the first on."""
    groups = list(_GROUP.finditer(prefix))
    if not groups:
        return _library(prefix + tail)
    group = groups[-1]
    out: list[str] = []
    for value in _library(group.group(0)):
        out += _slurm_order(prefix[: group.start()] + value + prefix[group.end() :], tail)
    return out


def _expand_item(item: str, expr: str) -> list[str]:
    groups = list(_GROUP.finditer(item))
    if groups and _SUFFIX_AFTER_BRACKET.search(item):
        raise HostlistError(f"invalid hostlist {expr!r}: text after the last bracket group")
    for group in groups:
        for low, high in _RANGE.findall(group.group(1)):
            if int(high) - int(low) + 1 > _MAX_RANGE:
                raise HostlistError(f"invalid hostlist {expr!r}: more than {_MAX_RANGE} hosts in one range")
    if len(groups) < 3:  # python-hostlist's order equals Slurm's for one or two bracket groups
        return _library(item)
    return _slurm_order(item[: groups[-1].start()], item[groups[-1].start() :])


@lru_cache(maxsize=8192)
def _expand_cached(expr: str) -> tuple[str, ...]:
    if any(char.isspace() for char in expr):
        raise HostlistError(f"invalid hostlist {expr!r}: whitespace inside (separate names with commas)")
    if expr.count("[") != expr.count("]"):
        raise HostlistError(f"invalid hostlist {expr!r}: unbalanced brackets")
    names: list[str] = []
    for item in _items(expr):
        names += _expand_item(item, expr)
    return tuple(names)


def expand(expr: str) -> list[str]:
    """Expand a Slurm hostlist expression into host names, as `scontrol show hostnames` does."""
    expr = expr.strip()
    if not expr:
        return []
    return list(_expand_cached(expr))


@lru_cache(maxsize=1024)
def _expand_set_cached(expr: str) -> frozenset[str]:
    return frozenset(_expand_cached(expr))


def expand_set(expr: str) -> frozenset[str]:
    """The host names of an expression as a set (cached, for fast membership tests)."""
    expr = expr.strip()
    return _expand_set_cached(expr) if expr else frozenset()


def compress(names: Iterable[str]) -> str:
    """Fold host names into one hostlist expression that Slurm expands back to the same set."""
    groups: dict[str, list[str]] = {}
    loose: list[str] = []
    for name in sorted(set(names)):
        match = _TRAILING_NUMBER.match(name)
        if match:
            groups.setdefault(match.group(1), []).append(name)
        else:
            loose.append(name)
    # Fold only the trailing number: Slurm rejects text after a bracket ("rack[1-2]-gpu01").
    parts = [_hostlist.collect_hostlist(members) for _, members in sorted(groups.items())]
    return ",".join(sorted(parts + loose))


def is_valid(expr: str) -> bool:
    """Tell whether a hostlist expression parses."""
    try:
        expand(expr)
    except HostlistError:
        return False
    return True


def clear_cache() -> None:
    """Forget cached expansions (for benchmarks that must start cold)."""
    _expand_cached.cache_clear()
    _expand_set_cached.cache_clear()
