"""Desired-state schema of a whole desired-state repo: DesiredState, the top-level keys of its YAML files."""

from __future__ import annotations

from pydantic import Field

from reconciler.model.accounting import Accounting
from reconciler.model.base import Strict
from reconciler.model.checks import Checks
from reconciler.model.cluster import Cluster
from reconciler.model.files import Image, ManagedFile, ManagedService, PackageSet, Patch
from reconciler.model.kernel import Kernel
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
