"""Turn an existing cluster's slurm.conf, gres.conf and cgroup.conf into desired-state YAML data.

The output means exactly what the input meant: every global parameter kept in its order, NodeName=DEFAULT
merged into each node line, PartitionName=DEFAULT into each partition, NodeSet names and ALL resolved into node
lists, comments carried over where YAML can hold them. What our schema cannot express is an ImportError naming
the file and line; keys no Slurm release documents go under `extra` with a warning.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from reconciler import params as slurm_params
from reconciler.common import hostlist
from reconciler.facts.slurmconf import ConfLine, ConfSyntaxError, partition_nodes


class ImportProblem(ConfSyntaxError):
    """Something in the source files that the desired state cannot express; names file and line."""


@dataclass
class Converted:
    """What the conversion produced: the `cluster:` mapping, the node sets' names, and warnings."""

    cluster: CommentedMap
    compute: list[str] = field(default_factory=list)  # hostlists of the NodeName lines, in order
    warnings: list[str] = field(default_factory=list)


NODE_TYPED = {"cpus": ("CPUs", int), "boards": ("Boards", int), "sockets": ("Sockets", int),
              "corespersocket": ("CoresPerSocket", int), "threadspercore": ("ThreadsPerCore", int),
              "realmemory": ("RealMemory", int), "weight": ("Weight", int), "state": ("State", str)}
GRES_TYPED = {"nodename": "nodes", "name": "name", "type": "type", "file": "file", "count": "count",
              "cores": "cores", "links": "links"}
_GPU_GRES = re.compile(r"^gpu(?::([A-Za-z0-9_.-]+))?:(\d+)$")
_CONTROLLER = {"slurmctldhost", "controlmachine", "backupcontroller"}
_ADDRESS = {"controladdr", "backupaddr"}


def scalar(value: str) -> str | int:
    """A YAML scalar for a Slurm value: plain integers as int (no leading zeros), everything else as written."""
    return int(value) if re.fullmatch(r"0|[1-9]\d{0,17}", value) else value


class _Comments:
    """Comments of source lines waiting for the next YAML key that can hold them."""

    def __init__(self) -> None:
        self.pending: list[str] = []

    def hold(self, line: ConfLine) -> None:
        """Keep a line's comments for the next key (its own line has no key of its own)."""
        self.pending += line.comments + ([line.trailing] if line.trailing else [])

    def put(self, target: CommentedMap | CommentedSeq, key: Any, line: ConfLine, indent: int) -> None:
        """Attach the waiting comments and the line's own above `key`, and its trailing comment after it."""
        lines = self.pending + line.comments
        self.pending = []
        # The end-of-line comment goes first: ruamel cannot add one to a key that already has a comment
        # before it (TypeError from its comment writer). A list item's goes on its first key.
        if line.trailing:
            item = target[key]
            if isinstance(target, CommentedSeq) and isinstance(item, CommentedMap) and item:
                item.yaml_add_eol_comment(line.trailing, next(iter(item)))
            else:
                target.yaml_add_eol_comment(line.trailing, key)
        if lines:
            target.yaml_set_comment_before_after_key(key, before="\n".join(lines), indent=indent)


def _resolved(file: str, key: str, scope: str, family: str | None, line: ConfLine) -> str:
    """Slurm's spelling of a documented key; an ImportProblem when the cluster's release lacks it."""
    try:
        return slurm_params.resolve(file, key, family, scope).name
    except ValueError as exc:
        raise ImportProblem(line.file, line.line, str(exc)) from None


def _known(file: str, key: str, scope: str, family: str | None, line: ConfLine,
           warnings: list[str]) -> str | None:
    """Slurm's spelling of a key, or None (with a warning) when no release documents it."""
    if slurm_params.lookup(file, key, scope) is None:
        warnings.append(f"{line.file}:{line.line}: {key} is not a documented {file} parameter: kept under extra")
        return None
    return _resolved(file, key, scope, family, line)


def _line_param(file: str, key: str, scope: str, family: str | None, line: ConfLine, what: str) -> str:
    """Slurm's spelling of a key of a NodeName/PartitionName/gres.conf line; an unknown one cannot be expressed."""
    if slurm_params.lookup(file, key, scope) is None:
        raise ImportProblem(line.file, line.line, f"unknown {what} parameter {key}")
    return _resolved(file, key, scope, family, line)


class _SlurmConf:
    """Walks slurm.conf lines once and fills the `cluster:` mapping."""

    def __init__(self, family: str | None) -> None:
        self.family = family
        self.params = CommentedMap()
        self.extra = CommentedMap()
        self.where: dict[str, str] = {}
        self.controllers: list[str] = []
        self.addresses: dict[int, str] = {}
        self.name: str | None = None
        self.node_sets = CommentedSeq()
        self.partitions = CommentedSeq()
        self.down = CommentedSeq()
        self.node_default: dict[str, str] = {}
        self.part_default: dict[str, str] = {}
        self.nodesets: dict[str, list[str]] = {}
        self.node_features: dict[str, list[str]] = {}
        self.warnings: list[str] = []
        self.comments = _Comments()

    def line(self, line: ConfLine) -> None:
        kind = line.kind
        handler = {"nodename": self.node, "partitionname": self.partition, "nodeset": self.nodeset,
                   "downnodes": self.down_nodes}.get(kind)
        if kind == "frontendname":
            raise ImportProblem(line.file, line.line, "FrontendName lines cannot be expressed (front-end mode)")
        if handler:
            handler(line)
        else:
            for key, value in line.pairs:
                self.global_pair(line, key, value)

    def global_pair(self, line: ConfLine, key: str, value: str) -> None:
        low = key.lower()
        if line.pairs[0][0] == key and (low == "clustername" or low in _CONTROLLER or low in _ADDRESS):
            self.comments.hold(line)
        if low == "clustername":
            self.name = value
        elif low in _CONTROLLER:
            self.controllers.append(value)
        elif low in _ADDRESS:
            self.addresses[0 if low == "controladdr" else 1] = value
        else:
            name = _known("slurm.conf", key, "global", self.family, line, self.warnings)
            target = self.params if name else self.extra
            name = name or key
            if name in target:
                self.warnings.append(f"{line.file}:{line.line}: {name} set again (first at {self.where[name]}): "
                                     f"the last value wins, as in Slurm")
                del target[name]
            target[name] = scalar(value)
            self.where[name] = f"{line.file}:{line.line}"
            if line.pairs[0][0] == key:
                self.comments.put(target, name, line, 4)

    def node(self, line: ConfLine) -> None:
        params = dict(line.pairs[1:])
        if line.value.upper() == "DEFAULT":
            self.node_default.update(params)
            self.comments.hold(line)
            return
        merged = {**{k: v for k, v in self.node_default.items() if k.lower() not in ("nodeaddr", "nodehostname")},
                  **params}
        try:
            names = hostlist.expand(line.value)
        except ValueError as exc:
            raise ImportProblem(line.file, line.line, str(exc)) from None
        entry = CommentedMap(nodes=hostlist.compress(names))
        rest = CommentedMap()
        seen: dict[str, str] = {}
        for key, value in merged.items():
            low = key.lower()
            if low in seen:
                raise ImportProblem(line.file, line.line, f"{key} and {seen[low]} on one line")
            seen[low] = key
            gpu = _GPU_GRES.match(value) if low == "gres" else None
            if low in NODE_TYPED:
                typed, kind = NODE_TYPED[low]
                entry[typed] = scalar(value) if kind is int else value
            elif low in ("feature", "features"):
                entry["Features"] = [f for f in value.split(",") if f]
                for name in names:
                    self.node_features[name] = entry["Features"]
            elif gpu:
                entry["gpus"] = CommentedMap(count=int(gpu.group(2)))
                if gpu.group(1):
                    entry["gpus"]["type"] = gpu.group(1)
            else:
                rest[_line_param("slurm.conf", key, "node", self.family, line, "NodeName")] = scalar(value)
        for name in names:
            self.node_features.setdefault(name, [])
        if rest:
            entry["params"] = rest
        self.node_sets.append(entry)
        self.comments.put(self.node_sets, len(self.node_sets) - 1, line, 4)

    def nodeset(self, line: ConfLine) -> None:
        self.comments.hold(line)
        params = {k.lower(): v for k, v in line.pairs[1:]}
        if "feature" in params:
            self.nodesets[line.value] = [n for n, f in self.node_features.items() if params["feature"] in f]
        elif "nodes" in params:
            self.nodesets[line.value] = hostlist.expand(params["nodes"])
        else:
            raise ImportProblem(line.file, line.line, "a NodeSet needs Nodes= or Feature=")

    def partition(self, line: ConfLine) -> None:
        params = dict(line.pairs[1:])
        if line.value.upper() == "DEFAULT":
            self.part_default.update(params)
            self.comments.hold(line)
            return
        merged = {**self.part_default, **params}
        entry = CommentedMap(name=line.value)
        rest = CommentedMap()
        nodes_expr = next((v for k, v in merged.items() if k.lower() == "nodes"), "")
        names = partition_nodes(nodes_expr, self.nodesets, list(self.node_features))
        if names:
            entry["nodes"] = hostlist.compress(names)
        for key, value in merged.items():
            low = key.lower()
            if low == "nodes":
                continue
            if low == "default" and value.upper() in ("YES", "NO"):
                entry["default"] = value.upper() == "YES"
            elif low == "maxtime":
                entry["MaxTime"] = value
            elif low == "state" and value.upper() in ("UP", "DOWN", "DRAIN", "INACTIVE"):
                entry["State"] = value.upper()
            else:
                rest[_line_param("slurm.conf", key, "partition", self.family, line, "PartitionName")] = scalar(value)
        if rest:
            entry["params"] = rest
        self.partitions.append(entry)
        self.comments.put(self.partitions, len(self.partitions) - 1, line, 4)

    def down_nodes(self, line: ConfLine) -> None:
        self.comments.hold(line)
        entry = CommentedMap(nodes=hostlist.compress(hostlist.expand(line.value)))
        for key, value in line.pairs[1:]:
            if key.lower() not in ("state", "reason"):
                raise ImportProblem(line.file, line.line, f"DownNodes parameter {key} cannot be expressed")
            entry[key.capitalize()] = value
        self.down.append(entry)

    def controller_list(self, first: ConfLine | None) -> list[str]:
        out = []
        for index, host in enumerate(self.controllers):
            if index in self.addresses and "(" not in host:
                host = f"{host}({self.addresses[index]})"
            out.append(host)
        if not out:
            where = (first.file, first.line) if first else ("slurm.conf", 0)
            raise ImportProblem(*where, "no SlurmctldHost (or ControlMachine): the cluster has no controller")
        return out


def convert_slurm(lines: list[ConfLine], family: str | None) -> Converted:
    """The `cluster:` mapping of slurm.conf lines (Include already resolved)."""
    conf = _SlurmConf(family)
    for line in lines:
        conf.line(line)
    first = lines[0] if lines else None
    if conf.name is None:
        raise ImportProblem(first.file if first else "slurm.conf", 0, "no ClusterName")
    cluster = CommentedMap()
    cluster["name"] = conf.name.lower()
    cluster["slurm_version"] = family or "FILL-IN"
    cluster["controllers"] = conf.controller_list(first)
    params = conf.params
    if conf.extra:
        params["extra"] = conf.extra
    cluster["slurm_conf"] = params
    cluster["node_sets"] = conf.node_sets
    cluster["partitions"] = conf.partitions
    if conf.down:
        cluster["down_nodes"] = conf.down
    compute = [entry["nodes"] for entry in conf.node_sets]
    return Converted(cluster=cluster, compute=compute, warnings=conf.warnings)


def convert_gres(lines: list[ConfLine], family: str | None, warnings: list[str]) -> CommentedMap:
    """The `gres:` mapping of gres.conf lines."""
    gres = CommentedMap()
    items = CommentedSeq()
    comments = _Comments()
    for line in lines:
        pairs = {k.lower(): (k, v) for k, v in line.pairs}
        if set(pairs) == {"autodetect"}:
            gres["auto_detect"] = pairs["autodetect"][1].lower()
            comments.put(gres, "auto_detect", line, 4)
            continue
        entry = CommentedMap()
        rest = CommentedMap()
        for low, (key, value) in pairs.items():
            if low in GRES_TYPED:
                entry[GRES_TYPED[low]] = scalar(value) if low == "count" else value
            else:
                rest[_line_param("gres.conf", key, "line", family, line, "gres.conf")] = scalar(value)
        if "name" not in entry:
            raise ImportProblem(line.file, line.line, "a gres.conf line without Name= cannot be expressed")
        if rest:
            entry["params"] = rest
        items.append(entry)
        comments.put(items, len(items) - 1, line, 6)
    if items:
        gres["lines"] = items
    return gres


def convert_cgroup(lines: list[ConfLine], family: str | None, warnings: list[str]) -> CommentedMap:
    """The `cgroup:` mapping of cgroup.conf lines, in their order."""
    cgroup = CommentedMap()
    extra = CommentedMap()
    comments = _Comments()
    for line in lines:
        for key, value in line.pairs:
            name = _known("cgroup.conf", key, "global", family, line, warnings)
            (cgroup if name else extra)[name or key] = scalar(value)
            if name and line.pairs[0][0] == key:
                comments.put(cgroup, name, line, 4)
    if extra:
        cgroup["extra"] = extra
    return cgroup
