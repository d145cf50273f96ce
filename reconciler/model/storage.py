"""Desired-state schema of `storage:`: NFS exports and fstab mounts (NFS, Lustre, ...)."""

from __future__ import annotations

from pydantic import Field, ValidationInfo, field_validator

from reconciler.model import values
from reconciler.model.base import AbsPath, Hostlist, Strict, absolute, hostlist_expr
from reconciler.model.values import ExportClient, ExportOption, ExportPath, FstabField, MountOption, NameToken


class NfsExport(Strict):
    """A line of /etc/exports on an NFS server node."""

    server: NameToken
    path: ExportPath
    clients: list[ExportClient] = Field(min_length=1, description="Client specs: host, IP, CIDR, @netgroup, *")
    options: list[ExportOption] = Field(default_factory=lambda: ["rw", "sync", "no_subtree_check"])

    _abs = field_validator("path")(lambda cls, v: absolute(v))


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

    _abs = field_validator("mountpoint")(lambda cls, v: absolute(v))
    _check_nodes = field_validator("nodes")(lambda cls, v: hostlist_expr(v))

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
