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
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import hostlist

Texts = Mapping[str, str]
Source = str | Path | Texts

_KEYVALUE = re.compile(r'\s*([A-Za-z0-9_.]+)\s*([-*+/]?)=\s*(?:"([^"]*)"|(\S+))(?=\s|$)')
_INCLUDE = re.compile(r"include\s", re.IGNORECASE)
_RECORD_KEYS = {"nodename", "partitionname", "nodeset", "downnodes", "frontendname"}
_LIST_GLOBALS = {"slurmctldhost"}
_BOOL_TRUE = {"yes", "up", "true", "1"}
_BOOL_FALSE = {"no", "down", "false", "0"}
_PARTITION_BOOLEANS = {"default", "disablerootjobs", "exclusiveuser", "hidden", "lln", "rootonly",
                       "reqresv", "powerdownonidle", "exclusivetopo"}
_PARTITION_ALL_MEANS_UNSET = {"allowaccounts", "allowgroups", "allowqos", "allocnodes"}
_NOT_FROM_DEFAULT = {"nodehostname", "nodeaddr", "bcastaddr"}
_CGROUP_BOOLEANS = {"cgroupautomount", "constraincores", "constraindevices", "constrainkmemspace",
                    "constrainramspace", "constrainswapspace", "taskaffinity", "signalchildrenprocesses",
                    "ignoresystemd", "ignoresystemdonfailure", "enablecontrollers"}
_GRES_CASING = {k.lower(): k for k in ("NodeName", "Name", "Type", "File", "Count", "Cores", "Links",
                                       "Flags", "AutoDetect", "MultipleFiles")}
_GRES_ALIASES = {"cpus": "cores", "files": "file"}


class SlurmConfError(ValueError):
    """A configuration text Slurm would reject; the message starts with ``file:line:``."""


@dataclass(frozen=True)
class Line:
    """One logical line (continuations joined, comment cut, escapes removed)."""

    file: str
    number: int
    text: str


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


@dataclass
class GresMeaning:
    """The meaning of a gres.conf: global AutoDetect and one normalised line per node and device."""

    autodetect: str | None = None
    lines: frozenset[str] = frozenset()


# ---------------------------------------------------------------- reading lines


def _strip_comment(raw: str) -> str:
    backslashes = 0
    for i, ch in enumerate(raw):
        if ch == "#" and backslashes % 2 == 0:
            return raw[:i]
        backslashes = backslashes + 1 if ch == "\\" else 0
    return raw


def _continues(text: str) -> tuple[str, bool]:
    body = text.rstrip()
    count = len(body) - len(body.rstrip("\\"))
    if count % 2 == 1:
        return body[:-1], True
    return text, False


def _unescape(text: str) -> str:
    return re.sub(r"\\(.?)", r"\1", text)


def logical_lines(text: str, file: str) -> Iterator[Line]:
    """The logical lines of one file's text, as Slurm's _get_next_line builds them."""
    pending = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        if not pending:
            start = number
        piece, more = _continues(_strip_comment(raw))
        pending += piece
        if more:
            continue
        yield Line(file, start, _unescape(pending))
        pending = ""
    if pending:
        yield Line(file, start, _unescape(pending))


class _Reader:
    """Reads a config file and its includes from a directory or from a dict of texts."""

    def __init__(self, source: Source, main: str) -> None:
        self.texts: Texts | None = None
        if isinstance(source, Mapping):
            self.texts = source
            self.base = Path(".")
            self.main = main
        else:
            path = Path(source)
            self.base, self.main = (path.parent, path.name) if path.is_file() else (path, main)
        self.files: list[str] = []

    def exists(self, name: str) -> bool:
        if self.texts is not None:
            return name in self.texts
        return (self.base / name).is_file()

    def read(self, name: str, where: str) -> str:
        self.files.append(name)
        if self.texts is not None:
            if name in self.texts:
                return self.texts[name]
            if Path(name).name in self.texts:
                return self.texts[Path(name).name]
            raise SlurmConfError(f"{where}: included file {name!r} is not among the texts")
        path = Path(name) if Path(name).is_absolute() else self.base / name
        try:
            return path.read_text()
        except OSError as err:
            raise SlurmConfError(f"{where}: cannot read {path}: {err.strerror}") from err

    def lines(self, name: str, cluster: Mapping[str, str | tuple[str, ...]], where: str = "") -> Iterator[Line]:
        """Logical lines of NAME with its includes spliced in where they stand."""
        text = self.read(name, where or name)
        for line in logical_lines(text, name):
            if _INCLUDE.match(line.text):
                target = line.text.split()[1] if len(line.text.split()) > 1 else ""
                if not target:
                    raise SlurmConfError(f"{line.file}:{line.number}: Include without a file name")
                if "%c" in target:
                    cname = cluster.get("clustername")
                    if not isinstance(cname, str):
                        raise SlurmConfError(f"{line.file}:{line.number}: %c in Include before ClusterName")
                    target = target.replace("%c", cname.lower())
                if not Path(target).is_absolute():
                    target = str(Path(name).parent / target) if Path(name).parent != Path(".") else target
                yield from self.lines(target, cluster, f"{line.file}:{line.number}")
            else:
                yield line


def _pairs(line: Line, text: str | None = None) -> list[tuple[str, str]]:
    """Every key=value of TEXT (default: the whole line); anything else left over is an error."""
    rest = line.text if text is None else text
    pairs: list[tuple[str, str]] = []
    while True:
        match = _KEYVALUE.match(rest)
        if not match:
            break
        key, op, quoted, bare = match.groups()
        if op:
            raise SlurmConfError(f"{line.file}:{line.number}: operator '{op}=' is not supported here")
        pairs.append((key.lower(), quoted if quoted is not None else bare))
        rest = rest[match.end():]
    if rest.strip():
        raise SlurmConfError(f"{line.file}:{line.number}: cannot parse {rest.strip()!r}")
    return pairs


# ---------------------------------------------------------------- normalising values


def expand(names: str) -> list[str]:
    """Expand a Slurm hostlist expression (white space counts as a comma)."""
    names = ",".join(names.split())
    return list(hostlist.expand_hostlist(names)) if names else []


def _bool(value: str) -> str:
    low = value.lower()
    if low in _BOOL_TRUE:
        return "YES"
    if low in _BOOL_FALSE:
        return "NO"
    return value


def _sorted_list(value: str) -> str:
    return ",".join(sorted(v for v in value.split(",") if v))


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
        params["feature"] = _sorted_list(feature)
    if "gres" in params:
        params["gres"] = _sorted_list(params["gres"])
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
            value = _bool(value)
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
    reader = _Reader(source, main)
    meaning = SlurmMeaning()
    node_default: dict[str, str] = {}
    part_default: dict[str, str] = {}
    node_lines: list[tuple[Line, str, dict[str, str]]] = []
    raw_partitions: dict[str, dict[str, str]] = {}
    raw_nodesets: dict[str, dict[str, str]] = {}
    duplicates_p: list[str] = []

    for line in reader.lines(reader.main, meaning.globals):
        match = _KEYVALUE.match(line.text)
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
        params = dict(_pairs(line, line.text[match.end():]))
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


# ---------------------------------------------------------------- gres.conf and cgroup.conf


def _cores(value: str) -> str:
    """Canonical core list: '0-2,5' and '5,0,1,2' both become '0,1,2,5'."""
    numbers = sorted({int(name[1:]) for name in expand(f"c[{value}]")})
    return ",".join(str(n) for n in numbers)


def _gres_entries(node: str | None, params: dict[str, str]) -> Iterator[str]:
    base = {_GRES_ALIASES.get(k, k): v for k, v in params.items()}
    if "cores" in base:
        base["cores"] = _cores(base["cores"])
    if "flags" in base:
        base["flags"] = _sorted_list(base["flags"])
    if "autodetect" in base:
        base["autodetect"] = base["autodetect"].lower()
    files = expand(base.pop("file")) if "file" in base else []
    if files and "multiplefiles" not in base:
        if base.get("count") in (None, str(len(files))):
            base.pop("count", None)
        variants = [{**base, "file": f} for f in files]
    else:
        if files:
            base["multiplefiles"] = ",".join(files)
        variants = [base]
    for item in variants:
        fields = [f"NodeName={node or '*'}"]
        fields += [f"{_GRES_CASING.get(k, k)}={item[k]}" for k in sorted(item)]
        yield " ".join(fields)


def gres_conf_meaning(source: Source, main: str = "gres.conf") -> GresMeaning:
    """Parse gres.conf (from a directory, a path or a dict of texts); a missing file means nothing."""
    reader = _Reader(source, main)
    if not reader.exists(reader.main):
        return GresMeaning()
    autodetect: str | None = None
    lines: set[str] = set()
    for line in reader.lines(reader.main, {}):
        pairs = _pairs(line)
        if not pairs:
            continue
        params = dict(pairs)
        first = pairs[0][0]
        if first == "autodetect" and len(pairs) == 1:
            autodetect = pairs[0][1].lower()
        elif first == "nodename":
            nodes = params.pop("nodename")
            for node in expand(nodes):
                lines.update(_gres_entries(node, params))
        elif first == "name":
            lines.update(_gres_entries(None, params))
        else:
            raise SlurmConfError(f"{line.file}:{line.number}: a gres.conf line starts with NodeName=, Name= "
                                 f"or AutoDetect=, not {first}")
    return GresMeaning(autodetect, frozenset(lines))


def cgroup_conf_meaning(source: Source, main: str = "cgroup.conf") -> dict[str, str]:
    """Parse cgroup.conf into {lower-case key: value}, booleans as yes/no; a missing file is {}."""
    reader = _Reader(source, main)
    if not reader.exists(reader.main):
        return {}
    out: dict[str, str] = {}
    for line in reader.lines(reader.main, {}):
        for key, value in _pairs(line):
            low = value.lower()
            if low in {"yes", "true"} or (key in _CGROUP_BOOLEANS and low in _BOOL_TRUE):
                value = "yes"
            elif low in {"no", "false"} or (key in _CGROUP_BOOLEANS and low in _BOOL_FALSE):
                value = "no"
            out[key] = value
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
