"""Common types and validators of the desired-state schema: Strict (the base of every model), paths, hostlists,
sizes, node roles and NodeSelection (which nodes get something).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from reconciler.common import hostlist
from reconciler.model import netnames, values
from reconciler.model.values import SlurmPath

SlurmScalar = str | int | float | bool

_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*([KMGT]i?)?B?$", re.IGNORECASE)


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


def absolute(path: str) -> str:
    """PATH when absolute and normalised, else ValueError."""
    return values.clean_abs_path(path)  # absolute and already normalised: nothing is normalised silently


def hostlist_expr(expr: str) -> str:
    """EXPR when a hostlist of valid Slurm node names, else ValueError."""
    _node_names(expr)
    return expr


@lru_cache(maxsize=4096)
def _node_names(expr: str) -> None:
    """Every name of a hostlist follows Slurm's NodeName rules (expansion bounded first; checked once per text)."""
    hostlist.expand(expr)  # raises HostlistError (a ValueError) with the reason
    for item in hostlist.split_top_level(expr.strip()):
        # the names of an item differ only in the digits of its groups: its longest name stands for them all
        netnames.node_name(hostlist.longest_name(item))


# Checked wherever used (slurm.conf paths, check mounts, ...), not only where a field validator says so.
AbsPath = Annotated[str, AfterValidator(absolute), Field(description="An absolute path on the node")]
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


# The opt-in of an entry that would cut the reconciler off from its nodes (reconciler/desired/lockout.py).
AllowLockout = Annotated[bool, Field(description="true: this entry is meant to remove or stop what the reconciler "
                                     "needs to reach and manage its nodes (sshd, python3, sudo, munge, the "
                                     "network); without it validate refuses such an entry")]

Role = Literal["controller", "login", "compute", "nfs-server", "bastion", "storage"]


class NodeSelection(Strict):
    """Which nodes get something: a hostlist, roles, or both (a node matching either is selected)."""

    nodes: Hostlist | None = Field(default=None, description="A Slurm hostlist expression, e.g. gpu[01-16]")
    roles: list[Role] = Field(default_factory=list, description="Every node with one of these roles")

    _check_nodes = field_validator("nodes")(lambda cls, v: v if v is None else hostlist_expr(v))

    @model_validator(mode="after")
    def _some_nodes(self) -> NodeSelection:
        if self.nodes is None and not self.roles:
            raise ValueError("say which nodes: nodes (a hostlist) and/or roles")
        return self


@dataclass(frozen=True)
class Section:
    """What validate derives for a top-level key from its field in DesiredState (`Annotated[..., Section(...)]`).

    Every entry's `nodes` is checked against the inventory; WRITES names the entry field holding the path a
    kind writes on each node it selects: two entries writing one path on a node are refused, `files:` may not
    write it, and it gets the checks of every managed path (reconciler/desired/targets.py).
    """

    writes: str | None = None
