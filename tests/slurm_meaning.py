"""What a Slurm configuration means, independent of how it is written (the round-trip oracle).

Written from Slurm 22.05's src/common/parse_config.c and read_config.c, not from this
project's renderer: it must not share a bug with what it judges. What it follows:

* a line is cut at the first ``#`` not escaped as ``\\#`` (quotes do not protect ``#``,
  exactly as in Slurm); a line ending in an odd number of ``\\`` continues on the next;
  then ``\\x`` becomes ``x``;
* ``Include FILE`` (any case, at column 0; ``%c`` is the lower-cased ClusterName) reads FILE
  relative to the directory of the file that includes it;
* keys are case-insensitive (the meaning uses lower-case keys); a value is ``"quoted"`` (no
  inner quotes) or runs to the next white space; a repeated global key: the last wins, except
  ``SlurmctldHost`` which keeps every value in order; without it, the legacy ``ControlMachine``/``ControlAddr``
  and ``BackupController``/``BackupAddr`` are the same list (``name(name)`` is ``name``);
* ``NodeName=DEFAULT`` and ``PartitionName=DEFAULT`` accumulate (a later DEFAULT line overrides
  only the keys it sets) and apply to the records that follow them, never to earlier ones;
* aliases resolved in Slurm's order of precedence: node ``CPUs`` over ``Procs`` and
  ``Feature`` over ``Features``, partition ``OverSubscribe`` over ``Shared``;
* hostlists expanded (``NodeAddr``/``NodeHostname`` zipped with the node names), partition
  ``Nodes`` resolved to node names (``ALL``, NodeSets by ``Nodes=`` and by ``Feature=``);
* values Slurm reads case-insensitively are upper-cased (node/partition ``State``,
  ``OverSubscribe``), booleans become ``YES``/``NO``, feature lists and ``Gres`` are sorted.

Whatever else is written is kept as written: an unknown key is kept, not rejected.

Reading lines, includes and pairs is tests/slurm_meaning_read.py; gres.conf and cgroup.conf are
tests/slurm_meaning_gres.py; this module is slurm.conf's meaning and the comparison of two sources.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import hostlist

from tests.slurm_meaning_gres import cgroup_conf_meaning, gres_conf_meaning
from tests.slurm_meaning_read import (
    KEYVALUE,
    ConfReader,
    Line,
    SlurmConfError,
    Source,
    expand,
    line_pairs,
    sorted_list,
    yes_no,
)

__all__ = ["SlurmConfError", "SlurmMeaning", "assert_same_meaning", "cgroup_conf_meaning",
           "gres_conf_meaning", "meaning_diff", "slurm_conf_meaning"]

_RECORD_KEYS = {"nodename", "partitionname", "nodeset", "downnodes", "frontendname"}
_LIST_GLOBALS = {"slurmctldhost"}
_PARTITION_BOOLEANS = {"default", "disablerootjobs", "exclusiveuser", "hidden", "lln", "rootonly",
                       "reqresv", "powerdownonidle", "exclusivetopo"}
_PARTITION_ALL_MEANS_UNSET = {"allowaccounts", "allowgroups", "allowqos", "allocnodes"}
_NOT_FROM_DEFAULT = {"nodehostname", "nodeaddr", "bcastaddr"}


@dataclass
class SlurmMeaning:
    """The meaning of a slurm.conf and the files it includes."""

    globals: dict[str, str | tuple[str, ...]] = field(default_factory=dict)
    nodes: dict[str, dict[str, str]] = field(default_factory=dict)
    partitions: dict[str, dict[str, str | tuple[str, ...]]] = field(default_factory=dict)
    nodesets: dict[str, tuple[str, ...]] = field(default_factory=dict)
    down_nodes: dict[str, dict[str, str]] = field(default_factory=dict)
    duplicate_nodes: tuple[str, ...] = ()
    duplicate_partitions: tuple[str, ...] = ()
    files: tuple[str, ...] = ()


def _pick(line: dict[str, str], dflt: dict[str, str], *keys: str) -> str | None:
    for key in keys:
        for table in (line, dflt):
            if key in table:
                return table[key]
    return None


def _node_params(line: dict[str, str], dflt: dict[str, str]) -> dict[str, str]:
    params: dict[str, str] = {}
    for key in set(line) | (set(dflt) - _NOT_FROM_DEFAULT):
        if key in {"procs", "features", "cpus", "feature"}:
            continue
        params[key] = line[key] if key in line else dflt[key]
    cpus = line.get("cpus") or dflt.get("cpus") or line.get("procs") or dflt.get("procs")
    if cpus is not None:
        params["cpus"] = cpus
    feature = line.get("feature") or line.get("features") or dflt.get("feature") or dflt.get("features")
    if feature is not None:
        params["feature"] = sorted_list(feature)
    if "gres" in params:
        params["gres"] = sorted_list(params["gres"])
    if "state" in params:
        params["state"] = params["state"].upper()
    return params


def _partition_params(line: dict[str, str], dflt: dict[str, str]) -> dict[str, str]:
    params: dict[str, str] = {}
    for key in set(line) | set(dflt):
        if key in {"shared", "oversubscribe"}:
            continue
        value = line[key] if key in line else dflt[key]
        if key in _PARTITION_BOOLEANS:
            value = yes_no(value)
        elif key == "state":
            value = value.upper()
        elif key in _PARTITION_ALL_MEANS_UNSET and value.upper() == "ALL":
            continue
        elif key in {"allowaccounts", "allowqos", "denyaccounts", "denyqos"}:
            value = value.lower()
        params[key] = value
    over = _pick(line, dflt, "oversubscribe") or _pick(line, dflt, "shared")
    if over is not None:
        params["oversubscribe"] = over.upper()
    return params


# ---------------------------------------------------------------- slurm.conf


def _controller(name: str, addr: str | None) -> str:
    """`name(addr)`, or `name` when the address is the name itself (Slurm resolves both the same)."""
    return name if addr in (None, name) else f"{name}({addr})"


def _legacy_controllers(globals_: dict[str, str | tuple[str, ...]]) -> None:
    """ControlMachine/ControlAddr and BackupController/BackupAddr (before 18.08) as SlurmctldHost entries, which
    read_config.c uses only when no SlurmctldHost line is present; `name(name)` written as `name`."""
    names = ("controlmachine", "controladdr", "backupcontroller", "backupaddr")
    legacy: dict[str, str | tuple[str, ...]] = {k: globals_.pop(k) for k in names if k in globals_}
    hosts = globals_.get("slurmctldhost")
    if isinstance(hosts, tuple):
        parts = [re.fullmatch(r"([^(]+)(?:\((.*)\))?", host) for host in hosts]
        globals_["slurmctldhost"] = tuple(_controller(*m.groups()) if m else host
                                          for m, host in zip(parts, hosts, strict=True))
        return
    entries = []
    for host, addr in (("controlmachine", "controladdr"), ("backupcontroller", "backupaddr")):
        if isinstance(legacy.get(host), str):
            address = legacy.get(addr)
            entries.append(_controller(str(legacy[host]), address if isinstance(address, str) else None))
    if entries:
        globals_["slurmctldhost"] = tuple(entries)


def slurm_conf_meaning(source: Source, main: str = "slurm.conf") -> SlurmMeaning:
    """Parse a config directory, a slurm.conf path, or a dict {file name: text} into its meaning."""
    reader = ConfReader(source, main)
    meaning = SlurmMeaning()
    node_default: dict[str, str] = {}
    part_default: dict[str, str] = {}
    node_lines: list[tuple[Line, str, dict[str, str]]] = []
    raw_partitions: dict[str, dict[str, str]] = {}
    raw_nodesets: dict[str, dict[str, str]] = {}
    duplicates_p: list[str] = []

    for line in reader.lines(reader.main, meaning.globals):
        match = KEYVALUE.match(line.text)
        if not match:
            if line.text.strip():
                raise SlurmConfError(f"{line.file}:{line.number}: cannot parse {line.text.strip()!r}")
            continue
        key = match.group(1).lower()
        value = match.group(3) if match.group(3) is not None else match.group(4)
        if key not in _RECORD_KEYS:
            if line.text[match.end():].strip():
                raise SlurmConfError(f"{line.file}:{line.number}: one {key} per line, then "
                                     f"{line.text[match.end():].strip()!r}")
            if match.group(2):
                raise SlurmConfError(f"{line.file}:{line.number}: operator '{match.group(2)}=' is not supported")
            if key in _LIST_GLOBALS:
                previous = meaning.globals.get(key, ())
                meaning.globals[key] = (*previous, value) if isinstance(previous, tuple) else (value,)
            else:
                meaning.globals[key] = value
            continue
        params = dict(line_pairs(line, line.text[match.end():]))
        if key == "nodename":
            if value.upper() == "DEFAULT":
                node_default = {**node_default, **params}
            else:
                node_lines.append((line, value, _node_params(params, node_default)))
        elif key == "partitionname":
            if value.upper() == "DEFAULT":
                part_default = {**part_default, **params}
            else:
                if value in raw_partitions:
                    duplicates_p.append(value)
                raw_partitions[value] = _partition_params(params, part_default)
        elif key == "nodeset":
            raw_nodesets[value] = params
        elif key == "downnodes":
            for name in expand(value):
                meaning.down_nodes[name] = {"state": params.get("state", "").upper(),
                                            "reason": params.get("reason", "Set in slurm.conf")}
        else:
            meaning.globals.setdefault("frontendname", ())
            meaning.globals["frontendname"] = (*meaning.globals["frontendname"], value)

    _legacy_controllers(meaning.globals)
    duplicates_n: list[str] = []
    for line, names_expr, params in node_lines:
        names = expand(names_expr)
        per_node: dict[str, list[str]] = {}
        for key in ("nodehostname", "nodeaddr"):
            if key in params:
                values = expand(params[key])
                if len(values) not in (1, len(names)):
                    raise SlurmConfError(f"{line.file}:{line.number}: {len(values)} {key} for {len(names)} nodes")
                per_node[key] = values if len(values) == len(names) else values * len(names)
        for i, name in enumerate(names):
            node = dict(params)
            for key, values in per_node.items():
                node[key] = values[i]
            if name in meaning.nodes:
                duplicates_n.append(name)
                node = {**meaning.nodes[name], **node}
            meaning.nodes[name] = node

    for name, spec in raw_nodesets.items():
        members = set(_resolve(spec.get("nodes", ""), meaning.nodes, {}))
        if "feature" in spec:
            members |= {n for n, p in meaning.nodes.items() if spec["feature"] in p.get("feature", "").split(",")}
        meaning.nodesets[name] = tuple(sorted(members))
    for name, params in raw_partitions.items():
        part: dict[str, str | tuple[str, ...]] = dict(params)
        part["nodes"] = tuple(sorted(set(_resolve(params.get("nodes", ""), meaning.nodes, meaning.nodesets))))
        meaning.partitions[name] = part
    meaning.duplicate_nodes = tuple(duplicates_n)
    meaning.duplicate_partitions = tuple(duplicates_p)
    meaning.files = tuple(reader.files)
    return meaning


def _resolve(expr: str, nodes: Mapping[str, object], nodesets: Mapping[str, tuple[str, ...]]) -> Iterable[str]:
    if expr.strip().upper() == "ALL":
        return list(nodes)
    out: list[str] = []
    for name in expand(expr):
        out.extend(nodesets.get(name, (name,)))
    return out


# ---------------------------------------------------------------- comparing


def _dict_diff(where: str, a: Mapping[str, object], b: Mapping[str, object]) -> list[str]:
    out = []
    for key in sorted(set(a) | set(b)):
        if key not in b:
            out.append(f"{where}: {key}={a[key]!r} only in A")
        elif key not in a:
            out.append(f"{where}: {key}={b[key]!r} only in B")
        elif a[key] != b[key]:
            out.append(f"{where}: {key}: A={a[key]!r} B={b[key]!r}")
    return out


def _records_diff(kind: str, a: Mapping[str, Mapping[str, object]], b: Mapping[str, Mapping[str, object]]) -> list[str]:
    out = []
    only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
    if only_a:
        out.append(f"{kind} only in A: {hostlist.collect_hostlist(only_a)}")
    if only_b:
        out.append(f"{kind} only in B: {hostlist.collect_hostlist(only_b)}")
    for name in sorted(set(a) & set(b)):
        out.extend(_dict_diff(f"{kind} {name}", a[name], b[name]))
    return out


def meaning_diff(a: Source, b: Source) -> list[str]:
    """Readable differences between the meanings of two config sources (empty when they agree)."""
    sa, sb = slurm_conf_meaning(a), slurm_conf_meaning(b)
    out = _dict_diff("slurm.conf global", sa.globals, sb.globals)
    out += _records_diff("node", sa.nodes, sb.nodes)
    out += _records_diff("partition", sa.partitions, sb.partitions)
    out += _dict_diff("nodeset", sa.nodesets, sb.nodesets)
    out += _records_diff("DownNodes", sa.down_nodes, sb.down_nodes)
    for label, m in (("A", sa), ("B", sb)):
        if m.duplicate_nodes:
            out.append(f"{label} defines nodes more than once: {hostlist.collect_hostlist(m.duplicate_nodes)}")
        if m.duplicate_partitions:
            out.append(f"{label} defines partitions more than once: {sorted(set(m.duplicate_partitions))}")
    ga, gb = gres_conf_meaning(a), gres_conf_meaning(b)
    if ga.autodetect != gb.autodetect:
        out.append(f"gres.conf AutoDetect: A={ga.autodetect!r} B={gb.autodetect!r}")
    out += [f"gres.conf only in A: {line}" for line in sorted(ga.lines - gb.lines)]
    out += [f"gres.conf only in B: {line}" for line in sorted(gb.lines - ga.lines)]
    out += _dict_diff("cgroup.conf", cgroup_conf_meaning(a), cgroup_conf_meaning(b))
    return out


def assert_same_meaning(a: Source, b: Source) -> None:
    """Fail with every difference listed unless slurm.conf, gres.conf and cgroup.conf of A and B mean the same."""
    diff = meaning_diff(a, b)
    if diff:
        raise AssertionError("configurations differ in meaning (A vs B):\n  " + "\n  ".join(diff))
