"""Desired-state schema of `rollout.upgrade:`: changes that need a reboot or a driver reload go node by node.

Imported by reconciler/model/rollout.py for `Rollout.upgrade`; standard pydantic only. The orchestration is
reconciler/rollout/upgrade.py; the Slurm side drivers/slurm_reboot.py.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Tag, field_validator

from reconciler.model.bounds import duration_between


def _capacity(value: Any) -> Any:
    """A node count (1 to 100000) or a percentage ('50%', 1 to 100)."""
    if isinstance(value, bool):
        raise ValueError(f"a count or a percentage like '50%', got {value!r}")
    if isinstance(value, int):
        if not 1 <= value <= 100_000:
            raise ValueError(f"a count is 1 to 100000, got {value}")
        return value
    if isinstance(value, str) and re.fullmatch(r"\s*\d{1,3}\s*%\s*", value):
        percent = int(value.strip().rstrip("%").strip())
        if not 1 <= percent <= 100:
            raise ValueError(f"a percentage is 1% to 100%, got {value!r}")
        return f"{percent}%"
    if isinstance(value, str) and value.strip().isdigit():
        return _capacity(int(value.strip()))
    raise ValueError(f"a count or a percentage like '50%', got {value!r}")


Capacity = Annotated[int | str, BeforeValidator(_capacity)]
PartitionName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+$")]


def scaled(value: int | str, total: int) -> int:
    """VALUE as a node count of TOTAL: a percentage rounded up (Kubernetes' IntOrString rule for a DaemonSet's
    maxUnavailable, which the GPU Operator's upgrade takes), a count as it is."""
    if isinstance(value, int):
        return value
    return -(-int(value.rstrip("%")) * total // 100)


# What a change needs before it takes effect: written in `packages:` (`needs:`), declared by drivers on changes.
Needs = Literal["reboot", "driver-reload"]

_NAME = r"^[A-Za-z0-9_][A-Za-z0-9_.@:+-]{0,127}$"  # a unit, program, module or package name: never an option
Name = Annotated[str, Field(pattern=_NAME)]
GateName = Literal["gpu", "dcgm", "smoke", "nhc"]
GATE_NAMES: tuple[GateName, ...] = ("gpu", "dcgm", "smoke", "nhc")


class CommandGate(BaseModel):
    """A check the site writes, run on the drained node after it is back: exit 0 passes; anything else fails
    the node, which stays drained with the command's output in its reason."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    command: str = Field(min_length=1, max_length=4096, description="Shell command run on the node (as root, "
                         "through the node's SSH session), e.g. `/usr/local/sbin/check-ib --rate 400`")
    name: Name | None = Field(default=None, description="What messages call it (default: the command's first "
                              "word's file name)")
    timeout: duration_between(1, 3600) = Field(  # type: ignore[valid-type]
        default="5m", description="A command running longer has failed")

    @field_validator("command")
    @classmethod
    def _one_line(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("a command gate's command is empty")
        if "\x00" in value:
            raise ValueError("a command gate's command contains a NUL byte")
        return value

    @property
    def label(self) -> str:
        """The gate's name in messages: `name`, else the command's first word's file name."""
        return self.name or value_label(self.command)


def value_label(command: str) -> str:
    """The file name of COMMAND's first word (`/usr/local/sbin/check-ib --x` -> check-ib)."""
    first = command.split()[0] if command.split() else command
    return first.rsplit("/", 1)[-1][:64] or "command"


def _known(value: Any) -> Any:
    if isinstance(value, str) and value not in GATE_NAMES:
        raise ValueError(f"unknown gate {value!r}: one of {', '.join(GATE_NAMES)}, or a site's check as "
                         "{command: ..., name: ..., timeout: ...}")
    return value


def _gate_kind(value: Any) -> str:
    return "=name" if isinstance(value, str) else "=command"


# a name, or a site's command: told apart by the value's type, so an error names the field of the form meant
# (tags start with `=`: the loader leaves them out of an error's key path, desired/loader.py key_path)
UpgradeGate = Annotated[Annotated[GateName, BeforeValidator(_known), Tag("=name")]
                        | Annotated[CommandGate, Tag("=command")],
                        Discriminator(_gate_kind)]


def gate_label(gate: GateName | CommandGate) -> str:
    """How a gate is named in plans and messages: gpu, dcgm, smoke, nhc or command:<label>."""
    return gate if isinstance(gate, str) else f"command:{gate.label}"


class DriverReload(BaseModel):
    """How a driver reload is done on a node when no reboot is needed: stop, unload, load, start."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    stop: list[Name] = Field(default_factory=list, description="Services stopped first, in order "
                             "(e.g. nvidia-persistenced, nvidia-fabricmanager, nvidia-dcgm)")
    modules: list[Name] = Field(default_factory=list, description="Kernel modules unloaded in this order "
                                "(`modprobe -r`), then loaded in the reverse order (`modprobe`)")
    start: list[Name] = Field(default_factory=list, description="Services started last, in order")


class Upgrade(BaseModel):
    """Changes needing a reboot or a driver reload (`needs:`), orchestrated node by node: drain, wait for the
    jobs, apply, reboot through Slurm (or reload the driver), gates, resume; unset: such changes are held."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    max_unavailable: Capacity = Field(default=1, description="Nodes that may be unavailable at once, a count or "
                                      "a percentage of the cluster's Slurm nodes (rounded up, at least 1), counting "
                                      "every node that is (DOWN, DRAINED or DRAINING by anyone, not responding), "
                                      "not only the upgrade's own")
    min_available: dict[PartitionName, Capacity] = Field(default_factory=dict, description="Per partition: nodes "
                                                         "that must stay available (count or percentage of the "
                                                         "partition's nodes, rounded up); a node whose partition "
                                                         "would fall below waits")
    mode: Literal["drain", "reservation"] = Field(
        default="drain", description="How a node is taken out: `drain` (at once; its free GPUs idle until its "
        "jobs end) or `reservation` (a maintenance reservation on the node starting when its last job is expected "
        "to end, from the jobs' time limits, so other jobs still run on it until then; drained when it starts or "
        "the node is empty; removed after the gates, before the resume). A node whose job has no time limit is "
        "drained as in `drain`")
    requeue: list[PartitionName] = Field(default_factory=list, description="Partitions whose jobs on a node "
                                         "being taken out are requeued (`scontrol requeue`) instead of waited "
                                         "for; never a job of another partition, and a job Slurm will not "
                                         "requeue (interactive, --no-requeue) is waited for")
    failure_budget: int = Field(default=0, ge=0, le=100_000, description="Failed nodes tolerated; one more stops "
                                "the rollout and rolls the reached nodes back")
    drain_timeout: duration_between(1, 30 * 86400) = Field(  # type: ignore[valid-type]
        default="2h", description="Wait this long for the jobs running on a drained node")
    reboot_timeout: duration_between(10, 86400) = Field(  # type: ignore[valid-type]
        default="15m", description="A node must be back (new boot id, slurmd registered) within this")
    driver_package: Name | None = Field(default=None, description="nvidia-smi must report this package's "
                                        "installed upstream version before a node is resumed (the gpu gate)")
    gates: list[UpgradeGate] = Field(default_factory=lambda: list[GateName | CommandGate](["gpu"]),
                                     description="After each node is back, in this order, while it is still "
                                     "drained: gpu (nvidia-smi health, XIDs, the driver version), dcgm (diag at "
                                     "dcgm_level), nhc (LBNL NHC's `nhc` where the node has it), {command: ...} "
                                     "(a site's check, exit 0 passes); smoke (a job on the node) needs the node "
                                     "resumed and runs after the resume, wherever it is listed")
    nhc_timeout: duration_between(5, 3600) = Field(  # type: ignore[valid-type]
        default="5m", description="The nhc gate's watchdog (`nhc -t`); a run past it has failed")
    dcgm_level: int = Field(default=1, ge=1, le=4, description="`dcgmi diag -r LEVEL` for the dcgm gate")
    driver_reload: DriverReload = Field(default_factory=DriverReload, description="What a driver reload stops, "
                                        "unloads, loads and starts (changes that need driver-reload)")
