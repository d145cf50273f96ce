"""Slurm hostlist expressions, backed by python-hostlist (the HPC world's kept library for them)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

import hostlist as _hostlist

# Slurm 22.05+ rejects text after the last bracket group of an item ("a[1-3]b": Invalid hostlist).
_SUFFIX_AFTER_BRACKET = re.compile(r"\][^\[\],]+(?:,|$)")


_TRAILING_NUMBER = re.compile(r"^(.*?\D|)\d+$")


class HostlistError(ValueError):
    """A hostlist expression that cannot be parsed."""


@lru_cache(maxsize=8192)
def _expand_cached(expr: str) -> tuple[str, ...]:
    if _SUFFIX_AFTER_BRACKET.search(expr) and not re.search(r"\][^\[\],]*\[", expr):
        raise HostlistError(f"invalid hostlist {expr!r}: text after the last bracket group")
    try:
        return tuple(_hostlist.expand_hostlist(expr, allow_duplicates=True))
    except _hostlist.BadHostlist as exc:
        raise HostlistError(f"invalid hostlist {expr!r}: {exc}") from None


def expand(expr: str) -> list[str]:
    """Expand a Slurm hostlist expression into host names, as `scontrol show hostnames` does."""
    expr = expr.strip()
    if not expr:
        return []
    return list(_expand_cached(expr))


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
