"""Draining a node and waiting for its jobs: the one implementation, used by the upgrade machine
(reconciler/rollout/upgrade.py), the apply's rolling restarts and the steps that would end running jobs
(reconciler/engine/apply.py). The commands are data (`DrainSteps`, written by a workload-manager driver); nothing
here knows Slurm, and nothing here lifts a drain: each caller resumes only a drain it knows to be its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from reconciler.engine.followups import DrainSteps

Run = Callable[[str, str], tuple[bool, str]]  # (host, command) -> (exit 0, stdout or why not)


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

    def jobs(self) -> int:
        """Jobs still running on the node; -1 when the controller could not say (counts as busy)."""
        ok, out = self.run(self.steps.run_on, self.steps.jobs)
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

    def resume(self) -> str | None:
        """Resume the node (only for a drain the caller made): None, or why it failed."""
        ok, out = self.run(self.steps.run_on, self.steps.resume)
        return None if ok else (out.strip()[-200:] or "failed")

    def wait_jobs(self, seconds: float, seen: Callable[[int], None] = lambda count: None) -> bool:
        """Wait, at most SECONDS, until no job runs on the node (none is killed); SEEN gets each count read.
        False when time ran out or a stop was asked."""
        def none_left() -> bool:
            count = self.jobs()
            seen(count)
            return count == 0
        return wait_until(none_left, seconds, self.should_stop, self.poll)
