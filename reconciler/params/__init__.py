"""Every slurm.conf, gres.conf and cgroup.conf parameter of the supported Slurm releases, by name.

The tables in `data/` are generated from Slurm's man pages and parser sources (see `generate.py`); they say which
version families have a key, its value type, and what a change needs (reconfigure or which restarts).
Keys match case-insensitively, as Slurm's parser does.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

FILES = ("slurm.conf", "gres.conf", "cgroup.conf")
KINDS = ("reconfigure", "restart_slurmctld", "restart_slurmd", "restart_all")
_INT_LIMITS = {"S_P_UINT16": 0xFFFF, "S_P_UINT32": 0xFFFFFFFF, "S_P_UINT64": 0xFFFFFFFFFFFFFFFF}
_TRUE = ("yes", "up", "true", "1")
_FALSE = ("no", "down", "false", "0")


class UnknownParameter(ValueError):
    """A key that no supported Slurm release has in this file and scope."""


class ParameterNotInVersion(ValueError):
    """A key that exists, but not in the cluster's Slurm version family."""


@dataclass(frozen=True)
class Param:
    """One parameter of one file and scope (global, node, partition, ... for slurm.conf)."""

    name: str  # canonical spelling (the man page's)
    file: str
    scope: str
    type: str  # int | float | bool | string
    families: tuple[str, ...]  # version families whose daemons accept it
    deprecated: bool  # undocumented alias/leftover, or ignored/refused by some release
    c_type: str = "S_P_STRING"  # the parser's S_P_* type (int width)
    documented: tuple[str, ...] = ()  # families whose man page documents it


@cache
def _table(file: str) -> dict[str, Any]:
    if file not in FILES:
        raise ValueError(f"no parameter table for {file!r} (known: {', '.join(FILES)})")
    text = resources.files("reconciler.params.data").joinpath(f"{file}.json").read_text(encoding="utf-8")
    doc: dict[str, Any] = json.loads(text)
    return doc


@cache
def _index(file: str) -> dict[str, dict[str, dict[str, Any]]]:
    """scope -> lower-case name -> entry."""
    return {scope: {name.lower(): entry for name, entry in params.items()}
            for scope, params in _table(file)["parameters"].items()}


def families(file: str = "slurm.conf") -> tuple[str, ...]:
    """The version families the tables cover, oldest first."""
    return tuple(_table(file)["families"])


def source_tags(file: str = "slurm.conf") -> dict[str, str]:
    """Family -> the Slurm release tag its table was read from."""
    return dict(_table(file)["families"])


def scopes(file: str = "slurm.conf") -> tuple[str, ...]:
    """The scopes of a file: slurm.conf global/node/partition/...; gres.conf global/line; cgroup.conf global."""
    return tuple(sorted(_index(file)))


def _entry(file: str, key: str, scope: str) -> dict[str, Any] | None:
    index = _index(file)
    if scope not in index:
        raise ValueError(f"{file} has no scope {scope!r} (known: {', '.join(sorted(index))})")
    return index[scope].get(key.lower())


def _param(file: str, entry: dict[str, Any], family: str | None = None) -> Param:
    types = entry.get("types", {})
    kind = types.get(family, entry["type"]) if family else entry["type"]
    return Param(name=entry["name"], file=file, scope=entry["scope"], type=kind,
                 families=tuple(entry["families"]), deprecated=entry["deprecated"], c_type=entry["c_type"],
                 documented=tuple(entry["documented"]))


def lookup(file: str, key: str, scope: str = "global") -> Param | None:
    """The parameter of this name (any case) in this file and scope, in any family; None if unknown."""
    entry = _entry(file, key, scope)
    return _param(file, entry) if entry else None


def suggestions(file: str, key: str, scope: str = "global") -> list[str]:
    """Known names close to a misspelt key, best first: those about as close as the closest (at most three)."""
    names = {name.lower(): entry["name"] for name, entry in _index(file)[scope].items() if entry["families"]}
    scored = sorted(((difflib.SequenceMatcher(None, key.lower(), name).ratio(), name) for name in names),
                    key=lambda pair: (-pair[0], pair[1]))
    best = scored[0][0] if scored else 0.0
    return [names[name] for ratio, name in scored[:3] if ratio >= max(0.75, best - 0.05)]


def _order(family: str) -> tuple[int, ...]:
    return tuple(int(part) for part in family.split("."))


def resolve(file: str, key: str, family: str | None, scope: str = "global") -> Param:
    """The parameter, checked to exist in the family (no version check for None or a family outside the tables).

    Raises UnknownParameter (with a did-you-mean) or ParameterNotInVersion (naming the first or last release).
    """
    entry = _entry(file, key, scope)
    where = f"{file} parameter" if scope == "global" else f"{file} {scope} parameter"
    if entry is None:
        near = suggestions(file, key, scope)
        hint = f" (did you mean {' or '.join(near)}?)" if near else ""
        raise UnknownParameter(f"unknown {where} {key!r}{hint}")
    known = families(file)
    if family is None or family not in known:
        return _param(file, entry)
    have = entry["families"]
    if family not in have:
        name = entry["name"]
        if not have:
            why = "refused or ignored by every supported release; remove it"
        elif _order(family) < _order(have[0]):
            why = f"first in {have[0]}"
        else:
            later = [f for f in known if _order(f) > _order(have[-1])]
            why = f"removed in {later[0]}" if later else f"last in {have[-1]}"
        raise ParameterNotInVersion(f"{name} is not a {where} in Slurm {family} ({why})")
    return _param(file, entry, family)


def change_kind(file: str, key: str, family: str, scope: str = "global") -> str:
    """What a change of this key needs in this family: reconfigure | restart_slurmctld | restart_slurmd |
    restart_all. Raises like resolve() for an unknown key or one the family does not have."""
    entry = _entry(file, resolve(file, key, family, scope).name, scope)
    assert entry is not None
    for change in entry["change"]:
        if family in change["families"]:
            return str(change["kind"])
    if family not in families(file):  # a family outside the tables: the newest one's rule
        return str(entry["change"][-1]["kind"]) if entry["change"] else "restart_all"
    raise AssertionError(f"{file}: {key} has no change kind for {family}")  # generator guarantees one


def change_source(file: str, key: str, family: str, scope: str = "global") -> tuple[str, str]:
    """Where change_kind's answer comes from: (man | curated | man+curated | default, the note)."""
    entry = _entry(file, resolve(file, key, family, scope).name, scope)
    assert entry is not None
    for change in entry["change"]:
        if family in change["families"]:
            return str(change["source"]), str(change["note"])
    return "default", ""


def parameters(file: str = "slurm.conf", scope: str = "global", family: str | None = None) -> list[Param]:
    """All parameters of a file and scope (those of one family when given), sorted by name."""
    entries = _index(file)[scope].values()
    return sorted((_param(file, e, family) for e in entries if family is None or family in e["families"]),
                  key=lambda p: p.name.lower())


_NUMBER = re.compile(r"^[+]?(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)([kK]?)$")


def coerce(param: Param, value: Any) -> Any:
    """Check a YAML scalar against the parameter's type, as Slurm's parser would read it; returns it unchanged.

    int: an integer (UNLIMITED/INFINITE allowed, a K suffix for 32/64-bit keys) within the key's range;
    float: a number (or UNLIMITED/INFINITE); bool: YES/NO/TRUE/FALSE/UP/DOWN/1/0 or a YAML bool;
    string: any scalar. Raises ValueError naming the key.
    """
    if isinstance(value, (dict, list, tuple, set)) or value is None:
        raise ValueError(f"{param.name} takes a single {param.type} value, got {type(value).__name__}")
    text = str(value).strip()
    if param.type == "bool":
        if isinstance(value, bool) or text.lower() in _TRUE + _FALSE:
            return value
        raise ValueError(f"{param.name} is yes/no (also true/false, up/down, 1/0), got {value!r}")
    if param.type in ("int", "float") and text.upper() in ("UNLIMITED", "INFINITE"):
        return value
    if param.type == "int":
        if isinstance(value, bool):
            raise ValueError(f"{param.name} is an integer, got {value!r}")
        if isinstance(value, int):
            number = value
        else:
            match = _NUMBER.match(text)
            allow_k = param.c_type in ("S_P_UINT32", "S_P_UINT64")
            if not match or (match.group(2) and not allow_k):
                raise ValueError(f"{param.name} is an integer (or UNLIMITED), got {value!r}")
            number = int(match.group(1), 0 if not re.match(r"^0[0-7]+$", match.group(1)) else 8)
            number *= 1024 if match.group(2) else 1
        limit = _INT_LIMITS.get(param.c_type)
        if limit is not None and not 0 <= number <= limit:
            raise ValueError(f"{param.name} must be between 0 and {limit}, got {value!r}")
        return value
    if param.type == "float":
        if isinstance(value, bool):
            raise ValueError(f"{param.name} is a number, got {value!r}")
        try:
            float(text)
        except ValueError:
            raise ValueError(f"{param.name} is a number, got {value!r}") from None
        return value
    return value


__all__ = [
    "FILES", "KINDS", "Param", "ParameterNotInVersion", "UnknownParameter", "change_kind", "change_source", "coerce",
    "families", "lookup", "parameters", "resolve", "scopes", "source_tags", "suggestions",
]
