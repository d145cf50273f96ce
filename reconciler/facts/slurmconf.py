"""Read Slurm's key=value configuration files (slurm.conf, gres.conf, cgroup.conf) the way Slurm does.

Slurm's own parser (src/common/parse_config.c): `#` starts a comment unless escaped with a backslash (quotes do
not protect it), a line ending in an odd number of backslashes continues on the next one, a value is either
double-quoted (no quote inside) or a run of non-space characters, keys match any case, and `Include PATH`
pulls another file in at that place (relative paths are relative to the including file's directory).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, field

_PAIR = re.compile(r'\s*([A-Za-z0-9_.]+)\s*([-*+/]?)=\s*(?:"([^"]*)"|(\S+))?(?=\s|$)')
_INCLUDE = re.compile(r"^\s*include\s+(\S+)\s*$", re.IGNORECASE)


class ConfSyntaxError(ValueError):
    """A line Slurm would not read as key=value pairs; names file and line."""

    def __init__(self, file: str, line: int, message: str) -> None:
        self.file, self.line = file, line
        super().__init__(f"{file}:{line}: {message}")


@dataclass
class ConfLine:
    """One logical line: its key=value pairs, where it is, and the comments just above it and after it."""

    file: str
    line: int
    pairs: list[tuple[str, str]]
    comments: list[str] = field(default_factory=list)
    trailing: str | None = None

    @property
    def kind(self) -> str:
        """The first key in lower case: nodename, partitionname, nodeset, ... or a global parameter."""
        return self.pairs[0][0].lower()

    @property
    def value(self) -> str:
        """The first pair's value (the node list of NodeName=, the name of PartitionName=)."""
        return self.pairs[0][1]


def _strip_comment(text: str) -> tuple[str, str | None]:
    backslashes = 0
    for index, char in enumerate(text):
        if char == "#" and backslashes % 2 == 0:
            return text[:index], text[index + 1:].strip()
        backslashes = backslashes + 1 if char == "\\" else 0
    return text, None


def _continues(text: str) -> bool:
    stripped = text.rstrip()
    count = len(stripped) - len(stripped.rstrip("\\"))
    return count % 2 == 1


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def parse_pairs(text: str, file: str = "-", line: int = 0) -> list[tuple[str, str]]:
    """Split a line (comment removed) into (key, value) pairs, as Slurm's key=value pattern does."""
    pairs: list[tuple[str, str]] = []
    rest = text
    while rest.strip():
        match = _PAIR.match(rest)
        if match is None:
            raise ConfSyntaxError(file, line, f"not key=value: {rest.strip()!r}")
        if match.group(2):
            raise ConfSyntaxError(file, line, f"{match.group(1)}{match.group(2)}= (an operator) is not supported")
        value = match.group(3) if match.group(3) is not None else (match.group(4) or "")
        pairs.append((match.group(1), value))
        rest = rest[match.end():]
    return pairs


def parse_text(text: str, file: str = "-") -> tuple[list[ConfLine], list[str], list[tuple[int, str]]]:
    """Parse one file: its lines, the comments after the last line, and its Include directives (line, path)."""
    lines: list[ConfLine] = []
    comments: list[str] = []
    includes: list[tuple[int, str]] = []
    raw = text.splitlines()
    index = 0
    while index < len(raw):
        start = index
        body, comment = _strip_comment(raw[index])
        while _continues(body) and index + 1 < len(raw):
            index += 1
            more, comment = _strip_comment(raw[index])
            body = body.rstrip()[:-1] + more
        index += 1
        body = _unescape(body)
        if not body.strip():
            if comment is not None:
                comments.append(comment)
            elif comments and comments[-1] != "":
                comments.append("")  # a blank line ends a comment block
            continue
        include = _INCLUDE.match(body)
        if include:
            includes.append((start + 1, include.group(1)))
            lines.append(ConfLine(file, start + 1, [("Include", include.group(1))], _block(comments), comment))
        else:
            lines.append(ConfLine(file, start + 1, parse_pairs(body, file, start + 1), _block(comments), comment))
        comments = []
    return lines, _block(comments), includes


def _block(comments: list[str]) -> list[str]:
    """The comment lines above the next line (blank-line separators dropped)."""
    return [c for c in comments if c]


Reader = Callable[[str], str | None]


def read_tree(path: str, read: Reader, cluster_name: str | None = None, depth: int = 0) -> list[ConfLine]:
    """Parse a file and, in place of each Include, the lines of the included file (read through `read`)."""
    text = read(path)
    if text is None:
        raise ConfSyntaxError(path, 0, "cannot read the file")
    lines, _, _ = parse_text(text, path)
    out: list[ConfLine] = []
    for line in lines:
        if line.kind == "clustername":
            cluster_name = line.value
        if line.kind != "include":
            out.append(line)
            continue
        if depth >= 10:
            raise ConfSyntaxError(line.file, line.line, "Include nested more than 10 deep")
        target = line.value
        if "%c" in target:
            if cluster_name is None:
                raise ConfSyntaxError(line.file, line.line, "Include with %c before ClusterName")
            target = target.replace("%c", cluster_name.lower())
        if not target.startswith("/"):
            target = posixpath.join(posixpath.dirname(path), target)
        out.extend(read_tree(target, read, cluster_name, depth + 1))
    return out


@dataclass
class Meaning:
    """What a slurm.conf says, order and comments aside: globals, nodes after DEFAULT merging, partitions."""

    globals: dict[str, str] = field(default_factory=dict)
    controllers: list[str] = field(default_factory=list)
    nodes: dict[str, dict[str, str]] = field(default_factory=dict)
    partitions: dict[str, dict[str, str]] = field(default_factory=dict)
    # each lower-case key as last written (`SlurmdPort`), for messages; not part of the meaning
    spelled: dict[str, str] = field(default_factory=dict, compare=False)


_CONTROLLER_KEYS = ("slurmctldhost", "controlmachine", "backupcontroller")
_ALIASES = {"feature": "features"}


def _lower(pairs: list[tuple[str, str]]) -> dict[str, str]:
    return {_ALIASES.get(k.lower(), k.lower()): v for k, v in pairs}


def meaning(lines: list[ConfLine]) -> Meaning:
    """The meaning of parsed slurm.conf lines (hostlists expanded, NodeName/PartitionName=DEFAULT merged)."""
    from reconciler.common import hostlist

    out = Meaning()
    node_default: dict[str, str] = {}
    part_default: dict[str, str] = {}
    nodesets: dict[str, list[str]] = {}
    for line in lines:
        kind, params = line.kind, _lower(line.pairs[1:])
        out.spelled.update((_ALIASES.get(k.lower(), k.lower()), k) for k, _ in line.pairs)
        if kind == "nodename":
            if line.value.upper() == "DEFAULT":
                node_default.update(params)
                continue
            for name in hostlist.expand(line.value):
                out.nodes.setdefault(name, {}).update({**node_default, **params})
        elif kind == "partitionname":
            if line.value.upper() == "DEFAULT":
                part_default.update(params)
                continue
            out.partitions[line.value] = {**part_default, **params}
        elif kind == "nodeset":
            feature = params.get("features")  # Feature= is read as its alias features
            nodesets[line.value] = ([n for n, p in out.nodes.items() if feature in p.get("features", "").split(",")]
                                    if feature else hostlist.expand(params.get("nodes", "")))
        else:
            for key, value in line.pairs:
                if key.lower() in _CONTROLLER_KEYS:
                    out.controllers.append(value)
                else:
                    out.globals[key.lower()] = value
    for params in out.partitions.values():
        if "nodes" in params:
            params["nodes"] = ",".join(sorted(partition_nodes(params["nodes"], nodesets, list(out.nodes))))
    return out


def partition_nodes(expr: str, nodesets: dict[str, list[str]], all_nodes: list[str]) -> list[str]:
    """A partition's Nodes= value as node names: NodeSet names and ALL resolved, hostlists expanded."""
    from reconciler.common import hostlist

    names: list[str] = []
    for part in hostlist.split_top_level(expr):
        if part.upper() == "ALL":
            names += all_nodes
        elif part in nodesets:
            names += nodesets[part]
        else:
            names += hostlist.expand(part)
    return list(dict.fromkeys(names))


def same_meaning(before: str, after: str) -> bool:
    """True when two slurm.conf texts (without Include lines) mean the same; False when either cannot be read."""
    try:
        old, _, old_includes = parse_text(before)
        new, _, new_includes = parse_text(after)
    except ValueError:  # ConfSyntaxError, or a hostlist Slurm would refuse
        return False
    return not old_includes and not new_includes and meaning(old) == meaning(new)


def same_pairs(before: str, after: str) -> bool:
    """True when two gres.conf/cgroup.conf texts hold the same lines of pairs (order, case and comments aside)."""
    try:
        old, new = parse_text(before)[0], parse_text(after)[0]
    except ValueError:  # ConfSyntaxError included
        return False

    def norm(lines: list[ConfLine]) -> list[tuple[tuple[str, str], ...]]:
        return sorted(tuple(sorted((k.lower(), v.lower() if v.lower() in ("yes", "no") else v)
                                   for k, v in line.pairs)) for line in lines)
    return norm(old) == norm(new)
