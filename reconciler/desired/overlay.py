"""Merge the layers of a cluster (its bases, then its own files) by key, and trace every value to its layers.

The rules (docs/clusters.md): a later layer overrides an earlier one by key.
- mapping + mapping: merged key by key, recursively;
- list + list: when both are non-empty and every item of both is a mapping with a `name:` key, merged by name
  (a later item with an earlier item's name is merged into it, recursively; new names are appended in order);
  any other list is replaced whole (so `[]` empties a list);
- anything else: the later value replaces the earlier one.
Locations are generic (the loader's Location) so that this module imports nothing of the loader.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

KeyPath = tuple[str | int, ...]
Where = TypeVar("Where")


@dataclass
class Merged(Generic[Where]):
    """The merged data, the location of the layer that set each key path last, and every layer that set it."""

    data: dict[str, Any] = field(default_factory=dict)
    locations: dict[KeyPath, Where] = field(default_factory=dict)
    trace: dict[KeyPath, list[Where]] = field(default_factory=dict)


def by_name(earlier: Any, later: Any) -> bool:
    """True when two lists merge by name: both non-empty, every item a mapping with a `name:` key."""
    def named(items: list[Any]) -> bool:
        return bool(items) and all(isinstance(i, dict) and "name" in i and _hashable(i["name"]) for i in items)

    return isinstance(earlier, list) and isinstance(later, list) and named(earlier) and named(later)


def _hashable(value: Any) -> bool:
    return isinstance(value, str | int | float | bool) or value is None


class _Layer(Generic[Where]):
    """One layer being merged into the result."""

    def __init__(self, out: Merged[Where], locations: dict[KeyPath, Where]) -> None:
        self.out = out
        self.locations = locations
        self.children: dict[KeyPath, list[KeyPath]] = {}  # so that copying a subtree's locations is linear
        for path in locations:
            if path:
                self.children.setdefault(path[:-1], []).append(path)

    def _set(self, out_path: KeyPath, layer_path: KeyPath) -> None:
        loc = self.locations.get(layer_path)
        if loc is not None:
            self.out.locations[out_path] = loc
            self.out.trace.setdefault(out_path, []).append(loc)

    def _drop_below(self, out_path: KeyPath) -> None:
        """Forget the locations and traces strictly under OUT_PATH (the value there was replaced)."""
        n = len(out_path)
        for table in (self.out.locations, self.out.trace):
            for path in [p for p in table if len(p) > n and p[:n] == out_path]:
                del table[path]

    def _add(self, out_path: KeyPath, layer_path: KeyPath) -> None:
        """Record every location under LAYER_PATH (a new or replacing value) at OUT_PATH."""
        n = len(layer_path)
        todo = [layer_path]
        while todo:
            path = todo.pop()
            self._set((*out_path, *path[n:]), path)
            todo.extend(self.children.get(path, ()))

    def merge(self, earlier: Any, later: Any, out_path: KeyPath, layer_path: KeyPath) -> Any:
        """The value of EARLIER overridden by LATER (the layer's value at LAYER_PATH), placed at OUT_PATH."""
        if isinstance(earlier, dict) and isinstance(later, dict):
            self._set(out_path, layer_path)
            result = dict(earlier)
            for key, value in later.items():
                if key in earlier:
                    result[key] = self.merge(earlier[key], value, (*out_path, key), (*layer_path, key))
                else:
                    result[key] = copy.deepcopy(value)
                    self._add((*out_path, key), (*layer_path, key))
            return result
        if by_name(earlier, later):
            self._set(out_path, layer_path)
            result_list = list(earlier)
            index: dict[Any, int] = {}
            for i, item in enumerate(earlier):
                index.setdefault(item["name"], i)
            for j, item in enumerate(later):
                at = index.get(item["name"])
                if at is None:
                    at = index[item["name"]] = len(result_list)
                    result_list.append(copy.deepcopy(item))
                    self._add((*out_path, at), (*layer_path, j))
                else:
                    result_list[at] = self.merge(result_list[at], item, (*out_path, at), (*layer_path, j))
            return result_list
        if isinstance(earlier, dict | list):
            self._drop_below(out_path)
        self._add(out_path, layer_path)
        return copy.deepcopy(later)


def merge_layers(layers: list[tuple[dict[str, Any], dict[KeyPath, Where]]]) -> Merged[Where]:
    """Merge LAYERS (each its top-level mapping and the locations of its key paths), earliest first."""
    out: Merged[Where] = Merged()
    for data, locations in layers:
        layer = _Layer(out, locations)
        for key, value in data.items():
            if key in out.data:
                out.data[key] = layer.merge(out.data[key], value, (key,), (key,))
            else:
                out.data[key] = copy.deepcopy(value)
                layer._add((key,), (key,))
    return out
