"""What a reboot and a driver reload are, as data: shell commands a workload-manager-aware driver writes
(drivers/slurm_reboot.py), run by the upgrade machine (reconciler/rollout/upgrade.py), which knows nothing of Slurm.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from reconciler.engine.followups import DrainSteps


class RebootSteps(BaseModel):
    """Shell commands taking one node out, rebooting it and bringing it back (on `run_on` unless said)."""

    run_on: str = Field(description="Node whose shell runs these commands (the workload manager's controller)")
    drained: str = Field(description="Exits 0 when the node is drained (by anyone)")
    ours: str = Field(description="Exits 0 when the node is drained by the upgrade (its reason)")
    drain: str = Field(description="Drains the node with the upgrade's reason")
    jobs: str = Field(description="Prints one line per job still running on the node; empty when none")
    reboot: str = Field(description="Asks the workload manager to reboot the node (it comes back drained)")
    pending: str = Field(description="Exits 0 while a reboot of the node is asked for or under way")
    boot_id: str = Field(description="Run ON THE NODE: prints its boot id (a new one after each boot)")
    registered: str = Field(description="Exits 0 once the node's daemon registered again after the reboot")
    resume: str = Field(description="Resumes the node (run only when `ours` holds)")

    def drain_steps(self) -> DrainSteps:
        """The drain, jobs and resume of these steps, for the one drain-and-wait (engine/drain.py)."""
        return DrainSteps(run_on=self.run_on, jobs=self.jobs, drained=self.drained, drain=self.drain,
                          resume=self.resume, ours=self.ours)


class ReloadSteps(BaseModel):
    """Shell commands, run on the node in order, reloading its driver stack without a reboot."""

    commands: list[str] = Field(default_factory=list)
