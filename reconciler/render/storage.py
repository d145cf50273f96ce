"""Render the managed blocks of /etc/exports and /etc/fstab."""

from __future__ import annotations

from reconciler.common import hostlist
from reconciler.model import Storage
from reconciler.model.values import exports_escape, fstab_escape


def exports_block(storage: Storage, node: str) -> list[str] | None:
    """The managed /etc/exports lines for a node, or None when it exports nothing."""
    lines = []
    for export in storage.exports:
        if export.server != node:
            continue
        options = ",".join(export.options)
        clients = " ".join(f"{client}({options})" for client in export.clients)
        lines.append(f"{exports_escape(export.path)} {clients}")
    return lines or None


def fstab_block(storage: Storage, node: str) -> list[str] | None:
    """The managed /etc/fstab lines for a node, or None when it mounts nothing."""
    lines = []
    for mount in storage.mounts:
        if node not in hostlist.expand_set(mount.nodes):
            continue
        options = ",".join(mount.options) or "defaults"
        source, point = fstab_escape(mount.source), fstab_escape(mount.mountpoint)
        lines.append(f"{source} {point} {mount.type} {options} {mount.dump} {mount.passno}")
    return lines or None
