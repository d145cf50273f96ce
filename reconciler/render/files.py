"""Which managed files a node gets, and rendering one of them by name."""

from __future__ import annotations

import posixpath

from reconciler.desired.inventory import node_specs, slurm_node_set
from reconciler.model import DesiredState
from reconciler.render import configless
from reconciler.render.blocks import BEGIN, END
from reconciler.render.cgroup_conf import render_cgroup_conf
from reconciler.render.gres_conf import render_gres_conf
from reconciler.render.slurm_conf import render_slurm_conf
from reconciler.render.storage import exports_block, fstab_block

MANAGED_FILES = ("slurm.conf", "gres.conf", "cgroup.conf", "exports", "fstab")
SLURM_ROLES = ("controller", "login", "compute")


class UnknownNodeError(KeyError):
    """A node name that is not in the inventory."""


def is_slurm_node(state: DesiredState, node: str) -> bool:
    """Tell whether a node runs Slurm (controller, login, compute, or in a node set) and needs its config."""
    spec = node_specs(state).get(node)
    return bool(spec and spec.roles.intersection(SLURM_ROLES)) or node in slurm_node_set(state)


def file_path(state: DesiredState, name: str) -> str:
    """The path of a managed file on the node."""
    if name in ("exports", "fstab"):
        return f"/etc/{name}"
    return posixpath.join(state.cluster.config_dir, name)


def managed_files_for(state: DesiredState, node: str) -> list[str]:
    """The managed files that exist for a node, by name (configless Slurm: no Slurm files on slurmd nodes)."""
    if node not in node_specs(state):
        raise UnknownNodeError(node)
    names: list[str] = []
    if is_slurm_node(state, node) and not configless.is_client(state, node):
        names.append("slurm.conf")
        if state.cluster.gres is not None:
            names.append("gres.conf")
        if state.cluster.cgroup is not None:
            names.append("cgroup.conf")
    if exports_block(state.storage, node) is not None:
        names.append("exports")
    if fstab_block(state.storage, node) is not None:
        names.append("fstab")
    return names


def _block(body: list[str] | None) -> str:
    return "\n".join([BEGIN, *(body or []), END]) + "\n"


def render_file(state: DesiredState, node: str, name: str, source: str) -> str:
    """Render one managed file for a node; for exports and fstab, only the managed block."""
    if node not in node_specs(state):
        raise UnknownNodeError(node)
    if name == "slurm.conf":
        return render_slurm_conf(state.cluster, source)
    if name == "gres.conf":
        return render_gres_conf(state.cluster.gres, source) if state.cluster.gres else ""
    if name == "cgroup.conf":
        return render_cgroup_conf(state.cluster.cgroup, source) if state.cluster.cgroup else ""
    if name == "exports":
        return _block(exports_block(state.storage, node))
    if name == "fstab":
        return _block(fstab_block(state.storage, node))
    raise ValueError(f"unknown managed file {name!r}; one of {', '.join(MANAGED_FILES)}")
