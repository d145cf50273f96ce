"""Desired-state schema: what an admin writes in the YAML files of a desired-state repo.

One module per job, each importing only its siblings (never this package): base (Strict, paths, hostlists,
NodeSelection), slurmconf (slurm.conf/gres.conf/cgroup.conf parameters), cluster, nodes (inventory and SSH),
storage, files (images, patches, files, services, packages), secrets (age recipients, munge key), checks, rollout,
accounting, kernel, and state (DesiredState, the whole). This module only re-exports their public names.
"""

from reconciler.model import netnames, values
from reconciler.model.accounting import (
    Accounting,
    AccountSpec,
    AcctName,
    AssocLimits,
    QosLimits,
    QosSpec,
    TresList,
    UserSpec,
    WallTime,
)
from reconciler.model.base import (
    AbsPath,
    Hostlist,
    NodeSelection,
    Role,
    SlurmAbsPath,
    SlurmScalar,
    Strict,
    parse_size,
)
from reconciler.model.bounds import parse_duration
from reconciler.model.checks import (
    Checks,
    DcgmCheck,
    GpuExpectation,
    IbExpectation,
    NcclCheck,
    NcclThresholds,
    NhcCheck,
    NodeCheck,
    PcieExpectation,
)
from reconciler.model.cluster import (
    SLURM_VERSION_FAMILIES,
    Cluster,
    DownNodes,
    GPUs,
    HealthCheck,
    NodeSet,
    Partition,
)
from reconciler.model.files import (
    TEMPLATE_VARIABLES,
    Image,
    ManagedFile,
    ManagedService,
    Notify,
    NotifyCommand,
    PackageSet,
    Patch,
    template_fields,
)
from reconciler.model.kernel import Kernel
from reconciler.model.nodes import Node, ServiceManager, SSHDefaults, SSHGateway
from reconciler.model.rollout import Rollout, RolloutGates
from reconciler.model.secrets import AGE_SUFFIX, Munge, Secrets
from reconciler.model.slurmconf import (
    CgroupConf,
    CgroupConfKey,
    GresConf,
    GresLine,
    ParamMap,
    SlurmConfKey,
    SlurmConfParams,
)
from reconciler.model.state import DesiredState
from reconciler.model.storage import Mount, NfsExport, Storage

__all__ = [
    # common types and validators (base, bounds) and the value rules (values, netnames)
    "AbsPath", "Hostlist", "NodeSelection", "Role", "SlurmAbsPath", "SlurmScalar", "Strict", "netnames",
    "parse_duration", "parse_size", "values",
    # slurm.conf, gres.conf, cgroup.conf; the cluster
    "CgroupConf", "CgroupConfKey", "GresConf", "GresLine", "ParamMap", "SlurmConfKey", "SlurmConfParams",
    "SLURM_VERSION_FAMILIES", "Cluster", "DownNodes", "GPUs", "HealthCheck", "NodeSet", "Partition",
    # inventory and SSH
    "Node", "SSHDefaults", "SSHGateway", "ServiceManager",
    # storage; images, patches, files, services, packages; secrets and the munge key
    "Mount", "NfsExport", "Storage",
    "TEMPLATE_VARIABLES", "Image", "ManagedFile", "ManagedService", "Notify", "NotifyCommand", "PackageSet", "Patch",
    "template_fields",
    "AGE_SUFFIX", "Munge", "Secrets",
    # checks, rollout, accounting, kernel
    "Checks", "DcgmCheck", "GpuExpectation", "IbExpectation", "NcclCheck", "NcclThresholds", "NhcCheck", "NodeCheck",
    "PcieExpectation",
    "Rollout", "RolloutGates",
    "AccountSpec", "Accounting", "AcctName", "AssocLimits", "QosLimits", "QosSpec", "TresList", "UserSpec",
    "WallTime",
    "Kernel",
    # the whole desired state
    "DesiredState",
]
