"""Slurm hostlist expressions, backed by python-hostlist (the HPC world's kept library for them)."""

from __future__ import annotations

import contextlib
import contextvars
import os
import re
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache

import hostlist as _hostlist

# Slurm 22.05+ rejects text after the last bracket group of an item ("a[1-3]b": Invalid hostlist).
_SUFFIX_AFTER_BRACKET = re.compile(r"\][^\[\]]+$")
_GROUP = re.compile(r"\[([^\[\]]*)\]")
_RANGE = re.compile(r"(\d+)-(\d+)")
_MAX_RANGE = 64 * 1024  # Slurm's MAX_RANGE: "Too many hosts in range"


_TRAILING_NUMBER = re.compile(r"^(.*?\D|)\d+$")
_GROUP_TERM = re.compile(r"^(\d+)(?:-(\d+))?$")
MAX_EXPRESSION = 65_536  # names one expression may expand to (a cluster of more nodes is not a Slurm cluster)
MAX_TOTAL = 500_000  # names all distinct expressions of one desired state may expand to, together
_CACHE_NAMES = 2_000_000  # names the expansion cache may hold in all: hostile expressions cannot fill memory


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


def count(expr: str) -> int:
    """How many names an expression expands to, computed from its ranges without expanding (duplicates counted)."""
    _check_syntax(expr.strip())
    total = 0
    for item in _items(expr.strip()):
        names = 1
        for group in _GROUP.findall(item):
            size = 0
            for term in group.split(","):
                match = _GROUP_TERM.match(term)
                if match is None:
                    raise HostlistError(f"invalid hostlist {expr!r}: bad range {term!r} in [{group}]")
                low, high = int(match.group(1)), int(match.group(2) or match.group(1))
                if high < low:
                    raise HostlistError(f"invalid hostlist {expr!r}: range {term!r} runs backwards")
                size += high - low + 1
            names *= size
            if names > MAX_EXPRESSION:  # stop multiplying: the product of many groups is astronomic
                return names
        total += names
        if total > MAX_EXPRESSION:
            return total
    return total


def longest_name(item: str) -> str:
    """One expression item with each bracket group replaced by its widest number (the longest name it holds)."""
    def widest(group: re.Match[str]) -> str:
        return "9" * max((len(bound) for bound in re.split(r"[,-]", group.group(1)) if bound), default=1)

    return _GROUP.sub(widest, item)


@dataclass
class _Budget:
    limit: int
    spent: int = 0
    seen: set[str] = field(default_factory=set)


_BUDGET: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar("hostlist_budget", default=None)


@contextlib.contextmanager
def budget(limit: int | None = None) -> Iterator[None]:
    """Bound the names all distinct expressions expanded inside this block may add up to (one desired state)."""
    if limit is None:
        raw = os.environ.get("RECONCILER_HOSTLIST_MAX_TOTAL", "")
        limit = int(raw) if raw.isdigit() else MAX_TOTAL
    token = _BUDGET.set(_Budget(limit))
    try:
        yield
    finally:
        _BUDGET.reset(token)


_count = lru_cache(maxsize=16384)(count)


def _checked_size(expr: str) -> int:
    """The expression's size; refused, before expanding, over the per-expression bound or the budget."""
    size = _count(expr)
    if size > MAX_EXPRESSION:
        raise HostlistError(f"invalid hostlist {expr[:80]!r}{'...' if len(expr) > 80 else ''}: expands to more "
                            f"than {MAX_EXPRESSION} names (refused before expanding)")
    spending = _BUDGET.get()
    if spending is not None and expr not in spending.seen:
        spending.seen.add(expr)
        spending.spent += size
        if spending.spent > spending.limit:
            raise HostlistError(f"invalid hostlist {expr[:80]!r}: the desired state's hostlists expand to more "
                                f"than {spending.limit} names in all (refused before expanding)")
    return size


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


def _check_syntax(expr: str) -> None:
    if any(char.isspace() for char in expr):
        raise HostlistError(f"invalid hostlist {expr!r}: whitespace inside (separate names with commas)")
    if expr.count("[") != expr.count("]"):
        raise HostlistError(f"invalid hostlist {expr!r}: unbalanced brackets")


def _expand_uncached(expr: str) -> tuple[str, ...]:
    _check_syntax(expr)
    names: list[str] = []
    for item in _items(expr):
        names += _expand_item(item, expr)
    return tuple(names)


class _SizedCache:
    """Expansions kept by the number of names they hold (oldest dropped first), not by the number of entries."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.held = 0
        self.entries: dict[str, tuple[tuple[str, ...], frozenset[str] | None]] = {}
        self.lock = threading.Lock()

    def get(self, expr: str, as_set: bool) -> tuple[str, ...] | frozenset[str]:
        with self.lock:
            return self._get(expr, as_set)

    def _get(self, expr: str, as_set: bool) -> tuple[str, ...] | frozenset[str]:
        entry = self.entries.get(expr)
        if entry is None:
            names = _expand_uncached(expr)
            while self.entries and self.held + len(names) > self.capacity:
                _, (old, _) = self._pop_oldest()
                self.held -= len(old)
            entry = (names, None)
            if len(names) <= self.capacity:
                self.entries[expr] = entry
                self.held += len(names)
        if not as_set:
            return entry[0]
        as_frozen = entry[1]
        if as_frozen is None:
            as_frozen = frozenset(entry[0])
            if expr in self.entries:
                self.entries[expr] = (entry[0], as_frozen)
        return as_frozen

    def _pop_oldest(self) -> tuple[str, tuple[tuple[str, ...], frozenset[str] | None]]:
        key = next(iter(self.entries))
        return key, self.entries.pop(key)

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()
            self.held = 0


_CACHE = _SizedCache(_CACHE_NAMES)


def _expand_cached(expr: str) -> tuple[str, ...]:
    _checked_size(expr)
    names = _CACHE.get(expr, as_set=False)
    assert isinstance(names, tuple)
    return names


def expand(expr: str) -> list[str]:
    """Expand a Slurm hostlist expression into host names, as `scontrol show hostnames` does."""
    expr = expr.strip()
    if not expr:
        return []
    return list(_expand_cached(expr))


def expand_set(expr: str) -> frozenset[str]:
    """The host names of an expression as a set (cached, for fast membership tests)."""
    expr = expr.strip()
    if not expr:
        return frozenset()
    _checked_size(expr)
    names = _CACHE.get(expr, as_set=True)
    assert isinstance(names, frozenset)
    return names


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
    _CACHE.clear()
    _count.cache_clear()
