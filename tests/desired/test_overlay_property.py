"""Properties of the layer merge (reconciler/desired/overlay.py) over random nested mappings and lists.

- merging one layer gives that layer back (data, locations, one-entry traces);
- for every leaf of a merge of several layers, the trace ends with the winner, lists layers earliest first, and
  the winner is the last layer that set that leaf: the value it wrote is the merged value, and no later layer
  holds a value at that leaf (list items followed by name where the list merged by name);
- with `$remove` items in later layers: no stale place, no `$remove` in the result, removals of earlier layers only.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.desired.overlay import merge_layers

KeyPath = tuple[str | int, ...]
Where = tuple[int, KeyPath]  # (layer index, the path inside that layer): what a Location stands for here

KEYS = st.sampled_from(["a", "b", "c", "name", "d"])
NAMES = st.sampled_from(["x", "y", "z", "w"])
SCALARS = st.one_of(st.integers(-3, 3), st.sampled_from(["s", "t", ""]), st.booleans(), st.none())


def _named_list(children: st.SearchStrategy[Any]) -> st.SearchStrategy[list[dict[str, Any]]]:
    """A list of mappings with unique `name:`s (the shape that merges by name)."""
    def build(names: list[str], bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**body, "name": name} for name, body in zip(names, bodies, strict=False)]
    return st.builds(build, st.lists(NAMES, min_size=1, max_size=3, unique=True),
                     st.lists(st.dictionaries(KEYS.filter(lambda k: k != "name"), children, max_size=2),
                              min_size=3, max_size=3))


VALUES = st.recursive(SCALARS, lambda children: st.one_of(
    st.dictionaries(KEYS, children, max_size=3),
    st.lists(children, max_size=3),
    _named_list(children),
), max_leaves=12)
LAYER = st.dictionaries(KEYS, VALUES, min_size=1, max_size=3)


def _paths(value: Any, prefix: KeyPath = ()) -> list[KeyPath]:
    """Every key path of VALUE (the loader records one location per key and list item)."""
    out: list[KeyPath] = []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
    for key, child in items:
        out.append((*prefix, key))
        out.extend(_paths(child, (*prefix, key)))
    return out


def _locations(index: int, data: dict[str, Any]) -> dict[KeyPath, Where]:
    return {path: (index, path) for path in _paths(data)}


def _get(value: Any, path: KeyPath) -> Any:
    for part in path:
        value = value[part]
    return value


def _leaves(value: Any, prefix: KeyPath = ()) -> list[KeyPath]:
    """Paths of scalars and empty containers."""
    if isinstance(value, dict) and value:
        return [p for k, v in value.items() for p in _leaves(v, (*prefix, k))]
    if isinstance(value, list) and value:
        return [p for i, v in enumerate(value) for p in _leaves(v, (*prefix, i))]
    return [prefix]


def _by_name(merged: Any, path: KeyPath) -> list[tuple[str, Any]]:
    """PATH with each list index written as the item's name where the item is a named mapping."""
    out: list[tuple[str, Any]] = []
    value = merged
    for part in path:
        item = value[part]
        if isinstance(part, int) and isinstance(item, dict) and "name" in item:
            out.append(("name", item["name"]))
        else:
            out.append(("key", part))
        value = item
    return out


def _holds(layer: Any, steps: list[tuple[str, Any]]) -> bool:
    """True when LAYER holds a value at the named path STEPS."""
    value = layer
    for kind, part in steps:
        if kind == "name":
            if not isinstance(value, list):
                return False
            found = [i for i in value if isinstance(i, dict) and i.get("name") == part]
            if not found:
                return False
            value = found[0]
        elif isinstance(part, int):
            if not isinstance(value, list) or part >= len(value):
                return False
            value = value[part]
        else:
            if not isinstance(value, dict) or part not in value:
                return False
            value = value[part]
    return True


@settings(max_examples=200, deadline=None)
@given(LAYER)
def test_merging_one_layer_gives_it_back(layer: dict[str, Any]) -> None:
    locations = _locations(0, layer)
    merged = merge_layers([(layer, locations)])
    assert merged.data == layer
    assert merged.locations == locations
    assert merged.trace == {path: [loc] for path, loc in locations.items()}


@settings(max_examples=250, deadline=None)
@given(st.lists(LAYER, min_size=2, max_size=4))
def test_the_winner_of_every_leaf_is_the_last_layer_that_set_it(layers: list[dict[str, Any]]) -> None:
    merged = merge_layers([(data, _locations(i, data)) for i, data in enumerate(layers)])
    assert set(merged.locations) == set(_paths(merged.data))  # every key path has a place; none is stale
    for path in _leaves(merged.data):
        if not path:
            continue
        trace = merged.trace[path]
        assert trace[-1] == merged.locations[path]
        assert [where[0] for where in trace] == sorted({where[0] for where in trace})  # earliest first, once each
        winner, layer_path = merged.locations[path]
        assert _get(layers[winner], layer_path) == _get(merged.data, path)
        steps = _by_name(merged.data, path)
        later = [i for i in range(winner + 1, len(layers)) if _holds(layers[i], steps)]
        assert not later, f"{path}: layer {later} set it after layer {winner}"


def _with_removals(children: st.SearchStrategy[Any]) -> st.SearchStrategy[list[Any]]:
    """A named list, some of whose items are `$remove`s of a name (that may or may not exist earlier)."""
    return st.builds(lambda items, removals: [*({"$remove": n} for n in removals), *items],
                     _named_list(children), st.lists(NAMES, max_size=2))


REMOVING = st.dictionaries(KEYS, st.recursive(SCALARS, lambda children: st.one_of(
    st.dictionaries(KEYS, children, max_size=3), _named_list(children), _with_removals(children)), max_leaves=10),
    min_size=1, max_size=3)


@settings(max_examples=250, deadline=None)
@given(LAYER, st.lists(REMOVING, min_size=1, max_size=3))
def test_removals_leave_no_stale_place_and_never_reach_the_result(first: dict[str, Any],
                                                                  later: list[dict[str, Any]]) -> None:
    layers = [first, *later]
    merged = merge_layers([(data, _locations(i, data)) for i, data in enumerate(layers)])
    assert set(merged.locations) == set(_paths(merged.data))
    assert set(merged.trace) == set(_paths(merged.data))
    assert "$remove" not in repr(merged.data)
    for where, path, _ in merged.problems:
        assert where == (where[0], path) and path[-1] != "name"  # refused at the `$remove` item's own place
    for removals in merged.removed.values():
        assert all(r.by is not None and r.by[0] > (r.was or (-1,))[0] for r in removals)  # earlier layers only
