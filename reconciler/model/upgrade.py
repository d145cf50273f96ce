"""Desired-state schema of `rollout.upgrade:`: changes that need a reboot or a driver reload go node by node.

Imported by reconciler/model/rollout.py for `Rollout.upgrade`; standard pydantic only. The orchestration is
reconciler/rollout/upgrade.py; the Slurm side drivers/slurm_reboot.py.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from reconciler.model.bounds import duration_between

# What a change needs before it takes effect: written in `packages:` (`needs:`), declared by drivers on changes.
Needs = Literal["reboot", "driver-reload"]

_NAME = r"^[A-Za-z0-9_][A-Za-z0-9_.@:+-]{0,127}$"  # a unit, program, module or package name: never an option
Name = Annotated[str, Field(pattern=_NAME)]
UpgradeGate = Literal["gpu", "dcgm", "smoke"]


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

    max_unavailable: int = Field(default=1, ge=1, le=100_000, description="Nodes out for the upgrade at a time")
    failure_budget: int = Field(default=0, ge=0, le=100_000, description="Failed nodes tolerated; one more stops "
                                "the rollout and rolls the reached nodes back")
    drain_timeout: duration_between(1, 30 * 86400) = Field(  # type: ignore[valid-type]
        default="2h", description="Wait this long for the jobs running on a drained node")
    reboot_timeout: duration_between(10, 86400) = Field(  # type: ignore[valid-type]
        default="15m", description="A node must be back (new boot id, slurmd registered) within this")
    driver_package: Name | None = Field(default=None, description="nvidia-smi must report this package's "
                                        "installed upstream version before a node is resumed (the gpu gate)")
    gates: list[UpgradeGate] = Field(default_factory=lambda: list[UpgradeGate](["gpu"]),
                                     description="After each node is back: gpu (nvidia-smi health, XIDs, the "
                                     "driver version), dcgm (diag at dcgm_level), smoke (a job on the node)")
    dcgm_level: int = Field(default=1, ge=1, le=4, description="`dcgmi diag -r LEVEL` for the dcgm gate")
    driver_reload: DriverReload = Field(default_factory=DriverReload, description="What a driver reload stops, "
                                        "unloads, loads and starts (changes that need driver-reload)")
