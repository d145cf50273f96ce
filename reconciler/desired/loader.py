"""Load a desired-state directory of YAML files, with file:line:column for every error."""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from reconciler.common import hostlist
from reconciler.desired.agesecrets import read_munge_age  # never decrypts: ciphertext and its sha256 only
from reconciler.desired.crosscheck import cross_check
from reconciler.desired.errorder import arrange
from reconciler.desired.errors import ConfigError, DesiredStateError, KeyPath, LoadedState, Location
from reconciler.desired.errors import nearest as _nearest
from reconciler.desired.managed import read_sources
from reconciler.desired.overlay import has_removal, merge_layers
from reconciler.desired.sectionmerge import duplicate_names, merge_split
from reconciler.desired.yamlread import OVER_LIMITS, Bounds, YamlReadError, read_document
from reconciler.model import DesiredState
from reconciler.model.state import list_keys

MAX_ERRORS = 200  # errors reported per load; the rest are counted
ModelT = TypeVar("ModelT", bound=BaseModel)
MERGEABLE_LISTS = list_keys()  # every top-level list of the model: any file may add entries


@dataclass(frozen=True)
class LoadLimits:
    """Bounds on what one YAML file may cost to load (issue 13): a file over them is refused with file:line.

    Defaults come from the environment (RECONCILER_YAML_MAX_FILE_BYTES, RECONCILER_YAML_MAX_ALIAS_EXPANSIONS,
    RECONCILER_YAML_MAX_DEPTH), else 512 KB, 5,000 and 64 (a file of 512 KB
    loads well within a second: bench --sections hostile).
    """

    max_file_bytes: int = 512_000
    max_alias_expansions: int = 5_000  # nodes an alias brings in, counted as if every alias were copied out
    max_depth: int = 64  # nested mappings and sequences

    @classmethod
    def from_env(cls) -> LoadLimits:
        """The limits, with any RECONCILER_YAML_MAX_* variable of the environment applied."""
        def env(name: str, default: int) -> int:
            raw = os.environ.get(f"RECONCILER_YAML_MAX_{name}")
            return int(raw) if raw and raw.isdigit() else default

        return cls(env("FILE_BYTES", cls.max_file_bytes), env("ALIAS_EXPANSIONS", cls.max_alias_expansions),
                   env("DEPTH", cls.max_depth))


def _record(locations: dict[KeyPath, tuple[int, int]], rel: str, out: dict[KeyPath, Location]) -> None:
    """Record the location of every key and list item of one file."""
    for path, (line, column) in locations.items():
        out[path] = Location(rel, line, column)


def yaml_files(root: Path) -> list[Path]:
    """List the YAML files of a desired-state directory, in a stable order.

    Hidden paths are skipped, and so are nested desired states: when the root has its own `cluster.yaml`,
    a subdirectory with another `cluster.yaml` (e.g. `desired-state/examples/deepops-perf/`) is a separate
    cluster, validated on its own, not part of this one.
    """
    found = [p for p in root.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file()
             and not any(part.startswith(".") for part in p.relative_to(root).parts)]
    if (root / "cluster.yaml").is_file():
        nested = {p.parent for p in found if p.name == "cluster.yaml" and p.parent != root}
        found = [p for p in found if not any(d == p.parent or d in p.parents for d in nested)]
    return sorted(found)


# A raw NEL is a line break to YAML, folded into a space in a plain or quoted scalar: the value read would not be
# the one written, and no value check could see it. (U+2028/U+2029 reach the value checks unchanged.)
FOLDED_BREAKS = {"\x85": "U+0085 (NEL)"}


def _folded_break_error(text: str, rel: str) -> ConfigError | None:
    """Refuse, at its file:line:col, a raw line break that YAML would silently turn into another character."""
    at = min((i for i in (text.find(ch) for ch in FOLDED_BREAKS) if i >= 0), default=-1)
    if at < 0:
        return None
    line = text.count("\n", 0, at) + 1
    column = at - text.rfind("\n", 0, at)
    return ConfigError(Location(rel, line, column), (), f"invalid YAML: raw {FOLDED_BREAKS[text[at]]} character; "
                       "YAML reads it as a line break, so the value would change: remove it")


def parse_file(path: Path, rel: str, errors: list[ConfigError], limits: LoadLimits | None = None,
                locations: dict[KeyPath, Location] | None = None) -> Any:
    """One file's document (None when it cannot be read: the error is in ERRORS), its locations into LOCATIONS."""
    limits = limits or LoadLimits.from_env()
    try:
        size = path.stat().st_size
        if size > limits.max_file_bytes:
            errors.append(ConfigError(Location(rel, 1, 1), (), f"{OVER_LIMITS}: file of {size} bytes is larger "
                                      f"than {limits.max_file_bytes} bytes, the limit "
                                      "(RECONCILER_YAML_MAX_FILE_BYTES=<bytes> in the environment raises it; or split "
                                      "the file: lists such as nodes, files and accounting.users may be spread over "
                                      "several files)"))
            return None
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        errors.append(ConfigError(Location(rel, 1, 1), (), f"cannot read: {exc}"))
        return None
    folded = _folded_break_error(text, rel)
    if folded is not None:
        errors.append(folded)
        return None
    try:
        doc, where = read_document(text, Bounds(limits.max_alias_expansions, limits.max_depth))
    except YamlReadError as exc:
        errors.append(ConfigError(Location(rel, exc.line, exc.column), exc.path, exc.message))
        return None
    if locations is not None:
        _record(where, rel, locations)
    return doc


def merge_files(root: Path, files: list[Path], errors: list[ConfigError],
           limits: LoadLimits | None = None) -> tuple[dict[str, Any], dict[KeyPath, Location]]:
    """Merge the top-level keys of all files: mappings once, lists concatenated, split sections by their lists."""
    merged: dict[str, Any] = {}
    locations: dict[KeyPath, Location] = {}
    for path in files:
        rel = str(path.relative_to(root))
        file_locs: dict[KeyPath, Location] = {}
        plain = parse_file(path, rel, errors, limits, file_locs)
        if plain is None:
            continue
        if not isinstance(plain, dict):
            errors.append(ConfigError(Location(rel, 1, 1), (), "expected a mapping of top-level keys"))
            continue
        for key, value in plain.items():
            if key in MERGEABLE_LISTS and isinstance(value, list) and isinstance(merged.get(key), list):
                offset = len(merged[key])
                merged[key].extend(value)
                for loc_path, loc in file_locs.items():
                    if loc_path[:1] == (key,) and len(loc_path) > 1 and isinstance(loc_path[1], int):
                        locations[(key, loc_path[1] + offset, *loc_path[2:])] = loc
                continue
            split = merge_split(key, value, merged, file_locs, locations)
            if split is not None:
                errors.extend(ConfigError(loc, path, message) for loc, path, message in split)
                continue
            if key in merged:
                first = locations.get((key,))
                errors.append(ConfigError(file_locs[(key,)], (key,), f"defined twice (first at {first})"))
                continue
            merged[key] = value
            locations.update({p: loc for p, loc in file_locs.items() if p[:1] == (key,)})
    return merged, locations


def key_path(loc: tuple[int | str, ...]) -> KeyPath:
    """A pydantic error's location as a key path: a tagged union's branch (a tag starting with `=`, e.g. the
    upgrade's gates in reconciler/model/upgrade.py) is no key of the file, so it is left out."""
    return tuple(p for p in loc if isinstance(p, int) or (isinstance(p, str) and not p.startswith("=")))


def pydantic_errors(exc: ValidationError, locations: dict[KeyPath, Location]) -> list[ConfigError]:
    """A validation error as ConfigErrors, each at the nearest located key of its path."""
    out = []
    for err in exc.errors():
        path = key_path(err["loc"])
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            near = _near_keys(path)
            message = "unknown key (not allowed here)" + (f" (did you mean {' or '.join(near)}?)" if near else "")
        elif err["type"] == "missing":
            message = "required key is missing"
        elif "input" in err and not isinstance(err["input"], dict | list) and err["type"] != "value_error":
            message += f" (got {err['input']!r})"
        out.append(ConfigError(_nearest(locations, path), path, message))
    return out


def _near_keys(path: KeyPath) -> list[str]:
    """The allowed keys closest to the unknown last key of PATH, from the schema models (for "did you mean")."""
    import difflib
    import types
    import typing

    from pydantic import BaseModel

    from reconciler.model import DesiredState

    def models(annotation: Any) -> list[type[BaseModel]]:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return [annotation]
        origin = typing.get_origin(annotation)
        if origin is None:
            return []
        args = typing.get_args(annotation)
        if origin in (list, typing.Union, types.UnionType, typing.Annotated):
            return [m for arg in (args[:1] if origin is typing.Annotated else args) for m in models(arg)]
        if origin is dict and len(args) == 2:
            return models(args[1])
        return []

    current: list[type[BaseModel]] = [DesiredState]
    for part in path[:-1]:
        if isinstance(part, int):
            continue
        found: list[type[BaseModel]] = []
        for model in current:
            field = model.model_fields.get(str(part))
            if field is not None:
                found += models(field.annotation)
        current = found
        if not current:
            return []
    names = sorted({name for model in current for name in model.model_fields}
                   | {f.alias for model in current for f in model.model_fields.values() if f.alias})
    return difflib.get_close_matches(str(path[-1]), names, n=2, cutoff=0.6) if path else []


class _Pruned:
    """A copy of the merged data with invalid parts removed, so cross-checks still run on the rest."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = copy.deepcopy(data)
        self.index_maps: dict[KeyPath, list[int]] = {}  # list path -> original index of each kept item

    def original(self, path: KeyPath) -> KeyPath:
        """Map a path in the pruned data back to the path in the original data."""
        out: list[str | int] = []
        for part in path:
            if isinstance(part, int) and tuple(out) in self.index_maps:
                part = self.index_maps[tuple(out)][part]
            out.append(part)
        return tuple(out)

    def _delete(self, path: KeyPath) -> bool:
        parent: Any = self.data
        for part in path[:-1]:
            try:
                parent = parent[part]
            except (KeyError, IndexError, TypeError):
                return False
        leaf = path[-1]
        if isinstance(parent, dict) and leaf in parent:
            del parent[leaf]
            return True
        if isinstance(parent, list) and isinstance(leaf, int) and leaf < len(parent):
            del parent[leaf]
            keep = self.index_maps.setdefault(self.original(path[:-1]), list(range(len(parent) + 1)))
            del keep[leaf]
            return True
        return False

    def drop(self, path: KeyPath, missing: bool) -> bool:
        """Drop the invalid key, or the list item holding it when the key is required."""
        if not missing and len(path) > 1 and self._delete(path):
            return True
        items = [i for i, part in enumerate(path) if isinstance(part, int)]
        return bool(items) and self._delete(path[: items[-1] + 1])


def _cross_check_partial(merged: dict[str, Any], exc: ValidationError) -> list[tuple[KeyPath, str]]:
    """Cross-check what remains valid after removing the parts the schema rejected."""
    if all(len(err["loc"]) <= 1 for err in exc.errors()):  # only top-level keys wrong: nothing to prune
        return []
    pruned = _Pruned(merged)
    for _ in range(20):
        progressed = False
        for err in exc.errors():
            path = key_path(err["loc"])
            progressed |= pruned.drop(path, err["type"] == "missing")
        if not progressed:
            return []
        try:
            state = DesiredState.model_validate(pruned.data)
        except ValidationError as again:
            exc = again
            continue
        try:
            return [(pruned.original(path), msg) for path, msg in cross_check(state)]
        except hostlist.HostlistError:  # the budget is spent: the errors already say why
            return []
    return []


def _secrets_outside(state: DesiredState, root: Path) -> list[tuple[KeyPath, str]]:
    """A secret's file must not be in the desired-state repository (links followed): secrets never come from Git."""
    key_file = state.munge.key_file if state.munge else None
    if key_file is None:
        return []
    repo, target = root.resolve(), Path(key_file).resolve()
    if target == repo or repo in target.parents:
        return [(("munge", "key_file"), f"{key_file} is inside the desired-state repository: the munge key must "
                 "not come from Git (keep it on the machine running the reconciler, e.g. /etc/reconciler)")]
    return []


def load_dir(root: str | Path, commit: str | None = None, limits: LoadLimits | None = None) -> LoadedState:
    """Load, merge and validate a desired-state directory; raise DesiredStateError with all errors."""
    root = Path(root)
    if not root.is_dir():
        raise DesiredStateError([ConfigError(None, (), f"{root}: not a directory")])
    files = yaml_files(root)
    errors: list[ConfigError] = []
    if not files:
        errors.append(ConfigError(None, (), f"{root}: no YAML files found"))
    merged, locations = merge_files(root, files, errors, limits)
    if has_removal(merged):  # one layer: each `$remove` is refused at its place, and taken out before the schema
        alone = merge_layers([(merged, locations)])
        merged, locations = alone.data, alone.locations
        errors.extend(ConfigError(loc, path, message) for loc, path, message in alone.problems)
    state = validate_merged(root, merged, locations, errors)
    return LoadedState(state=state, root=root, locations=locations, files=files, commit=commit)


def validate_merged(root: Path, merged: dict[str, Any], locations: dict[KeyPath, Location],
                    errors: list[ConfigError]) -> DesiredState:
    """Validate merged data (ERRORS: those of reading it); raise DesiredStateError with every error, in order."""
    roots = len(errors)  # a file that did not load, a key defined twice: what the other errors may follow from
    errors.extend(ConfigError(loc, path, message) for loc, path, message in duplicate_names(merged, locations))
    state: DesiredState | None = None
    with hostlist.budget():  # all hostlists of this state together are bounded before expanding
        try:
            state = DesiredState.model_validate(merged)
            exc = None
        except ValidationError as invalid:
            exc = invalid
            # with hundreds of schema errors, what remains is not worth cross-checking (and pruning costs)
            partial = _cross_check_partial(merged, invalid) if invalid.error_count() <= MAX_ERRORS else []
    if exc is not None:
        parse_failed = bool(errors)
        errors.extend(ConfigError(_nearest(locations, path), path, msg) for path, msg in partial)
        errors.extend(e for e in pydantic_errors(exc, locations)
                      # a file that failed to parse explains a missing top-level key better
                      if not (parse_failed and len(e.path) == 1 and e.message == "required key is missing"))
    if state is not None:
        errors.extend(ConfigError(_nearest(locations, path), path, msg) for path, msg in cross_check(state))
        errors.extend(ConfigError(_nearest(locations, path), path, msg)
                  for path, msg in _secrets_outside(state, root))
        yaml_file = {int(path[1]): loc.file for path, loc in locations.items()
                     if len(path) == 2 and path[0] == "files" and isinstance(path[1], int)}
        # merged layers: the file naming an item's `source:` may be a later layer than the one adding the item
        yaml_file.update({int(path[1]): loc.file for path, loc in locations.items()
                          if len(path) == 3 and path[0] == "files" and isinstance(path[1], int)
                          and path[2] == "source"})
        errors.extend(ConfigError(_nearest(locations, path), path, msg)
                      for path, msg in read_sources(state, root, yaml_file))
        munge_at = locations.get(("munge", "key_age")) or locations.get(("munge",))  # merged: key_age's own layer
        errors.extend(ConfigError(_nearest(locations, path), path, msg)
                      for path, msg in read_munge_age(state, root, munge_at.file if munge_at else None))
    if errors:
        errors = arrange(errors[:roots], errors[roots:])
        if len(errors) > MAX_ERRORS:
            more = len(errors) - MAX_ERRORS
            errors = [*errors[:MAX_ERRORS], ConfigError(None, (), f"... and {more} more error(s) not shown")]
        raise DesiredStateError(errors)
    assert state is not None
    return state


def load_yaml_model(path: str | Path, model: type[ModelT]) -> ModelT:
    """Load one YAML file into a pydantic model; raise DesiredStateError with file:line for every error."""
    path = Path(path)
    errors: list[ConfigError] = []
    if not path.is_file():
        raise DesiredStateError([ConfigError(None, (), f"{path}: no such file")])
    locations: dict[KeyPath, Location] = {}
    doc = parse_file(path, str(path), errors, None, locations)
    if errors:
        raise DesiredStateError(errors)
    try:
        return model.model_validate(doc if doc is not None else {})
    except ValidationError as exc:
        raise DesiredStateError(pydantic_errors(exc, locations)) from None
