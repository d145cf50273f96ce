"""Desired-state schema of a whole desired-state repo: DesiredState, the top-level keys of its YAML files."""

from __future__ import annotations

from typing import Annotated, get_origin

from pydantic import Field

from reconciler.model.accounting import Accounting
from reconciler.model.base import NodeSelection, Section, Strict
from reconciler.model.checks import Checks
from reconciler.model.cluster import Cluster
from reconciler.model.files import Image, ManagedFile, ManagedService, PackageSet, Patch
from reconciler.model.kernel import Kernel
from reconciler.model.motd import Motd
from reconciler.model.nodes import Node, SSHDefaults
from reconciler.model.rollout import Rollout
from reconciler.model.secrets import Munge, Secrets
from reconciler.model.storage import Storage


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
    motd: Annotated[list[Motd], Section(writes="path")] = Field(
        default_factory=list, description="Message-of-the-day files per node selection")


def list_keys() -> tuple[str, ...]:
    """The top-level keys holding a list: each file of the repository may add entries to them."""
    return tuple(name for name, field in DesiredState.model_fields.items()
                 if get_origin(field.annotation) is list)


def sections(state: DesiredState) -> list[tuple[str, Section, list[NodeSelection]]]:
    """Every top-level key declared with a Section, with its entries (validate's checks derive from these)."""
    out = []
    for name, field in DesiredState.model_fields.items():
        for meta in field.metadata:
            if isinstance(meta, Section):
                out.append((name, meta, list(getattr(state, name))))
    return out


def section_paths(state: DesiredState) -> list[tuple[tuple[str | int, ...], str]]:
    """The paths the Section keys' entries write (those declared with `writes`), each with its key path."""
    return [((key, index, section.writes), str(getattr(item, section.writes)))
            for key, section, entries in sections(state) if section.writes is not None
            for index, item in enumerate(entries)]
