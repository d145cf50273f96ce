"""Draining a node, waiting for its jobs and resuming it: the one implementation, used by the apply's rolling
restarts and the steps that would end other nodes' jobs (reconciler/engine/apply.py) and by the upgrade machine
(reconciler/rollout/upgrade.py). The commands are data (`DrainSteps`, written by the workload manager's driver:
drivers/node_state.py, drivers/slurm_reboot.py); nothing here knows Slurm, and nothing here lifts a drain it did
not make: each caller resumes only a drain it knows to be its own.

Which jobs hold a node is the steps' `jobs` command, one rule for every drain (drivers/node_state.py
`jobs_command`: suspended jobs count, with the Slurm pages it follows).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field

Run = Callable[[str, str], tuple[bool, str]]  # (host, command) -> (exit 0, stdout or why not)
RebootPart = Literal["ours", "reboot", "pending", "boot_id", "registered"]


class DrainSteps(BaseModel):
    """Shell commands (on `run_on`) taking one node out of scheduling, saying which jobs still hold it and bringing
    it back; where the caller also reboots the node (the upgrade), how it is rebooted and seen back. One type for
    a drain around a restart and for a reboot: the drain part is the same, the reboot part is there or not."""

    run_on: str = Field(description="Node whose shell runs these commands (the workload manager's controller)")
    jobs: str = Field(description="Prints one line per job still holding the node; empty when none")
    drained: str = Field(description="Exits 0 when the node is already drained (by anyone)")
    drain: str = Field(description="Drains the node")
    resume: str = Field(description="Resumes the node (only run when `drain` was run by us)")
    ours: str | None = Field(default=None, description="Exits 0 when the node is drained with `drain`'s reason")
    reboot: str | None = Field(default=None, description="Asks the workload manager to reboot the node (it comes "
                               "back drained)")
    pending: str | None = Field(default=None, description="Exits 0 while a reboot of the node is asked for or "
                                "under way")
    boot_id: str | None = Field(default=None, description="Run ON THE NODE: prints its boot id (a new one after "
                                "each boot)")
    registered: str | None = Field(default=None, description="Exits 0 once the node's daemon registered again")
    reserve: str | None = Field(default=None, description="Reservation mode: creates the node's maintenance "
                                "reservation (unless it exists) starting when its jobs outside `requeue` are "
                                "expected to end; prints `NAME START`, or `drain: WHY` when none can be made (a "
                                "job without a time limit: the node is drained instead)")
    reserved: str | None = Field(default=None, description="Exits 0 once the node's reservation has started")
    unreserve: str | None = Field(default=None, description="Deletes the node's reservation (exit 0 when there "
                                  "is none)")
    kept_jobs: str | None = Field(default=None, description="Prints one line per job holding the node outside "
                                  "the partitions `requeue` empties (default: `jobs`)")
    requeue: str | None = Field(default=None, description="Requeues the node's jobs of the `requeue` partitions; "
                                "prints `requeued ID` or `kept ID: WHY` per job")

    def part(self, name: RebootPart) -> str:
        """The command NAME of these steps; ValueError when the driver that wrote them left it out."""
        value = {"ours": self.ours, "reboot": self.reboot, "pending": self.pending, "boot_id": self.boot_id,
                 "registered": self.registered}[name]
        if value is None:
            raise ValueError(f"the drain steps of {self.run_on} have no `{name}` command (not a reboot's steps)")
        return value


class DrainFailed(Exception):
    """The drain command failed: the message says why."""


def wait_until(done: Callable[[], bool], seconds: float, should_stop: Callable[[], bool] = lambda: False,
               poll: float = 1.0) -> bool:
    """Call DONE until it holds (True), SECONDS pass or SHOULD_STOP asks (False); DONE is asked at least once."""
    deadline = time.monotonic() + seconds
    while True:
        if done():
            return True
        if time.monotonic() >= deadline or should_stop():
            return False
        time.sleep(poll)


@dataclass
class NodeDrain:
    """One node's drain, its jobs and its resume, through STEPS run by RUN."""

    node: str
    steps: DrainSteps
    run: Run
    poll: float = 1.0
    should_stop: Callable[[], bool] = lambda: False

    def _ok(self, command: str) -> bool:
        return self.run(self.steps.run_on, command)[0]

    def jobs(self, waited_only: bool = False) -> int:
        """Jobs still holding the node (WAITED_ONLY: those outside the partitions `requeue` empties, the steps'
        `kept_jobs`); -1 when the controller could not say (counts as busy)."""
        command = (self.steps.kept_jobs or self.steps.jobs) if waited_only else self.steps.jobs
        ok, out = self.run(self.steps.run_on, command)
        return len([line for line in out.splitlines() if line.strip()]) if ok else -1

    def drained(self) -> bool:
        """The node is drained, by anyone."""
        return self._ok(self.steps.drained)

    def ours(self) -> bool:
        """The node is drained with the caller's own reason (False where the steps cannot tell)."""
        return self.steps.ours is not None and self._ok(self.steps.ours)

    def drain(self) -> str | None:
        """Drain the node: None, or why it failed."""
        ok, out = self.run(self.steps.run_on, self.steps.drain)
        return None if ok else (out.strip()[-200:] or "failed")

    def hold(self) -> bool:
        """Drain the node unless it is drained already (by anyone: never a second reason over theirs). True when
        this call drained it (the caller's to resume); DrainFailed when the drain command failed."""
        if self.drained():
            return False
        why = self.drain()
        if why is not None:
            raise DrainFailed(why)
        return True

    def wait_jobs(self, seconds: float, seen: Callable[[int], None] = lambda count: None) -> bool:
        """Wait, at most SECONDS, until no job holds the node (none is killed); SEEN gets each count read.
        False when time ran out or a stop was asked."""
        def none_left() -> bool:
            count = self.jobs()
            seen(count)
            return count == 0
        return wait_until(none_left, seconds, self.should_stop, self.poll)

    def resume(self, seconds: float = 0.0) -> str | None:
        """Resume the node (only a drain the caller made): None, or why it failed. A refused resume is tried again
        for up to SECONDS until it works or the node is no longer drained: right after a controller restart the
        node is not registered yet and Slurm refuses the resume (22.05: "Invalid node state specified") yet clears
        the drain. With SECONDS 0, one try."""
        said = {"why": ""}

        def resumed() -> bool:
            ok, out = self.run(self.steps.run_on, self.steps.resume)
            said["why"] = "" if ok else (out.strip()[-200:] or "failed")
            return ok or not self.drained()
        return None if wait_until(resumed, seconds, poll=self.poll) else said["why"]
