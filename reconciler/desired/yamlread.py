"""Read one YAML document of the desired state: fast, bounded, and every failure a file:line error.

libyaml's C parser (ruamel.yaml.clib) turns the text into events; this module builds plain Python values from
them (dicts, lists, str, int, float, bool, None) and the location of every key and list item, in one pass. The
same pass enforces the load limits (alias expansion counted as if every alias were copied out, nesting depth)
and refuses what the desired state never needs and an attacker could use: explicit tags other than `!!str`
(`!!python/...`, `!!binary`, `!!timestamp`, ...), complex (non-scalar) keys, duplicate keys, raw control bytes.
Nothing here raises anything but YamlReadError, whatever the bytes.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import (
    AliasEvent,
    CollectionEndEvent,
    DocumentStartEvent,
    Event,
    MappingStartEvent,
    NodeEvent,
    ScalarEvent,
    SequenceStartEvent,
)
from ruamel.yaml.nodes import ScalarNode
from ruamel.yaml.reader import ReaderError

KeyPath = tuple[str | int, ...]
STR_TAG = "tag:yaml.org,2002:str"
MERGE_KEY = "<<"
ALLOWED_TAGS = {STR_TAG, "!"}  # `!!str 0755` and the non-specific `! 0755` both mean: this is text


@dataclass(frozen=True)
class YamlReadError(Exception):
    """Why a document cannot be read: 1-based line and column, the key path reached, the message."""

    line: int
    column: int
    path: KeyPath
    message: str

    def __str__(self) -> str:
        return f"{self.line}:{self.column}: {self.message}"


@dataclass(frozen=True)
class Bounds:
    """What one document may cost to build."""

    max_alias_expansions: int
    max_depth: int


def _safe() -> YAML:
    yaml = YAML(typ="safe", pure=False)
    yaml.allow_duplicate_keys = True  # duplicates are found here, with their key path
    return yaml


_SCALARS = _safe()
_IMPLICIT: dict[Any, list[tuple[str, Any]]] = _SCALARS.resolver.versioned_resolver  # first char -> resolvers


_BY_FIRST: dict[str, tuple[tuple[str, Any], ...]] = {}


def _implicit_tag(value: str) -> str:
    """The tag YAML 1.2's core schema gives a plain scalar (what ruamel's resolver says, without its overhead)."""
    first = value[:1]
    resolvers = _BY_FIRST.get(first)
    if resolvers is None:
        resolvers = _BY_FIRST[first] = tuple(_IMPLICIT.get(first or "", []) + _IMPLICIT.get(None, []))
    for tag, regexp in resolvers:
        if regexp.match(value):
            return str(tag)
    return STR_TAG
OVER_LIMITS = "over limits"


def _position(text: str, index: int) -> tuple[int, int]:
    """1-based line and column of a character offset."""
    index = max(0, min(index, len(text)))
    return text.count("\n", 0, index) + 1, index - (text.rfind("\n", 0, index) + 1) + 1


def _byte_position(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of a UTF-8 byte offset (libyaml's reader reports bytes)."""
    head = text.encode("utf-8", "surrogatepass")[:offset].decode("utf-8", "replace")
    return _position(text, len(head))


class _Builder:
    """Builds values from parser events, with locations, limits and refusals."""

    def __init__(self, bounds: Bounds) -> None:
        self.bounds = bounds
        self.anchors: dict[str, tuple[Any, int]] = {}  # anchor -> (value, expanded node count)
        self.expansions = 0
        self.locations: dict[KeyPath, tuple[int, int]] = {}
        self.depth = 0

    def fail(self, event: Event, path: KeyPath, message: str) -> YamlReadError:
        mark = event.start_mark
        return YamlReadError(mark.line + 1, mark.column + 1, path, message)

    def scalar(self, event: ScalarEvent, path: KeyPath) -> Any:
        tag = event.tag
        if tag is not None and tag not in ALLOWED_TAGS:
            shown = tag.replace("tag:yaml.org,2002:", "!!")
            raise self.fail(event, path, f"explicit YAML tag {shown} is not allowed: the desired state is plain "
                            "YAML (quote the value to keep it as text)")
        if tag is not None or event.style in ("'", '"', "|", ">") or not event.implicit[0]:
            return event.value
        tag = _implicit_tag(event.value)
        if tag == STR_TAG:
            return event.value
        node = ScalarNode(tag, event.value, start_mark=event.start_mark, end_mark=event.end_mark)
        try:
            return _SCALARS.constructor.construct_object(node, deep=True)
        except (YAMLError, ValueError, TypeError, OverflowError) as exc:
            raise self.fail(event, path, f"cannot read the value {event.value!r}: {exc}") from None

    def node(self, events: Any, event: Event, path: KeyPath) -> tuple[Any, int]:
        """The value that starts with EVENT and how many nodes it expands to."""
        if isinstance(event, AliasEvent):
            if event.anchor not in self.anchors:
                raise self.fail(event, path, f"alias *{event.anchor} names no anchor above it")
            value, size = self.anchors[event.anchor]
            self.expansions += size
            if self.expansions > self.bounds.max_alias_expansions:
                raise self.fail(event, path, f"{OVER_LIMITS}: more than {self.bounds.max_alias_expansions} alias "
                                f"expansions (alias *{event.anchor} brings in {size} node(s)); refused before "
                                "loading (RECONCILER_YAML_MAX_ALIAS_EXPANSIONS=<count> in the environment raises it)")
            return copy.deepcopy(value), size
        if isinstance(event, ScalarEvent):
            value, size = self.scalar(event, path), 1
        elif isinstance(event, MappingStartEvent | SequenceStartEvent):
            if event.tag is not None and event.tag not in ALLOWED_TAGS | {"tag:yaml.org,2002:map",
                                                                          "tag:yaml.org,2002:seq"}:
                shown = event.tag.replace("tag:yaml.org,2002:", "!!")
                raise self.fail(event, path, f"explicit YAML tag {shown} is not allowed: the desired state is "
                                "plain YAML")
            self.depth += 1
            if self.depth > self.bounds.max_depth:
                raise self.fail(event, path, f"{OVER_LIMITS}: nested deeper than {self.bounds.max_depth} levels "
                                "(RECONCILER_YAML_MAX_DEPTH=<levels> in the environment raises it)")
            build = self.mapping if isinstance(event, MappingStartEvent) else self.sequence
            value, size = build(events, event, path)
            self.depth -= 1
        else:
            raise self.fail(event, path, f"unexpected {type(event).__name__}")
        if event.anchor:
            self.anchors[event.anchor] = (value, size)
        return value, size

    def sequence(self, events: Any, start: Event, path: KeyPath) -> tuple[list[Any], int]:
        out: list[Any] = []
        size = 1
        for event in events:
            if isinstance(event, CollectionEndEvent):
                return out, size
            item_path = (*path, len(out))
            self.locations[item_path] = (event.start_mark.line + 1, event.start_mark.column + 1)
            value, count = self.node(events, event, item_path)
            out.append(value)
            size += count
        raise self.fail(start, path, "unterminated sequence")

    def mapping(self, events: Any, start: Event, path: KeyPath) -> tuple[dict[str, Any], int]:
        out: dict[str, Any] = {}
        merged: dict[str, Any] = {}
        seen: dict[str, tuple[int, int]] = {}
        size = 1
        for event in events:
            if isinstance(event, CollectionEndEvent):
                return {**merged, **out}, size
            if not isinstance(event, ScalarEvent | AliasEvent):
                raise self.fail(event, path, "a mapping key must be a plain scalar (text), not a mapping or list")
            if isinstance(event, ScalarEvent) and event.value == MERGE_KEY and event.implicit[0] \
                    and not event.style:
                value, count = self.node(events, next(events), path)
                size += count
                for one in value if isinstance(value, list) else [value]:
                    if not isinstance(one, dict):
                        raise self.fail(event, path, "expected a mapping or list of mappings for merging (<<)")
                    merged = {**one, **merged}
                continue
            key_value, _ = self.node(events, event, path)
            if isinstance(key_value, dict | list):
                raise self.fail(event, path, "a mapping key must be a plain scalar (text), not a mapping or list")
            key = str(key_value)
            where = (event.start_mark.line + 1, event.start_mark.column + 1)
            if key in seen:
                raise self.fail(event, (*path, key), f'duplicate key: found duplicate key "{key}" (first at line '
                                f"{seen[key][0]})")
            seen[key] = where
            key_path = (*path, key)
            self.locations[key_path] = where
            value, count = self.node(events, next(events), key_path)
            out[key] = value
            size += count
        raise self.fail(start, path, "unterminated mapping")


PURE_RETRY_BYTES = 256_000  # libyaml refuses a few YAML 1.2 forms (`[/a:/b]`): re-read small files in Python


def _events(yaml: YAML, text: str) -> Any:
    """The parser's events; with libyaml, straight from its parser (ruamel's generator around it costs a third)."""
    if yaml.Parser is not None and yaml.Parser.__name__ == "CParser":
        parser = yaml.Parser(text)
        get = parser.get_event
        while True:
            event = get()
            if event is None:
                return
            yield event
            if type(event).__name__ == "StreamEndEvent":
                return
    yield from yaml.parse(text)


def _build(text: str, bounds: Bounds, yaml: YAML) -> tuple[Any, dict[KeyPath, tuple[int, int]]]:
    builder = _Builder(bounds)
    document: Any = None
    documents = 0
    events = _events(yaml, text)
    for event in events:
        if isinstance(event, DocumentStartEvent):
            documents += 1
            if documents > 1:
                raise builder.fail(event, (), "invalid YAML: more than one document in the file (one per file: "
                                   "split it, or remove the '---')")
        elif isinstance(event, NodeEvent):
            document, _ = builder.node(events, event, ())
    return document, builder.locations


def _read(text: str, bounds: Bounds, pure: bool) -> tuple[Any, dict[KeyPath, tuple[int, int]]]:
    try:
        yaml = _safe()
        if pure:
            yaml = YAML(typ="safe", pure=True)
        return _build(text, bounds, yaml)
    except YamlReadError:
        raise
    except ReaderError as exc:
        line, column = _position(text, int(exc.position)) if pure else _byte_position(text, int(exc.position))
        char = exc.character if isinstance(exc.character, str) else chr(exc.character)
        raise YamlReadError(line, column, (), f"invalid YAML: raw character U+{ord(char):04X} is not allowed in "
                            "YAML (write it as an escape in a double-quoted string, or remove it)") from None
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        raise YamlReadError(line, column, (), f"invalid YAML: {exc.problem or exc.context}") from None
    except (YAMLError, ValueError, UnicodeError, RecursionError) as exc:
        raise YamlReadError(1, 1, (), f"invalid YAML: {exc}") from None


def read_document(text: str, bounds: Bounds) -> tuple[Any, dict[KeyPath, tuple[int, int]]]:
    """Build the one document of TEXT and the (line, column) of every key and list item; None when empty."""
    try:
        return _read(text, bounds, pure=False)
    except YamlReadError as exc:
        if not exc.message.startswith("invalid YAML:") or "raw character" in exc.message:
            raise
        if len(text) > PURE_RETRY_BYTES:
            raise YamlReadError(exc.line, exc.column, exc.path, f"{exc.message} (in a file this large, quote "
                                "values that hold ':' inside [...] or {...})") from None
    return _read(text, bounds, pure=True)
