"""What a driver reload is, as data: shell commands a workload-manager-aware driver writes (drivers/slurm_reboot.py),
run by the upgrade machine (reconciler/rollout/upgrade.py), which knows nothing of Slurm. A reboot's commands are
part of the node's `DrainSteps` (engine/drain.py: one step type for drains and reboots).
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class ReloadSteps(BaseModel):
    """Shell commands, run on the node in order, reloading its driver stack without a reboot."""

    commands: list[str] = Field(default_factory=list)
