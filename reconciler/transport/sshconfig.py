"""paramiko's SSHConfig, same answers, with lookups remembered and Host blocks found by name instead of scanned."""

from __future__ import annotations

import copy
import threading
from typing import Any

import paramiko

_WILDCARDS = frozenset("*?[!")


class CachedSSHConfig(paramiko.SSHConfig):
    """paramiko's SSHConfig with lookups remembered per host and only the blocks that can apply examined.

    paramiko calls getpass.getuser() for every Host block a lookup does not match (in `_does_match`, even when the
    block has no Match criteria), and a connection looks a host up three times (ours, fabric's, the gateway's):
    with one Host block per node that was quadratic, 0.17 s of client CPU at 16 nodes and most of a cold plan
    at 256. Remembered answers alone left each node's first lookup walking every block (twice: paramiko's two
    passes), still O(N) per node: a Host block naming hosts literally is now found by name, and only it and the
    blocks with patterns or `Match` are walked, in file order. The answers are the same; a config with
    `Match exec` is never cached (its answer may change).
    """

    def __init__(self) -> None:
        super().__init__()
        self._cache: dict[str, paramiko.SSHConfigDict] = {}
        self._cache_lock = threading.Lock()
        self._cacheable = True
        # (positions of the blocks every lookup walks, positions of the literal Host blocks by host name)
        self._blocks: tuple[list[int], dict[str, list[int]]] = ([], {})

    def parse(self, file_obj: Any) -> None:
        """Read more ssh_config text; what was cached is forgotten, and cacheable no more with a `Match exec`."""
        super().parse(file_obj)
        with self._cache_lock:
            self._cache.clear()
            self._cacheable = not any(m.get("type") == "exec" for context in self._config
                                      for m in context.get("matches", []))
            self._blocks = _index(self._config)

    def lookup(self, hostname: str) -> paramiko.SSHConfigDict:
        """The options for HOSTNAME (a copy: callers may change it)."""
        with self._cache_lock:
            found = self._cache.get(hostname)
        if found is None:
            found = super().lookup(hostname)
            if self._cacheable:
                with self._cache_lock:
                    self._cache[hostname] = found
        return copy.deepcopy(found)

    def _lookup(self, hostname: str, options: Any = None, canonical: bool = False, final: bool = False) -> Any:
        general, literal = self._blocks
        named = literal.get(hostname)
        view = copy.copy(self)  # paramiko's own pass over a shorter block list; self._config stays whole
        positions = sorted(general + named) if named else general
        view._config = [self._config[at] for at in positions]
        return paramiko.SSHConfig._lookup(view, hostname, options, canonical, final)

    def _pattern_matches(self, patterns: Any, target: str) -> bool:
        if isinstance(patterns, list) and not any(_WILDCARDS.intersection(p) for p in patterns):
            return target in patterns  # literal names (one Host block per node): what fnmatch would say, faster
        return bool(super()._pattern_matches(patterns, target))

    def _tokenize(self, config: Any, target_hostname: str, key: str, value: Any) -> Any:
        if isinstance(value, str) and "%" not in value and "~" not in value:
            return value  # no token to replace (paramiko would look up the user, host name and home first)
        return super()._tokenize(config, target_hostname, key, value)

    def _does_match(self, match_list: list[dict[str, Any]], *args: Any, **kwargs: Any) -> Any:
        if not match_list:  # a Host block: paramiko would return [] too, after a getpass.getuser()
            return []
        return super()._does_match(match_list, *args, **kwargs)


def _index(config: list[dict[str, Any]]) -> tuple[list[int], dict[str, list[int]]]:
    """Split the blocks: Host blocks of literal names (no pattern, no negation) by name; every other one walked."""
    general: list[int] = []
    literal: dict[str, list[int]] = {}
    for at, context in enumerate(config):
        hosts = context.get("host")
        if isinstance(hosts, list) and hosts and not context.get("matches") and \
                not any(_WILDCARDS.intersection(p) for p in hosts):
            for name in dict.fromkeys(hosts):  # a name twice in one block: the block once
                literal.setdefault(name, []).append(at)
        else:
            general.append(at)
    return general, literal
