"""Desired-state schema of `accounting:`: Slurm accounting as code (accounts, users, QOS, limits; sacctmgr)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from reconciler.model.base import Strict
from reconciler.model.bounds import U32_MAX
from reconciler.model.values import Text

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
