"""Desired-state schema: what an admin writes in the YAML files of a desired-state repo."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    PrivateAttr,
    TypeAdapter,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from reconciler import params as slurm_params
from reconciler.common import hostlist
from reconciler.model import netnames, values
from reconciler.model.bounds import (
    U16_MAX,
    U32_MAX,
    CheckInterval,
    CheckTimeout,
    GateTimeout,
    Soak,
    count,
    duration_between,
)
from reconciler.model.bounds import parse_duration as parse_duration  # re-exported: the schema's duration reader
from reconciler.model.packages import PackageManager, PackageMap
from reconciler.model.slurm_upgrade import SlurmUpgrade
from reconciler.model.upgrade import Upgrade
from reconciler.model.values import (
    EnrootUri,
    ExportClient,
    ExportOption,
    ExportPath,
    FstabField,
    GresWord,
    MountOption,
    MultilineText,
    NameToken,
    SlurmPath,
    SlurmStr,
    SlurmWord,
    Text,
)

SlurmScalar = str | int | float | bool

SLURM_VERSION_FAMILIES = ("20.11", "21.08", "22.05", "23.02", "23.11", "24.05", "24.11", "25.05", "25.11")

_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*([KMGT]i?)?B?$", re.IGNORECASE)
_MODE = re.compile(r"^0?[0-7]{3,4}$")


class Strict(BaseModel):
    """Base of every schema model: unknown keys are errors; no string anywhere holds a control character."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)

    # The safety net under the per-field types: every string and mapping key of every field, except the
    # fields listed in `_multiline` (file content), is free of control and invisible characters.
    @field_validator("*", mode="after")
    @classmethod
    def _no_control_chars(cls, value: Any, info: Any) -> Any:
        return values.check_strings(value, values.MULTILINE_OK if info.field_name in _MULTILINE else "")


_MULTILINE = frozenset({"content", "match", "replace"})


def _absolute(path: str) -> str:
    return values.clean_abs_path(path)  # absolute and already normalised: nothing is normalised silently


def _hostlist_expr(expr: str) -> str:
    _node_names(expr)
    return expr


@lru_cache(maxsize=4096)
def _node_names(expr: str) -> None:
    """Every name of a hostlist follows Slurm's NodeName rules (expansion bounded first; checked once per text)."""
    hostlist.expand(expr)  # raises HostlistError (a ValueError) with the reason
    for item in hostlist.split_top_level(expr.strip()):
        # the names of an item differ only in the digits of its groups: its longest name stands for them all
        netnames.node_name(hostlist.longest_name(item))


_SshHost = Annotated[str, AfterValidator(netnames.host_template)]
_SshUser = Annotated[str, AfterValidator(netnames.user)]
_SshJump = Annotated[str, AfterValidator(netnames.proxy_jump)]
_SshFile = Annotated[str, AfterValidator(netnames.local_path)]


# Checked wherever used (slurm.conf paths, check mounts, ...), not only where a field validator says so.
AbsPath = Annotated[str, AfterValidator(_absolute), Field(description="An absolute path on the node")]
SlurmAbsPath = Annotated[SlurmPath, Field(description="An absolute path on the node")]
Hostlist = Annotated[str, Field(description="A Slurm hostlist expression, e.g. dgx[01-16]")]


def parse_size(value: str | int) -> int:
    """Turn `8`, `1M`, `1GiB` or `8G` into bytes (powers of 1024, as nccl-tests uses)."""
    if isinstance(value, int):
        return value
    match = _SIZE.match(value.strip())
    if not match:
        raise ValueError(f"not a size: {value!r} (use e.g. 8, 64K, 1M, 1G)")
    unit = (match.group(2) or "").upper().rstrip("I")
    return int(float(match.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[unit])


# ---------------------------------------------------------------- cluster / slurm.conf


# slurm.conf keys that have a schema key of their own (or are lines of their own, not parameters).
_OWN_KEYS = {"nodename": "cluster.node_sets", "partitionname": "cluster.partitions", "clustername": "cluster.name",
             "slurmctldhost": "cluster.controllers", "controlmachine": "cluster.controllers",
             "controladdr": "cluster.controllers (name(address))", "backupcontroller": "cluster.controllers",
             "backupaddr": "cluster.controllers (name(address))", "nodeset": "the partitions' node lists",
             "downnodes": "node_sets[].State", "include": "(files are merged into one)"}


def _param_key(file: str, scope: str) -> Any:
    """An Annotated str type: a key of that file and scope, known to the parameter tables (any case)."""
    def check(key: str) -> str:
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_.]*", key):
            raise ValueError(f"not a {file} key: {key!r}")
        if file == "slurm.conf" and scope == "global" and key.lower() in _OWN_KEYS:
            raise ValueError(f"{key} is not set here: use {_OWN_KEYS[key.lower()]}")
        slurm_params.resolve(file, key, None, scope)  # UnknownParameter (a ValueError) says "did you mean"
        return key
    return Annotated[str, AfterValidator(check)]


SlurmConfKey = _param_key("slurm.conf", "global")
CgroupConfKey = _param_key("cgroup.conf", "global")


class ParamMap(BaseModel):
    """Parameters written directly as keys, in the order written; `extra` for keys the tables do not know."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    FILE: ClassVar[str] = ""
    extra: dict[str, SlurmScalar] = Field(
        default_factory=dict, description="Site-specific plugin keys that no Slurm release documents")

    @model_validator(mode="before")
    @classmethod
    def _one_spelling(cls, data: Any) -> Any:
        if isinstance(data, dict):
            seen: dict[str, str] = {}
            for key in data:
                if key != "extra" and str(key).lower() in seen:
                    raise ValueError(f"{key} and {seen[str(key).lower()]} are the same parameter (keys are "
                                     f"case-insensitive, as in Slurm)")
                seen[str(key).lower()] = str(key)
        return data

    @field_validator("extra")
    @classmethod
    def _extra_keys(cls, value: dict[str, SlurmScalar]) -> dict[str, SlurmScalar]:
        for key in value:
            if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_.]*", key):
                raise ValueError(f"not a {cls.FILE} key: {key!r}")
            if slurm_params.lookup(cls.FILE, key) is not None:
                raise ValueError(f"{key} is a known {cls.FILE} parameter: set it directly, not under extra")
        values.check_slurm_mapping(value)
        return value

    def written(self) -> dict[str, SlurmScalar]:
        """The known parameters as written (original spelling), in the order written."""
        return dict(self.__pydantic_extra__ or {})

    def items(self) -> list[tuple[str, SlurmScalar]]:
        """Every parameter to render: known ones in Slurm's spelling and the order written, then `extra` sorted."""
        known = [(_canonical(self.FILE, key), value) for key, value in self.written().items()]
        return known + sorted(self.extra.items())

    def get(self, name: str, default: SlurmScalar | None = None) -> SlurmScalar | None:
        """A parameter's value by name (any case), or the default."""
        for key, value in self.items():
            if key.lower() == name.lower():
                return value
        return default


def _canonical(file: str, key: str) -> str:
    param = slurm_params.lookup(file, key)
    return param.name if param else key


class SlurmConfParams(ParamMap):
    """Global slurm.conf parameters, written as keys (`MessageTimeout: 25`); nothing is rendered unless set."""

    FILE: ClassVar[str] = "slurm.conf"
    __pydantic_extra__: dict[SlurmConfKey, SlurmScalar] = Field(init=False)  # type: ignore[valid-type]


class GPUs(Strict):
    """GPUs of each node in a node set."""

    count: count(1, 128)  # type: ignore[valid-type]
    type: GresWord | None = Field(default=None, description="GRES type, e.g. h100, h200, a100")


class NodeSet(Strict):
    """A `NodeName=` line: nodes with identical hardware."""

    nodes: Hostlist
    cpus: int | None = Field(default=None, ge=1, le=U16_MAX, alias="CPUs")
    boards: int | None = Field(default=None, ge=1, le=U16_MAX, alias="Boards")
    sockets: int | None = Field(default=None, ge=1, le=U16_MAX, alias="Sockets")
    cores_per_socket: int | None = Field(default=None, ge=1, le=U16_MAX, alias="CoresPerSocket")
    threads_per_core: int | None = Field(default=None, ge=1, le=U16_MAX, alias="ThreadsPerCore")
    real_memory: int | None = Field(default=None, ge=1, alias="RealMemory", description="MiB")
    features: list[SlurmWord] = Field(default_factory=list, alias="Features")
    gpus: GPUs | None = None
    weight: int | None = Field(default=None, ge=0, le=U32_MAX, alias="Weight")
    state: SlurmWord | None = Field(default=None, alias="State", description="e.g. CLOUD, FUTURE")
    params: dict[str, SlurmScalar] = Field(default_factory=dict, description="Other NodeName= parameters")

    _check_nodes = field_validator("nodes")(lambda cls, v: _hostlist_expr(v))
    _check_params = field_validator("params")(lambda cls, v: values.check_slurm_mapping(v))


class Partition(Strict):
    """A `PartitionName=` line."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    nodes: Hostlist | None = Field(default=None, description="None: a partition with no nodes (yet)")
    default: bool | None = Field(default=None, description="Default=YES (true) or Default=NO (false)")
    max_time: str | None = Field(default=None, alias="MaxTime", description="UNLIMITED or [d-]h:m:s / minutes")
    state: Literal["UP", "DOWN", "DRAIN", "INACTIVE"] | None = Field(default=None, alias="State")
    params: dict[str, SlurmScalar] = Field(default_factory=dict, description="Other PartitionName= parameters")

    _check_nodes = field_validator("nodes")(lambda cls, v: v if v is None else _hostlist_expr(v))
    _check_params = field_validator("params")(lambda cls, v: values.check_slurm_mapping(v))

    @field_validator("max_time")
    @classmethod
    def _max_time(cls, value: str | None) -> str | None:
        if value is None:
            return value
        text = str(value)
        if text.upper() in ("UNLIMITED", "INFINITE") or re.fullmatch(r"(\d+-)?\d+(:\d+){0,2}", text):
            return text
        raise ValueError(f"MaxTime must be UNLIMITED, minutes, or [days-]hours:minutes:seconds, got {text!r}")


class GresLine(Strict):
    """An explicit gres.conf line."""

    nodes: Hostlist | None = None
    name: GresWord = "gpu"
    type: GresWord | None = None
    file: SlurmStr | None = Field(default=None, description="Device files, e.g. /dev/nvidia[0-7]")
    count: int | SlurmWord | None = Field(default=None, description="e.g. 8, or 10G for shards/MPS")
    cores: SlurmStr | None = None
    links: SlurmStr | None = None
    params: dict[str, SlurmScalar] = Field(default_factory=dict, description="Other gres.conf line parameters")

    _check_params = field_validator("params")(lambda cls, v: values.check_slurm_mapping(v))

    _check_nodes = field_validator("nodes")(lambda cls, v: v if v is None else _hostlist_expr(v))


class DownNodes(Strict):
    """A `DownNodes=` line: nodes Slurm starts in a down state, with the reason."""

    nodes: Hostlist
    state: str | None = Field(default=None, alias="State", description="DOWN, DRAIN, FAIL, FAILING or FUTURE")
    reason: str | None = Field(default=None, alias="Reason")

    _check_nodes = field_validator("nodes")(lambda cls, v: _hostlist_expr(v))


class GresConf(Strict):
    """gres.conf: AutoDetect (e.g. nvml) and/or explicit lines."""

    auto_detect: Literal["nvml", "nvidia", "rsmi", "oneapi", "nrt", "off"] | None = None
    lines: list[GresLine] = Field(default_factory=list)


class CgroupConf(ParamMap):
    """cgroup.conf parameters, written as keys (`ConstrainCores: true`), rendered in the order written."""

    FILE: ClassVar[str] = "cgroup.conf"
    __pydantic_extra__: dict[CgroupConfKey, SlurmScalar] = Field(init=False)  # type: ignore[valid-type]

    _check_extra = field_validator("extra")(lambda cls, v: values.check_slurm_mapping(v))


class HealthCheck(Strict):
    """Slurm's own HealthCheckProgram (e.g. NHC)."""

    program: SlurmAbsPath
    interval: int = Field(default=300, ge=0, le=U16_MAX, description="seconds")
    node_state: SlurmWord | None = Field(default=None, description="e.g. ANY, IDLE, CYCLE")

    _abs = field_validator("program")(lambda cls, v: _absolute(v))


class Cluster(Strict):
    """The Slurm cluster: slurm.conf, gres.conf and cgroup.conf in one place."""

    name: str = Field(pattern=r"^[a-z0-9_-]+$", description="ClusterName (lower case, as Slurm wants)")
    slurm_version: Literal[SLURM_VERSION_FAMILIES] = Field(  # type: ignore[valid-type]
        description="Slurm version family; decides reconfigure vs restart"
    )
    controllers: list[str] = Field(min_length=1, description="SlurmctldHost entries, primary first: a node "
                                   "name, or name(address)")
    slurm_conf: SlurmConfParams = Field(default_factory=SlurmConfParams)
    node_sets: list[NodeSet] = Field(default_factory=list)
    partitions: list[Partition] = Field(default_factory=list)
    down_nodes: list[DownNodes] = Field(default_factory=list)
    gres: GresConf | None = None
    cgroup: CgroupConf | None = None
    prolog: AbsPath | None = None
    epilog: AbsPath | None = None
    _slurm_paths = field_validator("prolog", "epilog")(lambda cls, v: values.slurm_value(v))
    health_check: HealthCheck | None = None
    config_dir: AbsPath = Field(default="/etc/slurm", description="Where slurm.conf lives on every node")
    mode: Literal["files", "configless"] = Field(
        default="files", description="files: slurm.conf, gres.conf and cgroup.conf on every Slurm node; "
        "configless: only on the controllers and nodes outside the node sets (SlurmctldParameters gets "
        "enable_configless), slurmd on the node sets' nodes is started with --conf-server (a systemd "
        "drop-in or a supervisord program) and any local slurm.conf there is removed")

    _abs = field_validator("prolog", "epilog", "config_dir")(lambda cls, v: v if v is None else _absolute(v))

    @field_validator("controllers")
    @classmethod
    def _controllers(cls, value: list[str]) -> list[str]:
        for entry in value:
            match = re.fullmatch(r"([^()]+)(?:\(([^()]+)\))?", entry)
            if not match:
                raise ValueError(f"a controller is a node name or name(address), got {entry!r}")
            try:
                netnames.node_name(match.group(1))
                if match.group(2):
                    netnames.host(match.group(2))
            except ValueError as exc:
                raise ValueError(f"a controller is a node name or name(address): {exc}") from None
        return value

    @property
    def controller_names(self) -> list[str]:
        """The controllers' node names (any `(address)` removed), primary first."""
        return [entry.split("(", 1)[0] for entry in self.controllers]


# ---------------------------------------------------------------- inventory


class ServiceManager(Strict):
    """How services are started on a node."""

    type: Literal["systemd", "supervisord", "custom"] = "systemd"
    start: str | None = Field(default=None, description="custom: command with {service}")
    stop: str | None = None
    restart: str | None = None
    status: str | None = Field(default=None, description="custom: exits 0 when {service} runs")

    @model_validator(mode="after")
    def _custom_needs_commands(self) -> ServiceManager:
        if self.type == "custom" and not (self.start and self.stop and self.restart and self.status):
            raise ValueError("service manager 'custom' needs start, stop, restart and status commands")
        return self


Role = Literal["controller", "login", "compute", "nfs-server", "bastion", "storage"]


class Node(Strict):
    """One node, or a hostlist of alike nodes, and how to reach it over SSH."""

    name: Hostlist
    host: _SshHost | None = Field(default=None, description="Address or ssh_config alias; '{name}' is replaced")
    port: int | None = Field(default=None, ge=1, le=65535)
    user: _SshUser | None = None
    identity_file: _SshFile | None = None
    proxy_jump: _SshJump | None = Field(default=None, description="Bastion, [user@]host[:port]")
    roles: list[Role] = Field(default_factory=list)
    service_manager: ServiceManager | None = None
    drain: SlurmStr | None = Field(default=None, description="Keep this node drained with this reason")
    package_manager: PackageManager | None = Field(default=None, description="apt or dnf; unset: by the node's "
                                                   "facts (dpkg-query present: apt, else rpm: dnf)")

    _check_name = field_validator("name")(lambda cls, v: _hostlist_expr(v))


class SSHGateway(Strict):
    """A ClusterShell gateway: the node that relays commands to the nodes behind it (tree mode)."""

    name: _SshHost = Field(description="The gateway node (an ssh_config alias or address), reached directly")
    nodes: Hostlist = Field(description="The nodes reached through this gateway, e.g. gpu[001-128]")

    _check_nodes = field_validator("nodes")(lambda cls, v: _hostlist_expr(v))


class SSHDefaults(Strict):
    """SSH settings shared by every node (a node's own keys win)."""

    config: _SshFile | None = Field(default=None, description="An ssh_config file (relative to the repo)")
    known_hosts: _SshFile | None = Field(default=None, description="known_hosts file (relative to the repo)")
    host_key_policy: Literal["reject", "accept-new"] = "reject"
    user: _SshUser = "root"
    port: int = Field(default=22, ge=1, le=65535)
    identity_file: _SshFile | None = None
    proxy_jump: _SshJump | None = None
    connect_timeout: int = Field(default=10, ge=1, le=600)
    command_timeout: int = Field(default=120, ge=1, le=86400)
    forks: int = Field(default=64, ge=1, le=4096)
    service_manager: ServiceManager = Field(default_factory=ServiceManager)
    gateways: list[SSHGateway] = Field(
        default_factory=list,
        description="ClusterShell tree mode: nodes behind a gateway are reached through it (OpenSSH from the "
        "gateway, same ssh_config, known_hosts and identity paths there), every other node directly")

    @model_validator(mode="after")
    def _one_gateway_per_node(self) -> SSHDefaults:
        seen: dict[str, str] = {}
        for gateway in self.gateways:
            for node in hostlist.expand(gateway.nodes):
                if node in seen:
                    raise ValueError(f"node {node} is behind two gateways ({seen[node]}, {gateway.name})")
                if node == gateway.name:
                    raise ValueError(f"gateway {gateway.name} cannot be behind itself")
                seen[node] = gateway.name
        return self


# ---------------------------------------------------------------- storage, images, patches


class NfsExport(Strict):
    """A line of /etc/exports on an NFS server node."""

    server: NameToken
    path: ExportPath
    clients: list[ExportClient] = Field(min_length=1, description="Client specs: host, IP, CIDR, @netgroup, *")
    options: list[ExportOption] = Field(default_factory=lambda: ["rw", "sync", "no_subtree_check"])

    _abs = field_validator("path")(lambda cls, v: _absolute(v))


class Mount(Strict):
    """An /etc/fstab entry, mounted on a set of nodes."""

    # `type` comes first: the source and options are checked by the rules of the type.
    type: str = Field(default="nfs", pattern=r"^[a-z0-9.]+$", description="nfs, nfs4, lustre, ...")
    source: FstabField = Field(description="server:/path for NFS, MGSNID[:MGSNID...]:/fsname for Lustre "
                               "(e.g. 10.0.0.5@tcp:/lustrefs), or a device")
    mountpoint: AbsPath
    options: list[MountOption] = Field(default_factory=lambda: ["defaults"], validate_default=True,
                                       description="lustre: known options only, _netdev required, one of "
                                       "flock/localflock/noflock")
    nodes: Hostlist
    dump: int = 0
    passno: int = 0

    _abs = field_validator("mountpoint")(lambda cls, v: _absolute(v))
    _check_nodes = field_validator("nodes")(lambda cls, v: _hostlist_expr(v))

    @field_validator("source")
    @classmethod
    def _source(cls, value: str, info: ValidationInfo) -> str:
        return values.lustre_source(value) if info.data.get("type") == "lustre" else value

    @field_validator("options")
    @classmethod
    def _options(cls, value: list[str], info: ValidationInfo) -> list[str]:
        return values.lustre_options(value) if info.data.get("type") == "lustre" else value

    def nfs_server(self) -> tuple[str, str] | None:
        """Return (server, path) when the source is `server:/path` of an NFS type."""
        if self.type.startswith("nfs") and ":" in self.source:
            server, _, path = self.source.partition(":")
            return server, path
        return None


class Storage(Strict):
    """Shared storage: NFS exports and mounts (NFS, Lustre, ...)."""

    exports: list[NfsExport] = Field(default_factory=list)
    mounts: list[Mount] = Field(default_factory=list)


class Image(Strict):
    """An enroot container image kept as a squashfs file on shared storage."""

    uri: EnrootUri | None = Field(default=None, description="e.g. docker://nvcr.io#nvidia/pytorch:24.04-py3; "
                                  "unset (an image adopted by `reconciler import`): kept as present, never "
                                  "imported (a missing file is an error to fix)")
    path: AbsPath = Field(description="Target .sqsh file")
    import_on: NameToken = Field(description="The node that runs `enroot import`")

    _abs = field_validator("path")(lambda cls, v: _absolute(v))


class Patch(Strict):
    """A script patch: a match -> replace edit, or a whole managed file."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    path: AbsPath
    nodes: Hostlist
    match: MultilineText | None = None
    replace: MultilineText | None = None
    content: MultilineText | None = Field(default=None, description="Whole file content (instead of match/replace)")
    mode: str | None = Field(default=None, description="Octal, e.g. '0755'")
    owner: NameToken | None = None
    group: NameToken | None = None
    validate_cmd: str | None = Field(
        default=None, alias="validate",
        description="Checks the new file before install; %s is its temp path, e.g. sh -n %s")

    _abs = field_validator("path")(lambda cls, v: _absolute(v))
    _check_nodes = field_validator("nodes")(lambda cls, v: _hostlist_expr(v))

    @field_validator("validate_cmd")
    @classmethod
    def _validate_has_placeholder(cls, value: str | None) -> str | None:
        if value is not None and "%s" not in value:
            raise ValueError("validate needs %s where the new file's path goes, e.g. 'sh -n %s'")
        return value

    @field_validator("mode", mode="before")
    @classmethod
    def _mode(cls, value: Any) -> str | None:
        if value is None:
            return None
        text = str(value)  # `mode: 0755` reaches us as the int 755 under YAML 1.2: read its digits as octal
        if not _MODE.match(text):
            raise ValueError(f"mode must be octal like '0755', got {value!r}")
        return text.zfill(4)

    @model_validator(mode="after")
    def _one_kind(self) -> Patch:
        edit = self.match is not None or self.replace is not None
        if edit and self.content is not None:
            raise ValueError("a patch has either match/replace or content, not both")
        if edit and (self.match is None or self.replace is None):
            raise ValueError("a match/replace patch needs both match and replace")
        if not edit and self.content is None:
            raise ValueError("a patch needs match/replace or content")
        return self


# ---------------------------------------------------------------- managed files and services

# Names a templated file may use, as `{name}` (literal braces are written `{{` and `}}`); README documents them.
TEMPLATE_VARIABLES = {
    "node": "the node's name (gpu01)",
    "host": "the address or ssh_config alias the reconciler reaches the node by",
    "cluster": "cluster.name",
    "controller": "the primary Slurm controller's node name",
    "config_dir": "cluster.config_dir (/etc/slurm)",
    "roles": "the node's roles, comma-separated (compute,login)",
}
_SERVICE = r"[A-Za-z0-9_][A-Za-z0-9_.@:+-]*"
_NOTIFY = re.compile(rf"(?:(reload)|(restart)) ({_SERVICE})(?(2)( rolling)?)|scontrol reconfigure")


def template_fields(text: str) -> list[str]:
    """The `{name}` fields of a template, checked: only TEMPLATE_VARIABLES, no format spec, conversion,
    attribute or index; raises ValueError naming the first bad one (a lone `{` or `}` included)."""
    import string

    names = []
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise ValueError(f"template: {exc} (write a literal brace as {{{{ or }}}})") from None
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if name not in TEMPLATE_VARIABLES or spec or conversion:
            known = ", ".join("{" + v + "}" for v in TEMPLATE_VARIABLES)
            shown = "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
            raise ValueError(f"template: unknown variable {shown} (known: {known}; write a literal brace as "
                             "{{ or }})")
        names.append(name)
    return names


def _notify_text(text: str) -> str:
    values.no_control_chars(text)
    if not _NOTIFY.fullmatch(text):
        raise ValueError(f"not a notify entry: {text!r} (use 'reload SERVICE', 'restart SERVICE', "
                         "'restart SERVICE rolling', 'scontrol reconfigure' or {command: CMD})")
    return text


class NotifyCommand(Strict):
    """A shell command run once on each node where the file changed, e.g. `sysctl --system`."""

    command: Text = Field(min_length=1, description="Shell command, run as the SSH user (root)")


def _notify(value: Any) -> str | NotifyCommand:
    """One notify entry: a string form, or {command: CMD}; one error message either way."""
    if isinstance(value, NotifyCommand):
        return value
    if isinstance(value, str):
        return _notify_text(value)
    if isinstance(value, dict):
        command = value.get("command")
        if set(value) != {"command"} or not isinstance(command, str) or not command.strip():
            raise ValueError("a notify mapping is {command: CMD} with one non-empty command string")
        values.no_control_chars(command)
        return NotifyCommand(command=command)
    raise ValueError(f"not a notify entry: {value!r}")


_NOTIFY_SCHEMA: dict[str, Any] = {"anyOf": [
    {"type": "string", "pattern": rf"^(reload {_SERVICE}|restart {_SERVICE}( rolling)?|scontrol reconfigure)$",
     "description": "'reload SERVICE', 'restart SERVICE', 'restart SERVICE rolling' (a node at a time, drained "
                    "first when jobs run on a Slurm node) or 'scontrol reconfigure' (once, on the controller)"},
    {"type": "object", "properties": {"command": {"type": "string", "description": "Shell command run once on "
                                                  "each node where the file changed, e.g. sysctl --system"}},
     "required": ["command"], "additionalProperties": False}]}
Notify = Annotated[str | NotifyCommand, PlainValidator(_notify), WithJsonSchema(_NOTIFY_SCHEMA)]


def _octal_mode(value: Any) -> str:
    text = str(value)  # `mode: 0644` reaches us as the int 644 under YAML 1.2: read its digits as octal
    if not _MODE.match(text):
        raise ValueError(f"mode must be octal like '0644', got {value!r}")
    return text.zfill(4)


def _validate_placeholder(value: str | None) -> str | None:
    if value is not None and "%s" not in value:
        raise ValueError("validate needs %s where the new file's path goes, e.g. 'sh -n %s'")
    return value


class NodeSelection(Strict):
    """Which nodes get something: a hostlist, roles, or both (a node matching either is selected)."""

    nodes: Hostlist | None = Field(default=None, description="A Slurm hostlist expression, e.g. gpu[01-16]")
    roles: list[Role] = Field(default_factory=list, description="Every node with one of these roles")

    _check_nodes = field_validator("nodes")(lambda cls, v: v if v is None else _hostlist_expr(v))

    @model_validator(mode="after")
    def _some_nodes(self) -> NodeSelection:
        if self.nodes is None and not self.roles:
            raise ValueError("say which nodes: nodes (a hostlist) and/or roles")
        return self


class ManagedFile(NodeSelection):
    """A whole file kept on a set of nodes, with what must follow when it changes."""

    path: AbsPath
    content: MultilineText | None = Field(default=None, description="The file's text (instead of source)")
    source: Text | None = Field(default=None, description="A file of this repository, relative to the YAML "
                                "file's directory (instead of content)")
    template: bool = Field(default=False, description="Replace {node}, {host}, {cluster}, {controller}, "
                           "{config_dir}, {roles}; literal braces as {{ and }}")
    mode: str = Field(default="0644", description="Octal, e.g. '0644'")
    owner: NameToken = "root"
    group: NameToken = "root"
    validate_cmd: str | None = Field(
        default=None, alias="validate",
        description="Checks the new file before install; %s is its temp path, e.g. 'visudo -cf %s'")
    notify: list[Notify] = Field(default_factory=list, description="What must follow when the file changes")
    secret: bool = Field(default=False, description="Never show the content: plans show a sha256 fingerprint "
                         "(implied by an age-encrypted source, one ending in .age)")
    _source_text: str | None = PrivateAttr(default=None)  # set by the loader from `source` (.age: when decrypted)
    _age: Any = PrivateAttr(default=None)  # an .age source as read, never decrypted: agesecrets.Encrypted

    _abs = field_validator("path")(lambda cls, v: _absolute(v))
    _mode = field_validator("mode", mode="before")(lambda cls, v: _octal_mode(v))
    _validate = field_validator("validate_cmd")(lambda cls, v: _validate_placeholder(v))

    @model_validator(mode="after")
    def _one_content(self) -> ManagedFile:
        if (self.content is None) == (self.source is None):
            raise ValueError("a file needs exactly one of content and source")
        if self.template and self.content is not None:
            template_fields(self.content)
        return self

    @model_validator(mode="after")
    def _encrypted_is_secret(self) -> ManagedFile:
        if self.encrypted:
            if not self.secret and "secret" in self.model_fields_set:
                raise ValueError("an age-encrypted source (.age) is always secret: remove `secret: false`")
            self.secret = True
        return self

    @property
    def encrypted(self) -> bool:
        """True when the source is an age-encrypted file of the repository (its name ends in .age)."""
        return self.source is not None and self.source.endswith(AGE_SUFFIX)

    def text(self) -> str | None:
        """The file's text before templating: inline content, or the source file the loader read."""
        return self.content if self.content is not None else self._source_text

    def notifications(self) -> list[tuple[str, str, bool]]:
        """Each notify entry as (kind, target, rolling): kind reload/restart/command/reconfigure."""
        out = []
        for item in self.notify:
            if isinstance(item, NotifyCommand):
                out.append(("command", item.command, False))
                continue
            match = _NOTIFY.fullmatch(item)
            assert match is not None
            if match.group(3) is None:
                out.append(("reconfigure", "scontrol reconfigure", False))
            else:
                out.append((match.group(1) or match.group(2), match.group(3), match.group(4) is not None))
        return out


AGE_SUFFIX = ".age"  # a `source:` (or munge `key_age`) ending so is age-encrypted: reconciler/desired/agesecrets.py
_AGE_RECIPIENT = re.compile(r"^age1[02-9ac-hj-np-z]{58}$")  # bech32: x25519 recipient
_SSH_RECIPIENT = re.compile(r"^ssh-ed25519 AAAAC3NzaC1lZDI1NTE5[A-Za-z0-9+/]+={0,2}( \S.*)?$")


def _age_recipient(value: str) -> str:
    """An age recipient: `age1...` (x25519, bech32, checksum checked) or an OpenSSH `ssh-ed25519 AAAA...` key."""
    import pyrage  # late: only a state with recipients pays for it

    if _AGE_RECIPIENT.match(value):
        try:
            pyrage.x25519.Recipient.from_str(value)
        except pyrage.RecipientError:
            raise ValueError("not a valid age recipient (bad bech32 checksum)") from None
        return value
    if _SSH_RECIPIENT.match(value):
        try:
            pyrage.ssh.Recipient.from_str(value)
        except pyrage.RecipientError:
            raise ValueError("not a valid ssh-ed25519 public key") from None
        return value
    raise ValueError("an age recipient is `age1...` (age-keygen, `reconciler secret keygen`) or an OpenSSH "
                     "`ssh-ed25519 AAAA...` public key")


class Secrets(Strict):
    """Who can read the repository's age-encrypted files: `reconciler secret encrypt/edit` encrypt to these."""

    recipients: list[Annotated[str, AfterValidator(_age_recipient)]] = Field(
        default_factory=list, description="Public keys: `age1...` (x25519) or `ssh-ed25519 AAAA...`; include the "
        "login node's (its age_identity) and each admin's")

    @field_validator("recipients")
    @classmethod
    def _distinct(cls, value: list[str]) -> list[str]:
        seen = [" ".join(v.split()[:2]) for v in value]
        twice = sorted({v for v in seen if seen.count(v) > 1})
        if twice:
            raise ValueError(f"recipient listed twice: {twice[0]}")
        return value


class ManagedService(NodeSelection):
    """A service's wanted state on a set of nodes (systemd or supervisord, as the node's service_manager)."""

    name: NameToken = Field(description="systemd unit or supervisord program name")
    state: Literal["running", "stopped"] = "running"
    enabled: bool | None = Field(default=None, description="Start at boot (systemd only); null: leave alone")


class PackageSet(NodeSelection):
    """Packages kept on a set of nodes (reconciler/model/packages.py: the specs; drivers/packages.py)."""

    allow_downgrade: bool = Field(default=False, description="A change to a lower version than installed is an "
                                  "error unless true")
    packages: PackageMap = Field(description="name -> present, absent, a version, a glob (570.86.*), or "
                                 "{version, hold, needs}")


# ---------------------------------------------------------------- checks


class PcieExpectation(Strict):
    """The PCIe link every GPU must have trained to."""

    gen: int | None = Field(default=None, ge=1, le=7, description="Minimum PCIe generation, e.g. 5")
    width: int | None = Field(default=None, ge=1, le=32, description="Minimum lanes, e.g. 16")


_Xid = Annotated[int, Field(ge=1, le=999)]


class GpuExpectation(Strict):
    """Expected GPUs as nvidia-smi reports them, and their health."""

    count: count(0, 128)  # type: ignore[valid-type]
    model: str | None = Field(default=None, description="Substring of the product name, e.g. H200")
    driver: str | None = Field(default=None, description="Exact or prefix, e.g. 580.")
    health: bool = Field(default=True, description="Uncorrected ECC errors, row remapping pending or failed, "
                         "retired pages pending, hardware clock slowdowns and fatal XIDs fail the node")
    max_temperature: int | None = Field(default=None, ge=1, le=150, description="Celsius, per GPU")
    pcie: PcieExpectation | None = None
    ecc: bool = Field(default=False, description="ECC mode must be enabled on every GPU")
    nvlinks: int | None = Field(default=None, ge=0, le=64, description="Active NVLink links per GPU, e.g. 18")
    nvlink_speed: float | None = Field(default=None, gt=0, le=10000, description="Minimum GB/s of each active link")
    fabric_manager: bool = Field(default=False, description="NVSwitch system: nvidia-fabricmanager running and "
                                 "every GPU's fabric registration completed")
    xid_ignore: list[_Xid] = Field(default_factory=list, description="XIDs never reported nor drained on")


class IbExpectation(Strict):
    """InfiniBand/RoCE ports a node must have up (ACTIVE, LinkUp), from /sys/class/infiniband."""

    ports: int = Field(ge=0, le=64, description="How many ports must be up (of DEVICES when given)")
    rate: float | None = Field(default=None, gt=0, le=10000, description="Minimum Gb/s of each port, e.g. 400")
    devices: list[NameToken] = Field(default_factory=list, description="Only these HCAs, e.g. [mlx5_0, mlx5_1]")
    link_layer: Literal["InfiniBand", "Ethernet"] | None = Field(default=None, description="Ethernet for RoCE")


class DcgmCheck(Strict):
    """DCGM's diagnostic (`dcgmi diag -r LEVEL`) when dcgmi is installed; it loads the GPUs, so not every time."""

    level: int = Field(default=1, ge=1, le=4)
    on_schedule: bool = Field(default=False, description="Every interval too, not only to retest a drained node")
    timeout: CheckTimeout = "15m"  # type: ignore[valid-type]


class NhcCheck(Strict):
    """LBNL NHC, run with the site's own rules; its verdict is one more item."""

    command: str = Field(default="nhc", pattern=r"^/?[A-Za-z0-9_./-]+$")
    timeout: CheckTimeout = "5m"  # type: ignore[valid-type]


class NodeCheck(Strict):
    """An NHC-style check run over SSH on each node."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    nodes: Hostlist
    interval: CheckInterval = "10m"  # type: ignore[valid-type]
    gpus: GpuExpectation | None = None
    mounts: list[AbsPath] = Field(default_factory=list, description="Must be mounted and writable")
    services: list[NameToken] = Field(default_factory=list, description="e.g. munge, slurmd")
    images: bool = Field(default=False, description="Enroot images of this repo must be present")
    slurm_state: list[NameToken] = Field(default_factory=list, description="Acceptable Slurm states, e.g. IDLE, MIXED")
    munge: bool = Field(default=False, description="A credential made on this node (`munge -n`) decodes on the "
                        "controller (`unmunge`) and one made there decodes here: the munge keys agree")
    infiniband: IbExpectation | None = None
    dcgm: DcgmCheck | None = None
    nhc: NhcCheck | None = None
    drain_on_fail: bool = True

    _check_nodes = field_validator("nodes")(lambda cls, v: _hostlist_expr(v))

    @field_validator("dcgm", "nhc", mode="before")
    @classmethod
    def _switch(cls, value: Any) -> Any:
        """`nhc: true` / `dcgm: true` take the defaults; false leaves the item out."""
        if value is True:
            return {}
        return None if value is False else value


_SCHEDULE_INTERVAL: TypeAdapter[Any] = TypeAdapter(duration_between(1, 30 * 86400))


def _nccl_size(value: str | int) -> int:
    size = parse_size(value)
    if not 1 <= size <= 1 << 40:
        raise ValueError(f"a message size between 1 byte and 1T, got {value!r}")
    return size


class NcclThresholds(Strict):
    """What an NCCL run must reach to pass."""

    min_busbw: float | None = Field(default=None, ge=0, le=100000, description="GB/s, for every size >= at_size")
    at_size: str | int = "1G"
    min_avg_busbw: float | None = Field(default=None, ge=0, le=100000, description="GB/s, 'Avg bus bandwidth'")
    max_wrong: int = Field(default=0, ge=0)
    regression_pct: float | None = Field(default=None, gt=0, lt=100,
                                         description="Flag a drop this far below the node's median")
    regression_window: int = Field(default=10, ge=3, le=10000)

    _size = field_validator("at_size")(lambda cls, v: (_nccl_size(v), v)[1])


class NcclCheck(Strict):
    """A periodic nccl-tests run through Slurm, or (mode local) run by each node itself over SSH, without Slurm."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    binary: str = Field(default="all_reduce_perf", description="nccl-tests binary name or absolute path")
    # One plateau size, few iterations, no validation: a quarter of a full sweep's GPU-seconds within 5 % of its
    # peak busbw (bench/README.md, section NCCL); add "-c", "1" for a run that also counts wrong elements.
    args: list[str] = Field(default_factory=lambda: ["-b", "4G", "-e", "4G", "-n", "5", "-w", "1", "-c", "0",
                                                     "-g", "1"])
    mode: Literal["single-node", "pairs", "partition", "local"] = Field(
        default="single-node", description="local: no srun; one process per node with -g ntasks_per_node x "
                                           "gpus_per_task, never drains")
    nodes: Hostlist | None = None
    partition: NameToken | None = None
    ntasks_per_node: int = Field(default=8, ge=1, le=1024)
    gpus_per_task: int = Field(default=1, ge=0, le=128)
    mpi: Literal["pmix", "pmi2", "none"] | None = "pmix"
    container_image: str | None = None
    container_mounts: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise ValueError(f"not an environment variable name: {key!r}")
        return value
    env_profile: AbsPath | None = Field(default=None, description="Script sourced first, e.g. nccl-env-profile.sh")
    schedule: str | None = Field(default=None, description="'daily HH:MM' or an interval like 6h")
    timeout: CheckTimeout = "15m"  # type: ignore[valid-type]
    only_idle: bool = True
    drain_on_fail: bool = True
    thresholds: NcclThresholds = Field(default_factory=NcclThresholds)

    _check_nodes = field_validator("nodes")(lambda cls, v: v if v is None else _hostlist_expr(v))

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, value: str | None) -> str | None:
        if value is None or re.fullmatch(r"daily ([01]\d|2[0-3]):[0-5]\d", value):
            return value
        _SCHEDULE_INTERVAL.validate_python(value)
        return value

    @model_validator(mode="after")
    def _target(self) -> NcclCheck:
        if not self.nodes and not self.partition:
            raise ValueError("an NCCL check needs nodes or partition")
        if self.mode == "local" and self.container_image:
            raise ValueError("container_image needs srun (pyxis): not available in local mode")
        return self


class Checks(Strict):
    """Health checks: node checks and NCCL runs."""

    node: list[NodeCheck] = Field(default_factory=list)
    nccl: list[NcclCheck] = Field(default_factory=list)


# ---------------------------------------------------------------- progressive rollout


_STEP = re.compile(r"^(?:[1-9]\d*|[1-9]\d?%|100%)$")


def _step(value: Any) -> str | int:
    """A wave size: a node count (int) or a percentage of the changing nodes ('25%')."""
    if isinstance(value, bool):
        raise ValueError(f"a step is a node count or a percentage like '25%', got {value!r}")
    if isinstance(value, int):
        if value < 1:
            raise ValueError(f"a step counts at least 1 node, got {value}")
        return value
    if not isinstance(value, str) or not _STEP.match(value.strip()):
        raise ValueError(f"a step is a node count or a percentage like '25%', got {value!r}")
    text = value.strip()
    return text if text.endswith("%") else int(text)


class RolloutGates(Strict):
    """What must hold after each wave before the next starts; a failing gate rolls the wave back."""

    timeout: GateTimeout = Field(default="10m", description="Each gate's time limit (a gate past it has failed)")  # type: ignore[valid-type]
    node_checks: bool = Field(default=True, description="The node checks (checks.node) of the wave's nodes")
    smoke_job: bool = Field(default=True, description="A Slurm job on exactly the wave's nodes, through a "
                            "reservation: prolog, epilog, the mounts from inside a job, a container start where "
                            "Pyxis/enroot are declared")
    smoke_mounts: list[AbsPath] | None = Field(default=None, description="Mount points the smoke job checks "
                                               "(default: every storage.mounts mount point of the wave's nodes)")
    smoke_image: str | None = Field(default=None, description="An enroot/Pyxis image the smoke job starts "
                                    "(`srun --container-image`); unset: no container start")
    nccl: bool = Field(default=False, description="The NCCL checks on the wave when it has two or more nodes")


class Rollout(Strict):
    """How a commit reaches the nodes: all at once, or in waves gated by health, rolled back when a gate fails."""

    waves: Literal["progressive", "all"] = Field(default="progressive", description="progressive: a canary, then "
                                                 "the steps; all: every node at once, no gates (one shot)")
    canary: str | int = Field(default=1, description="The first wave: a node count, a percentage, or a hostlist "
                              "of canary nodes (those of them that change)")
    steps: list[str | int] = Field(default_factory=lambda: list[str | int](["50%", "100%"]),
                                   description="Later waves: cumulative sizes (counts or percentages of the "
                                   "changing nodes); the last wave always takes every node left")
    soak: Soak = Field(default="30s", description="Wait after a wave's gates pass; a wave node "  # type: ignore[valid-type]
                       "drained by Slurm meanwhile (Prolog/Epilog error) fails the wave")
    gates: RolloutGates = Field(default_factory=RolloutGates)
    upgrade: Upgrade | None = Field(default=None, description="Changes that need a reboot or a driver reload go "
                                    "node by node (reconciler/model/upgrade.py); unset: they are held")
    slurm_upgrade: SlurmUpgrade = Field(default_factory=SlurmUpgrade, description="A Slurm upgrade's own steps "
                                        "(reconciler/model/slurm_upgrade.py): the database backup before slurmdbd")

    @field_validator("canary", mode="before")
    @classmethod
    def _canary(cls, value: Any) -> str | int:
        if isinstance(value, str) and not value.strip().endswith("%") and not value.strip().isdigit():
            return _hostlist_expr(value)
        return _step(value)

    @field_validator("steps", mode="before")
    @classmethod
    def _steps(cls, value: Any) -> list[str | int]:
        if not isinstance(value, list) or not value:
            raise ValueError("steps is a non-empty list of node counts or percentages, e.g. ['50%', '100%']")
        steps = [_step(item) for item in value]
        for kind in (int, str):  # cumulative sizes: counts and percentages each never shrink
            sizes = [int(str(s).rstrip("%")) for s in steps if isinstance(s, kind)]
            if sizes != sorted(sizes):
                raise ValueError(f"steps are cumulative and never shrink, got {value}")
        return steps


# ---------------------------------------------------------------- munge


class Munge(Strict):
    """Where the munge key comes from: the login node (a file, a variable) or an age-encrypted file of the
    repository decrypted there; exactly one source."""

    key_file: AbsPath | None = Field(default=None, description="A file on the machine running the reconciler "
                                     "(outside the desired-state repository), e.g. /etc/reconciler/munge.key")
    key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
                                description="An environment variable of the reconciler holding the key in base64")
    key_age: Text | None = Field(default=None, description="An age-encrypted file of this repository (ending in "
                                 ".age, relative to the YAML file's directory), decrypted on the login node")
    _age: Any = PrivateAttr(default=None)  # key_age as read, never decrypted by the loader: agesecrets.Encrypted
    _key: bytes | None = PrivateAttr(default=None)  # key_age decrypted (agesecrets.unlock), else None

    @model_validator(mode="after")
    def _one_source(self) -> Munge:
        if sum(v is not None for v in (self.key_file, self.key_env, self.key_age)) != 1:
            raise ValueError("set exactly one of key_file and key_env (or key_age: an age-encrypted file of the "
                             "repository)")
        if self.key_age is not None and not self.key_age.endswith(AGE_SUFFIX):
            raise ValueError(f"key_age is an age-encrypted file whose name ends in {AGE_SUFFIX}")
        return self


# ---------------------------------------------------------------- Slurm accounting (sacctmgr)

_ACCT_NAME = r"^[a-z0-9_][a-z0-9_.-]{0,63}$"  # Slurm keeps account and QOS names in lower case
_USER_NAME = r"^[a-z_][a-z0-9_.-]{0,31}$"
_TRES = re.compile(r"^[a-z]+(/[A-Za-z0-9_:.-]+)?=(-1|\d+[KMGTP]?)(,[a-z]+(/[A-Za-z0-9_:.-]+)?=(-1|\d+[KMGTP]?))*$")
_WALL = re.compile(r"^(-1|UNLIMITED|\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|"
                   r"\d+-\d+|\d+-\d+:\d{1,2}|\d+-\d+:\d{1,2}:\d{1,2})$")


def _tres(value: str | None) -> str | None:
    """A TRES list such as `gres/gpu=64,cpu=512` (-1 clears one)."""
    if value is not None and not _TRES.match(value):
        raise ValueError(f"not a TRES list (e.g. gres/gpu=8,cpu=64): {value!r}")
    return value


def _wall(value: str | None) -> str | None:
    """A Slurm time limit: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, or -1 / UNLIMITED."""
    if value is not None and not _WALL.match(str(value)):
        raise ValueError(f"not a Slurm time limit (e.g. 2-00:00:00, 04:00:00, 90): {value!r}")
    return None if value is None else str(value)


AcctName = Annotated[str, Field(pattern=_ACCT_NAME)]
TresList = Annotated[str | None, AfterValidator(_tres)]
WallTime = Annotated[str | int | None, AfterValidator(_wall)]


_Share = Annotated[int, Field(ge=0, le=U32_MAX)]


class AssocLimits(Strict):
    """Limits of an association (account or user), as sacctmgr names them; unset ones are left as they are."""

    GrpTRES: TresList = Field(default=None, description="e.g. gres/gpu=64,cpu=1024 (all jobs together)")
    GrpJobs: int | None = Field(default=None, ge=-1, le=U32_MAX)
    GrpSubmitJobs: int | None = Field(default=None, ge=-1, le=U32_MAX)
    GrpWall: WallTime = None
    MaxJobs: int | None = Field(default=None, ge=-1, le=U32_MAX)
    MaxSubmitJobs: int | None = Field(default=None, ge=-1, le=U32_MAX)
    MaxWall: WallTime = Field(default=None, description="Per job, e.g. 2-00:00:00")
    MaxTRESPerJob: TresList = None
    MaxTRESPerNode: TresList = None


class QosLimits(Strict):
    """Limits of a QOS, as sacctmgr names them; unset ones are left as they are."""

    GrpTRES: TresList = None
    GrpJobs: int | None = Field(default=None, ge=-1, le=U32_MAX)
    MaxTRESPerJob: TresList = None
    MaxTRESPerNode: TresList = None
    MaxTRESPerUser: TresList = Field(default=None, description="e.g. gres/gpu=8")
    MaxJobsPerUser: int | None = Field(default=None, ge=-1, le=U32_MAX)
    MaxSubmitJobsPerUser: int | None = Field(default=None, ge=-1, le=U32_MAX)
    MaxWall: WallTime = None


class QosSpec(Strict):
    """A QOS: priority, preemption, flags and limits."""

    name: AcctName
    description: Text | None = None
    priority: int | None = Field(default=None, ge=0, le=U32_MAX)
    preempt: list[AcctName] | None = Field(default=None, description="QOS this one may preempt")
    preempt_mode: Literal["cluster", "cancel", "requeue", "suspend", "off"] | None = None
    flags: list[Literal["DenyOnLimit", "EnforceUsageThreshold", "NoDecay", "NoReserve", "OverPartQOS",
                        "PartitionMaxNodes", "PartitionMinNodes", "PartitionTimeLimit", "RequiresReservation",
                        "UsageFactorSafe"]] | None = None
    usage_factor: float | None = Field(default=None, ge=0, le=1000)
    limits: QosLimits = Field(default_factory=QosLimits)
    state: Literal["present", "absent"] = "present"


class AccountSpec(Strict):
    """An account: where it sits in the tree, its fair-share, QOS and limits."""

    name: AcctName
    parent: AcctName = "root"
    description: Text | None = None
    organization: Text | None = None
    fairshare: _Share | Literal["parent"] | None = Field(default=None, description="Share of the parent's")
    qos: list[AcctName] | None = Field(default=None, description="QOS its jobs may use")
    default_qos: AcctName | None = None
    limits: AssocLimits = Field(default_factory=AssocLimits)
    state: Literal["present", "absent"] = "present"


class UserSpec(Strict):
    """A user: default account, other accounts, admin level, and the limits of each of its associations."""

    name: Annotated[str, Field(pattern=_USER_NAME)]
    default_account: AcctName
    accounts: list[AcctName] = Field(default_factory=list, description="Accounts besides the default one")
    admin_level: Literal["None", "Operator", "Administrator"] | None = None
    fairshare: _Share | Literal["parent"] | None = None
    qos: list[AcctName] | None = None
    default_qos: AcctName | None = None
    limits: AssocLimits = Field(default_factory=AssocLimits)
    state: Literal["present", "absent"] = "present"


class Accounting(Strict):
    """Slurm accounting kept as code: the account tree, users, QOS and limits (applied with `sacctmgr -i`)."""

    prune: bool = Field(default=False, description="Remove accounts, users and QOS the desired state does not "
                        "name (root and normal aside); off: they are left alone")
    force_remove: bool = Field(default=False, description="Remove accounts and users even with running or "
                               "pending jobs (off: such a removal is refused with the jobs named)")
    qos: list[QosSpec] = Field(default_factory=list)
    accounts: list[AccountSpec] = Field(default_factory=list)
    users: list[UserSpec] = Field(default_factory=list)


# ---------------------------------------------------------------- the whole desired state

# kernel: lives in its own module, built on Strict and NodeSelection above. Importing it here defines `Kernel` in
# this module (model_kernel sets it); imported first, model_kernel rebuilds DesiredState once Kernel exists.
from reconciler.model import kernel as _kernel  # noqa: E402,F401

if TYPE_CHECKING:
    from reconciler.model.kernel import Kernel


class DesiredState(Strict):
    """Everything a desired-state repo describes, merged from all its YAML files."""

    cluster: Cluster
    ssh: SSHDefaults = Field(default_factory=SSHDefaults)
    nodes: list[Node] = Field(min_length=1)
    storage: Storage = Field(default_factory=Storage)
    images: list[Image] = Field(default_factory=list)
    patches: list[Patch] = Field(default_factory=list)
    files: list[ManagedFile] = Field(default_factory=list, description="Whole managed files, with notify")
    services: list[ManagedService] = Field(default_factory=list, description="Wanted service states")
    packages: list[PackageSet] = Field(default_factory=list, description="Packages per node set (apt or dnf): "
                                       "present, absent, a version or a glob; holds")
    secrets: Secrets = Field(default_factory=Secrets, description="Recipients of the repository's age-encrypted files")
    checks: Checks = Field(default_factory=Checks)
    accounting: Accounting | None = Field(default=None, description="Slurm accounting as code (sacctmgr): "
                                          "accounts, users, QOS, limits; absent: not managed")
    rollout: Rollout = Field(default_factory=Rollout, description="How a change reaches the nodes: canary "
                             "waves gated by health with automatic rollback (default), or all at once")
    munge: Munge | None = Field(default=None, description="Distribute /etc/munge/munge.key to every Slurm node "
                                "(unset: the munge key is not managed)")
    kernel: Kernel = Field(default_factory=lambda: Kernel(), description="Kernel modules (loaded, blacklisted, "
                           "options) and sysctls")
