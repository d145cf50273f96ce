"""Where a value of a loaded desired state comes from: its final value, the file:line that set it, what it overrode.

A key is dotted, list items by name or index: `cluster.partitions.gpu.MaxTime` (a field's YAML alias or its
Python name: `max_time`), `nodes.0.name`, `slurm_conf.SchedulerType`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from reconciler.desired.errors import KeyPath, LoadedState, Location
from reconciler.desired.overlay import Removal, key_field
from reconciler.desired.yamlread import Bounds, YamlReadError, read_document


class ExplainError(Exception):
    """The key names nothing in the desired state (the message says what is there instead)."""


@dataclass
class Explained:
    """A key's final value, the layer that set it, and the earlier layers' values it overrode (earliest first)."""

    path: KeyPath
    value: Any
    winner: Location | None
    overridden: list[tuple[Location, Any]] = field(default_factory=list)
    inherited_from: Location | None = None  # not set anywhere: the nearest enclosing key's location (a default)
    removed: list[Removal[Location]] = field(default_factory=list)  # a list's items that a later layer removed
    gone: Removal[Location] | None = None  # the key names an item a later layer removed (value, winner: None)


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True, exclude_unset=True)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _step(current: Any, segment: str, path: KeyPath, locations: dict[KeyPath, Location]) -> tuple[Any, str | int]:
    """The child of CURRENT that SEGMENT names, and the key path part for it (the YAML spelling where set)."""
    if isinstance(current, BaseModel):
        fields = type(current).model_fields
        for name, info in fields.items():
            if segment in (name, info.alias):
                spellings = [s for s in (info.alias, name) if s]
                part = next((s for s in spellings if (*path, s) in locations), spellings[0])
                return getattr(current, name), part
        extra = current.model_extra or {}
        if segment in extra:
            return extra[segment], segment
        known = sorted({info.alias or name for name, info in fields.items()} | set(extra))
        raise ExplainError(f"no key {segment!r} here (keys: {', '.join(known)})")
    if isinstance(current, list):
        if segment.isdigit() and int(segment) < len(current):
            return current[int(segment)], int(segment)
        ident = key_field(path) or "name"
        names = [str(getattr(i, ident, i.get(ident) if isinstance(i, dict) else "?")) for i in current]
        if segment in names:
            return current[names.index(segment)], names.index(segment)
        raise ExplainError(f"no item {segment!r} in this list of {len(current)} ({ident}s: {', '.join(names)})")
    if isinstance(current, dict):
        if segment in current:
            return current[segment], segment
        raise ExplainError(f"no key {segment!r} here (keys: {', '.join(sorted(map(str, current)))})")
    raise ExplainError(f"{segment!r}: the value above is a {type(current).__name__}, it has no keys")


def value_at(root: Path, location: Location, last: str | int) -> Any:
    """The value written at LOCATION (a key or list item whose path ends in LAST), read again from its file."""
    try:
        doc, where = read_document((root / location.file).read_text(encoding="utf-8"), Bounds(5_000, 64))
    except (OSError, UnicodeDecodeError, YamlReadError):
        return None
    for path, (line, column) in where.items():
        same = path and (path[-1] == last or isinstance(path[-1], int) and isinstance(last, int))
        if (line, column) == (location.line, location.column) and same:
            value = doc
            for part in path:
                value = value[part]
            return value
    return None


def explain(loaded: LoadedState, key: str) -> Explained:
    """Explain KEY of LOADED; ExplainError when it names nothing."""
    current: Any = loaded.state
    path: KeyPath = ()
    for segment in [s for s in key.split(".") if s]:
        try:
            current, part = _step(current, segment, path, loaded.locations)
        except ExplainError as exc:
            gone = next((r for r in loaded.removed.get(path, []) if str(r.key) == segment), None)
            if isinstance(current, list) and gone is not None:
                return Explained((*path, segment), None, None, gone=gone)
            shown = ".".join(str(p) for p in path) or "(top level)"
            raise ExplainError(f"{key}: at {shown}: {exc}") from None
        path = (*path, part)
    if not path:
        raise ExplainError("give a key, e.g. cluster.partitions.gpu.MaxTime")
    layers = loaded.trace.get(path) or ([loaded.locations[path]] if path in loaded.locations else [])
    removed = loaded.removed.get(path, [])
    if not layers:
        return Explained(path, _plain(current), None, inherited_from=loaded.where(path), removed=removed)
    overridden = [(loc, value_at(loaded.root, loc, path[-1])) for loc in layers[:-1]]
    return Explained(path, _plain(current), layers[-1], overridden, removed=removed)
