"""Desired-state schema of `rollout:`: waves (canary, steps), soak and gates; the node-by-node upgrade and the
Slurm upgrade's own steps are reconciler/model/upgrade.py and slurm_upgrade.py.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator

from reconciler.model.base import AbsPath, Strict, hostlist_expr
from reconciler.model.bounds import GateTimeout, Soak
from reconciler.model.slurm_upgrade import SlurmUpgrade
from reconciler.model.upgrade import Upgrade
from reconciler.model.windows import Window

_STEP = re.compile(r"^(?:[1-9]\d*|[1-9]\d?%|100%)$")


def _step(value: Any) -> str | int:
    """A wave size: a node count (int) or a percentage of the changing nodes ('25%')."""
    if isinstance(value, bool):
        raise ValueError(f"a step is a node count or a percentage like '25%', got {value!r}")
    if isinstance(value, int):
        if value < 1:
            raise ValueError(f"a step counts at least 1 node, got {value}")
        return value
    if not isinstance(value, str) or not _STEP.match(value.strip()):
        raise ValueError(f"a step is a node count or a percentage like '25%', got {value!r}")
    text = value.strip()
    return text if text.endswith("%") else int(text)


class RolloutGates(Strict):
    """What must hold after each wave before the next starts; a failing gate rolls the wave back."""

    timeout: GateTimeout = Field(default="10m", description="Each gate's time limit (a gate past it has failed)")  # type: ignore[valid-type]
    node_checks: bool = Field(default=True, description="The node checks (checks.node) of the wave's nodes")
    smoke_job: bool = Field(default=True, description="A Slurm job on exactly the wave's nodes, through a "
                            "reservation: prolog, epilog, the mounts from inside a job, a container start where "
                            "Pyxis/enroot are declared")
    smoke_mounts: list[AbsPath] | None = Field(default=None, description="Mount points the smoke job checks "
                                               "(default: every storage.mounts mount point of the wave's nodes)")
    smoke_image: str | None = Field(default=None, description="An enroot/Pyxis image the smoke job starts "
                                    "(`srun --container-image`); unset: no container start")
    nccl: bool = Field(default=False, description="The NCCL checks on the wave when it has two or more nodes")


class Rollout(Strict):
    """How a commit reaches the nodes: all at once, or in waves gated by health, rolled back when a gate fails."""

    waves: Literal["progressive", "all"] = Field(default="progressive", description="progressive: a canary, then "
                                                 "the steps; all: every node at once, no gates (one shot)")
    canary: str | int = Field(default=1, description="The first wave: a node count, a percentage, or a hostlist "
                              "of canary nodes (those of them that change)")
    steps: list[str | int] = Field(default_factory=lambda: list[str | int](["50%", "100%"]),
                                   description="Later waves: cumulative sizes (counts or percentages of the "
                                   "changing nodes); the last wave always takes every node left")
    soak: Soak = Field(default="30s", description="Wait after a wave's gates pass; a wave node "  # type: ignore[valid-type]
                       "drained by Slurm meanwhile (Prolog/Epilog error) fails the wave")
    gates: RolloutGates = Field(default_factory=RolloutGates)
    upgrade: Upgrade | None = Field(default=None, description="Changes that need a reboot or a driver reload go "
                                    "node by node (reconciler/model/upgrade.py); unset: they are held")
    windows: list[Window] = Field(default_factory=list, description="Maintenance windows "
                                  "(reconciler/model/windows.py): outside all of them no node starts an upgrade's "
                                  "reboot or driver reload (a node already in one finishes it); none: always")
    windows_apply_to: Literal["upgrades", "all"] = Field(default="upgrades", description="upgrades: the windows "
                                                         "hold only reboots and driver reloads; all: no commit is "
                                                         "applied outside them either")
    slurm_upgrade: SlurmUpgrade = Field(default_factory=SlurmUpgrade, description="A Slurm upgrade's own steps "
                                        "(reconciler/model/slurm_upgrade.py): the database backup before slurmdbd")

    @field_validator("canary", mode="before")
    @classmethod
    def _canary(cls, value: Any) -> str | int:
        if isinstance(value, str) and not value.strip().endswith("%") and not value.strip().isdigit():
            return hostlist_expr(value)
        return _step(value)

    @field_validator("steps", mode="before")
    @classmethod
    def _steps(cls, value: Any) -> list[str | int]:
        if not isinstance(value, list) or not value:
            raise ValueError("steps is a non-empty list of node counts or percentages, e.g. ['50%', '100%']")
        steps = [_step(item) for item in value]
        for kind in (int, str):  # cumulative sizes: counts and percentages each never shrink
            sizes = [int(str(s).rstrip("%")) for s in steps if isinstance(s, kind)]
            if sizes != sorted(sizes):
                raise ValueError(f"steps are cumulative and never shrink, got {value}")
        return steps
