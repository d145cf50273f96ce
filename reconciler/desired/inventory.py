"""The inventory: every node of the desired state, expanded from hostlists, with its SSH settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from reconciler.common import hostlist
from reconciler.model import DesiredState, ServiceManager


@dataclass(frozen=True)
class NodeSpec:
    """One node after hostlist expansion, with its SSH settings resolved."""

    name: str
    host: str
    port: int
    user: str
    identity_file: str | None
    proxy_jump: str | None
    roles: frozenset[str]
    service_manager: ServiceManager
    drain: str | None
    entry: int = field(default=0, compare=False)  # index in `nodes:`, for error locations

    def has_role(self, role: str) -> bool:
        """Tell whether the node has a role."""
        return role in self.roles


_last: tuple[DesiredState | None, dict[str, NodeSpec]] = (None, {})


def node_specs(state: DesiredState) -> dict[str, NodeSpec]:
    """Expand the `nodes:` list into one NodeSpec per node name (first definition wins); cached."""
    global _last
    if _last[0] is not state:
        _last = (state, _expand_nodes(state))
    return _last[1]


def _expand_nodes(state: DesiredState) -> dict[str, NodeSpec]:
    ssh = state.ssh
    specs: dict[str, NodeSpec] = {}
    for index, entry in enumerate(state.nodes):
        for name in hostlist.expand(entry.name):
            if name in specs:
                continue
            host = entry.host.replace("{name}", name) if entry.host else name
            specs[name] = NodeSpec(
                name=name,
                host=host,
                port=entry.port or ssh.port,
                user=entry.user or ssh.user,
                identity_file=entry.identity_file or ssh.identity_file,
                proxy_jump=entry.proxy_jump or ssh.proxy_jump,
                roles=frozenset(entry.roles),
                service_manager=entry.service_manager or ssh.service_manager,
                drain=entry.drain,
                entry=index,
            )
    return specs


def slurm_nodes(state: DesiredState) -> list[str]:
    """Names of all nodes that appear in a Slurm node set, in node-set order."""
    names: list[str] = []
    for node_set in state.cluster.node_sets:
        names.extend(hostlist.expand(node_set.nodes))
    return names


_slurm_set: tuple[DesiredState | None, frozenset[str]] = (None, frozenset())


def slurm_node_set(state: DesiredState) -> frozenset[str]:
    """Names of all nodes in a Slurm node set, as a set; cached per state like node_specs."""
    global _slurm_set
    if _slurm_set[0] is not state:
        _slurm_set = (state, frozenset(slurm_nodes(state)))
    return _slurm_set[1]


def nodes_with_role(state: DesiredState, role: str) -> list[str]:
    """Names of the inventory nodes that have a role."""
    return [spec.name for spec in node_specs(state).values() if spec.has_role(role)]
