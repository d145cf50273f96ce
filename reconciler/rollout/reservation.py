"""How the upgrade machine takes a node out of scheduling (issue 46 item 3): `mode: drain` drains it at once;
`mode: reservation` makes a maintenance reservation on it that starts when its last job is expected to end, so
that other jobs still run on its free GPUs until then, and drains it when the reservation starts or the node has
no job left; `requeue:` partitions' jobs are requeued instead of waited for (never another partition's).

The machine (reconciler/rollout/upgrade.py) calls `take` in `draining`, `ready` in `waiting-for-jobs` before it
waits for the jobs, and `release` before the resume and when a node fails or is given up. What is made and when is
journalled on the node (journal.py NodeEntry: reservation, reservation_start, reserved_at, requeued) before the
next step, so a restarted machine finds its reservation and does not make a second. The commands are the drain
steps' data (engine/drain.py DrainSteps, written by drivers/slurm_reboot.py): nothing here knows Slurm.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

from reconciler.engine.drain import DrainFailed, NodeDrain, Run, wait_until
from reconciler.model.bounds import parse_duration
from reconciler.model.upgrade import Upgrade
from reconciler.rollout.journal import NodeEntry
from reconciler.rollout.upgrade_outcome import NodeFailed

Log = Callable[[str], None]
Ready = Literal["ready", "stopped", "taken"]  # go on / a stop was asked / someone else's drain holds the node


def hold(drain: NodeDrain, what: str) -> bool:
    """Drain unless drained (by anyone): True when drained here; NodeFailed when the drain failed."""
    try:
        return drain.hold()
    except DrainFailed as exc:
        raise NodeFailed(f"{what}: {exc}") from None


class Taking:
    """The drain or reservation, and the requeue, of each node of one upgrade."""

    def __init__(self, config: Upgrade, run: Run, entry: Callable[[str], NodeEntry],
                 note: Callable[..., None], log: Log, should_stop: Callable[[], bool], poll: float) -> None:
        self.config, self.run, self.entry, self.note, self.log = config, run, entry, note, log
        self.should_stop, self.poll = should_stop, poll

    def take(self, node: str, drain: NodeDrain) -> bool:
        """`draining`: drain NODE (mode drain, or a job without a time limit) or reserve it (mode reservation).
        False when it is drained already by someone else (not ours to lift, so not ours to use)."""
        reserve = drain.steps.reserve
        if self.config.mode != "reservation" or reserve is None or drain.drained():
            return hold(drain, "drain")
        ok, out = self.run(drain.steps.run_on, reserve)
        if not ok:
            raise NodeFailed(f"reservation: {out.strip()[-200:] or 'failed'}")
        words = out.split()
        if out.startswith("drain:") or len(words) != 2:
            self.log(f"upgrade: {node}: no reservation, drained instead: "
                     f"{out.removeprefix('drain:').strip()[:200] or 'the controller printed nothing'}")
            return hold(drain, "drain")
        self.note(node, reservation=words[0], reservation_start=words[1], reserved_at=time.time())
        self.log(f"upgrade: {node}: reservation {words[0]} starts {words[1]} (when its jobs are expected to end); "
                 "jobs run on it until then")
        return True

    def ready(self, node: str, drain: NodeDrain) -> Ready:
        """`waiting-for-jobs`, before the wait: a reserved node waits (bounded by drain_timeout from the
        reservation) until the reservation starts or no job it waits for is left, then is drained; then the jobs
        of `requeue`'s partitions are requeued."""
        entry = self.entry(node)
        if entry.reservation is not None and not drain.ours():
            taken = self._reserved(node, drain, entry)
            if taken != "ready":
                return taken
        self._requeue(node, drain)
        return "ready"

    def _reserved(self, node: str, drain: NodeDrain, entry: NodeEntry) -> Ready:
        steps = drain.steps

        def started() -> bool:
            if steps.reserved is not None and self.run(steps.run_on, steps.reserved)[0]:
                return True
            count = drain.jobs(waited_only=True)
            if count != self.entry(node).jobs:
                self.note(node, jobs=count)
            return count == 0
        left = (entry.reserved_at or time.time()) + parse_duration(self.config.drain_timeout) - time.time()
        if not wait_until(started, max(0.0, left), self.should_stop, self.poll):
            if self.should_stop():
                return "stopped"
            raise NodeFailed(f"reservation {entry.reservation} (from {entry.reservation_start}): jobs still running "
                             f"after drain_timeout {self.config.drain_timeout}")
        if not hold(drain, "drain at the reservation's start"):
            return "taken"
        self.log(f"upgrade: {node}: drained: its reservation started or no job it waits for is left")
        return "ready"

    def _requeue(self, node: str, drain: NodeDrain) -> None:
        command = drain.steps.requeue
        if not self.config.requeue or command is None:
            return
        ok, out = self.run(drain.steps.run_on, command)
        if not ok:
            self.log(f"upgrade: {node}: requeue failed, its jobs are waited for: {out.strip()[-200:]}")
            return
        done = [line.split()[1] for line in out.splitlines() if line.startswith("requeued ") and len(line.split()) > 1]
        kept = [line.removeprefix("kept ").strip() for line in out.splitlines() if line.startswith("kept ")]
        if done:
            self.note(node, requeued=[*self.entry(node).requeued, *done])
        if done or kept:
            self.log(f"upgrade: {node}: requeued {', '.join(done) or 'no job'} (partitions "
                     f"{', '.join(self.config.requeue)})" + (f"; waited for: {'; '.join(kept)[:300]}" if kept else ""))

    def release(self, node: str, drain: NodeDrain, must: bool) -> None:
        """Delete NODE's reservation, if it has one; MUST: a failure fails the node (a reservation left behind
        would keep jobs off a resumed node), else it is logged."""
        name = self.entry(node).reservation
        command = drain.steps.unreserve
        if name is None or command is None:
            return
        ok, out = self.run(drain.steps.run_on, command)
        if not ok:
            why = f"reservation {name} not deleted: {out.strip()[-200:] or 'failed'}"
            if must:
                raise NodeFailed(why)
            self.log(f"upgrade: {node}: {why}")
            return
        self.note(node, reservation=None)
        self.log(f"upgrade: {node}: reservation {name} deleted")

