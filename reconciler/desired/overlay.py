"""Merge the layers of a cluster (its bases, then its own files) by key, and trace every value to its layers.

The rules (docs/clusters.md): a later layer overrides an earlier one by key.
- mapping + mapping: merged key by key, recursively;
- list + list: when both are non-empty and every item of both is a mapping with the list's identifying field
  (`name:`, or the field KEYED_LISTS gives the list's key path, e.g. `path` for `files`), merged by it (a later
  item with an earlier item's key is merged into it, recursively; new keys are appended in order);
  any other list is replaced whole (so `[]` empties a list);
- anything else: the later value replaces the earlier one.
A later list item `{$remove: KEY}` removes the earlier layers' items whose identifying field is KEY; it is never
part of the result, and one that removes nothing is a problem reported at its place.
Locations are generic (the loader's Location) so that this module imports nothing of the loader.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

KeyPath = tuple[str | int, ...]
Where = TypeVar("Where")
Problem = tuple[Where | None, KeyPath, str]

REMOVE = "$remove"
DOCS = "docs/clusters.md"
# Lists without `name:` whose items another field identifies: merged by it, and `$remove: VALUE` matches it.
# A pattern part "*" stands for any list index.
KEYED_LISTS: dict[tuple[str, ...], str] = {
    ("files",): "path",
    ("storage", "mounts"): "mountpoint",
    ("cluster", "node_sets"): "nodes",
}


@dataclass(frozen=True)
class Removal(Generic[Where]):
    """An earlier layer's list item that a later layer's `$remove` took out."""

    field: str  # the identifying field: name, path, ...
    key: Any  # its value, as `$remove:` gave it
    by: Where | None  # the `$remove` item
    was: Where | None  # the removed item, where the last layer that set it had it


@dataclass
class Merged(Generic[Where]):
    """The merged data, the location of the layer that set each key path last, and every layer that set it."""

    data: dict[str, Any] = field(default_factory=dict)
    locations: dict[KeyPath, Where] = field(default_factory=dict)
    trace: dict[KeyPath, list[Where]] = field(default_factory=dict)
    removed: dict[KeyPath, list[Removal[Where]]] = field(default_factory=dict)  # list path -> its removed items
    problems: list[Problem[Where]] = field(default_factory=list)  # refused `$remove`s and ambiguous keyed merges


def key_field(path: KeyPath) -> str | None:
    """The field identifying the items of the unnamed list at PATH (KEYED_LISTS), or None."""
    return KEYED_LISTS.get(tuple("*" if isinstance(p, int) else p for p in path))


def is_removal(item: Any) -> bool:
    """True for a list item that is a `$remove` (whatever else it holds: a wrong one is still one)."""
    return isinstance(item, dict) and REMOVE in item


def identity(path: KeyPath, earlier: Any, later: Any) -> str | None:
    """The field by which the lists EARLIER and LATER (at PATH) merge, or None: LATER replaces EARLIER whole.

    `$remove` items of LATER do not count: a layer may hold nothing but removals."""
    if not (isinstance(earlier, list) and isinstance(later, list) and earlier and later):
        return None
    name = key_field(path) or "name"

    def keyed(items: list[Any]) -> bool:
        return all(isinstance(i, dict) and name in i and _hashable(i[name]) for i in items)

    return name if keyed(earlier) and keyed([i for i in later if not is_removal(i)]) else None


def has_removal(value: Any) -> bool:
    """True when VALUE holds a `$remove` key anywhere (a list item's, or a misplaced one)."""
    if isinstance(value, dict):
        return REMOVE in value or any(has_removal(v) for v in value.values())
    return isinstance(value, list) and any(has_removal(i) for i in value)


def _hashable(value: Any) -> bool:
    return isinstance(value, str | int | float | bool) or value is None


def _shown(path: KeyPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


class _Layer(Generic[Where]):
    """One layer being merged into the result."""

    def __init__(self, out: Merged[Where], locations: dict[KeyPath, Where]) -> None:
        self.out = out
        self.locations = locations

    def _set(self, out_path: KeyPath, layer_path: KeyPath) -> None:
        loc = self.locations.get(layer_path)
        if loc is not None:
            self.out.locations[out_path] = loc
            self.out.trace.setdefault(out_path, []).append(loc)

    def _refuse(self, layer_path: KeyPath, message: str) -> None:
        self.out.problems.append((self.locations.get(layer_path), layer_path, message))

    def _below(self, out_path: KeyPath) -> list[tuple[dict[KeyPath, Any], KeyPath]]:
        n = len(out_path)
        return [(table, path) for table in (self.out.locations, self.out.trace, self.out.removed)
                for path in [p for p in table if len(p) > n and p[:n] == out_path]]

    def _drop_below(self, out_path: KeyPath) -> None:
        """Forget the locations, traces and removals strictly under OUT_PATH (the value there was replaced)."""
        for table, path in self._below(out_path):
            del table[path]

    def _reindex(self, out_path: KeyPath, new_index: dict[int, int]) -> None:
        """Renumber what is recorded under the list at OUT_PATH after removals (an index not in NEW_INDEX: gone)."""
        n = len(out_path)
        moved: list[tuple[dict[KeyPath, Any], KeyPath, Any]] = []
        for table, path in self._below(out_path):
            value = table.pop(path)
            part = path[n]
            new = new_index.get(part) if isinstance(part, int) else None
            if new is not None:
                moved.append((table, (*out_path, new, *path[n + 1:]), value))
        for table, path, value in moved:
            table[path] = value

    def copy(self, value: Any, out_path: KeyPath, layer_path: KeyPath, why: str) -> Any:
        """VALUE (the layer's, new at OUT_PATH) copied with its locations; its `$remove`s refused for WHY."""
        self._set(out_path, layer_path)
        if isinstance(value, dict):
            return {k: self.copy(v, (*out_path, k), (*layer_path, k), why) for k, v in value.items()
                    if not self._misplaced(k, (*layer_path, k))}
        if isinstance(value, list):
            out: list[Any] = []
            for j, item in enumerate(value):
                if is_removal(item):
                    if self._well_formed(item, (*layer_path, j)):
                        self._refuse((*layer_path, j), f"{REMOVE}: {item[REMOVE]}: nothing to remove: {why}")
                    continue
                out.append(self.copy(item, (*out_path, len(out)), (*layer_path, j), why))
            return out
        return value

    def _misplaced(self, key: str, layer_path: KeyPath) -> bool:
        """True (the problem recorded) for a `$remove` key of a mapping that is not a list item."""
        if key != REMOVE:
            return False
        self._refuse(layer_path, f"{REMOVE} removes list items only (`- {REMOVE}: KEY` in a list merged by name or "
                     f"key); a mapping's key cannot be deleted ({DOCS})")
        return True

    def _well_formed(self, item: dict[str, Any], layer_path: KeyPath) -> bool:
        """True for `{$remove: KEY}` alone with a scalar KEY; otherwise the problem is recorded."""
        if len(item) > 1:
            others = ", ".join(str(k) for k in item if k != REMOVE)
            self._refuse(layer_path, f"{REMOVE} stands alone in its list item (here beside {others}): it removes an "
                         "earlier layer's item and sets nothing; write the item to add as its own list item")
            return False
        if not isinstance(item[REMOVE], str | int) or isinstance(item[REMOVE], bool):
            self._refuse(layer_path, f"{REMOVE} takes the name (or key) of one item, a string; got "
                         f"{type(item[REMOVE]).__name__}")
            return False
        return True

    def merge(self, earlier: Any, later: Any, out_path: KeyPath, layer_path: KeyPath) -> Any:
        """The value of EARLIER overridden by LATER (the layer's value at LAYER_PATH), placed at OUT_PATH."""
        if isinstance(earlier, dict) and isinstance(later, dict):
            self._set(out_path, layer_path)
            result = dict(earlier)
            for key, value in later.items():
                if self._misplaced(key, (*layer_path, key)):
                    continue
                if key in earlier:
                    result[key] = self.merge(earlier[key], value, (*out_path, key), (*layer_path, key))
                else:
                    result[key] = self.copy(value, (*out_path, key), (*layer_path, key),
                                            f"no earlier layer sets {_shown((*out_path, key))}")
            return result
        name = identity(out_path, earlier, later)
        if name is not None:
            return self._merge_items(earlier, later, name, out_path, layer_path)
        if isinstance(earlier, dict | list):
            self._drop_below(out_path)
        why = (f"{_shown(out_path)} is replaced whole, not merged by item (its items have no `name:`, and no key "
               f"is set for it: {DOCS})") if isinstance(earlier, list) and earlier \
            else f"no earlier layer has items in {_shown(out_path)}"
        return self.copy(later, out_path, layer_path, why)

    def _remove(self, earlier: list[Any], later: list[Any], name: str, out_path: KeyPath,
                layer_path: KeyPath) -> list[Any]:
        """EARLIER without the items LATER's `$remove`s name (each removal recorded, or refused if it finds none)."""
        gone: set[int] = set()
        for j, item in enumerate(later):
            if not is_removal(item) or not self._well_formed(item, (*layer_path, j)):
                continue
            key = item[REMOVE]
            hits = [i for i, e in enumerate(earlier) if e[name] == key and i not in gone]
            if not hits:
                keys = ", ".join(str(e[name]) for i, e in enumerate(earlier) if i not in gone) or "none left"
                self._refuse((*layer_path, j), f"{REMOVE}: {key}: no item with {name} {key!r} in "
                             f"{_shown(out_path)} of the earlier layers ({name}s: {keys}); a {REMOVE} acts on "
                             "earlier layers only")
                continue
            for i in hits:
                gone.add(i)
                removal = Removal(name, key, self.locations.get((*layer_path, j)),
                                  self.out.locations.get((*out_path, i)))
                self.out.removed.setdefault(out_path, []).append(removal)
        if not gone:
            return list(earlier)
        kept = [i for i in range(len(earlier)) if i not in gone]
        self._reindex(out_path, {old: new for new, old in enumerate(kept)})
        return [earlier[i] for i in kept]

    def _merge_items(self, earlier: list[Any], later: list[Any], name: str, out_path: KeyPath,
                     layer_path: KeyPath) -> list[Any]:
        """EARLIER and LATER merged item by item on the field NAME, after LATER's removals."""
        self._set(out_path, layer_path)
        result = self._remove(earlier, later, name, out_path, layer_path)
        keyed = name != "name"
        index: dict[Any, list[int]] = {}
        for i, item in enumerate(result):
            index.setdefault(item[name], []).append(i)
        merged_into: dict[Any, int] = {}  # keyed lists: earlier item's key -> the later item merged into it
        for j, item in enumerate(later):
            if is_removal(item):
                continue
            key, here = item[name], (*layer_path, j)
            at = index.get(key)
            if not at:
                if not keyed:  # a name repeated in this layer merges into its first item, as it always did
                    index[key] = [len(result)]
                result.append(self.copy(item, (*out_path, len(result)), here,
                                        f"no earlier layer has {_shown((*out_path, len(result)))}"))
            elif keyed and (len(at) > 1 or key in merged_into):
                places = ", ".join(str(self.out.locations.get((*out_path, i))) for i in at)
                self._refuse(here, f"{len(at)} earlier item(s) of {_shown(out_path)} have {name} {key!r} ({places})"
                             + (f" and item {merged_into[key]} of this layer merges into it already"
                                if key in merged_into else "") + f": which one to merge into is ambiguous; "
                             f"`- {REMOVE}: {key}` first removes them, then add the items you want")
            else:
                if keyed:
                    merged_into[key] = j
                result[at[0]] = self.merge(result[at[0]], item, (*out_path, at[0]), here)
        return result


def merge_layers(layers: list[tuple[dict[str, Any], dict[KeyPath, Where]]]) -> Merged[Where]:
    """Merge LAYERS (each its top-level mapping and the locations of its key paths), earliest first."""
    out: Merged[Where] = Merged()
    for data, locations in layers:
        layer = _Layer(out, locations)
        for key, value in data.items():
            if layer._misplaced(key, (key,)):
                continue
            if key in out.data:
                out.data[key] = layer.merge(out.data[key], value, (key,), (key,))
            else:
                out.data[key] = layer.copy(value, (key,), (key,), f"no earlier layer sets {key}")
    return out
