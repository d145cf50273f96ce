"""Desired-state schema of `nodes:` and `ssh:`: the inventory (names, roles, service managers) and how each node
is reached over SSH (defaults, bastions, ClusterShell gateways).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from reconciler.common import hostlist
from reconciler.model import netnames
from reconciler.model.base import Hostlist, Role, Strict, hostlist_expr
from reconciler.model.packages import PackageManager
from reconciler.model.values import SlurmStr

_SshHost = Annotated[str, AfterValidator(netnames.host_template)]
_SshUser = Annotated[str, AfterValidator(netnames.user)]
_SshJump = Annotated[str, AfterValidator(netnames.proxy_jump)]
_SshFile = Annotated[str, AfterValidator(netnames.local_path)]


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

    _check_name = field_validator("name")(lambda cls, v: hostlist_expr(v))


class SSHGateway(Strict):
    """A ClusterShell gateway: the node that relays commands to the nodes behind it (tree mode)."""

    name: _SshHost = Field(description="The gateway node (an ssh_config alias or address), reached directly")
    nodes: Hostlist = Field(description="The nodes reached through this gateway, e.g. gpu[001-128]")

    _check_nodes = field_validator("nodes")(lambda cls, v: hostlist_expr(v))


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
