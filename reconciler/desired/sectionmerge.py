"""Sections that may be split over several files: `accounting:` (its qos, accounts and users lists).

A large site's users do not fit one file (the loader's size limit), and a team may keep its own: every file may
hold an `accounting:` mapping; its lists are concatenated in file order, its other keys (`prune`,
`force_remove`) may be set in one file only, and a name (of a QOS, an account or a user) declared twice, in one
file or in two, is refused at the second place with the first named.
"""

from __future__ import annotations

from typing import Any, TypeVar

KeyPath = tuple[str | int, ...]
Where = TypeVar("Where")  # the loader's Location: kept generic so that this module does not import the loader
Problem = tuple[Where | None, KeyPath, str]

SPLIT_SECTIONS: dict[str, tuple[str, ...]] = {"accounting": ("qos", "accounts", "users")}
WHAT = {"qos": "QOS", "accounts": "account", "users": "user"}


def merge_split(key: str, value: Any, merged: dict[str, Any], file_locs: dict[KeyPath, Where],
                locations: dict[KeyPath, Where]) -> list[Problem[Where]] | None:
    """Merge one file's VALUE of split section KEY into MERGED (and its locations); None: not mergeable here.

    None when KEY is not a split section, or either side is not a mapping: the loader's plain rule applies then
    (a key defined in one file only), so that a wrong shape is reported as it always was.
    """
    lists = SPLIT_SECTIONS.get(key)
    if lists is None or not isinstance(value, dict) or not isinstance(merged.get(key, {}), dict):
        return None
    problems: list[Problem[Where]] = []
    if key not in merged:
        merged[key] = {}
        locations[(key,)] = file_locs[(key,)]
    section: dict[str, Any] = merged[key]
    for sub, item in value.items():
        prefix = (key, sub)
        if sub in lists and isinstance(item, list) and isinstance(section.get(sub, []), list):
            target = section.setdefault(sub, [])
            offset = len(target)
            target.extend(item)
            locations.setdefault(prefix, file_locs[prefix])
            for path, loc in file_locs.items():
                if path[:2] == prefix and len(path) > 2 and isinstance(path[2], int):
                    locations[(*prefix, path[2] + offset, *path[3:])] = loc
            continue
        if sub in section:
            problems.append((file_locs.get(prefix), prefix, f"defined twice (first at {locations.get(prefix)}): "
                             f"{key}.{sub} may be set in one file only"))
            continue
        section[sub] = item
        locations.update({p: loc for p, loc in file_locs.items() if p[:2] == prefix})
    return problems


def duplicate_names(merged: dict[str, Any], locations: dict[KeyPath, Where]) -> list[Problem[Where]]:
    """Each name declared twice in a split section's lists, at its second place, with the first one named."""
    problems: list[Problem[Where]] = []
    for key, lists in SPLIT_SECTIONS.items():
        section = merged.get(key)
        if not isinstance(section, dict):
            continue
        for sub in lists:
            items = section.get(sub)
            if not isinstance(items, list):
                continue
            first: dict[str, int] = {}
            for index, item in enumerate(items):
                name = item.get("name") if isinstance(item, dict) else None
                if not isinstance(name, str):
                    continue  # a missing or wrong name is the schema's error
                if name not in first:
                    first[name] = index
                    continue
                here, there = (key, sub, index, "name"), (key, sub, first[name], "name")
                problems.append((locations.get(here), here, f"{WHAT[sub]} {name!r} is defined twice (first at "
                                 f"{locations.get(there)})"))
    return problems
