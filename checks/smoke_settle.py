"""Waiting for Slurm to settle after the smoke job: its jobs ended, and every drain they caused recorded.

What is waited for, not how long (Slurm 22.05, seen on the testbed):

- An epilog failure is recorded ("Epilog error" drain) when slurmctld takes the node's epilog-complete message,
  the same message that ends the job's COMPLETING on that node. So once no job of ours is left in squeue
  (pending, running or completing), every epilog drain (and "Kill task failed") is there.
- A prolog failure (without PrologFlags=Alloc) reaches srun first ("Task launch for StepId=... failed on node X:
  Job prolog failed") and slurmctld a moment later (slurmd's registration message: "Prolog error" drain), in no
  fixed order with the job's end; under load srun may even exit on the job's cancel before it prints that line.
  So for each node srun names, and each node where the failed step's task never ran (no OK or FAIL line), the
  wait goes on until its drain shows, bounded by DRAIN_WAIT (only a failing job can wait that long). With
  PrologFlags=Alloc slurmctld drains before it ends the job: the first rule covers it.

A passing job therefore costs what Slurm needs to end it (one or two polls), not a constant.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from reconciler.checks.slurm_view import VIEW_COMMAND, SlurmView, parse_view
from reconciler.common import hostlist
from reconciler.desired.inventory import NodeSpec
from reconciler.facts.sections import script, split_sections
from reconciler.transport.base import Transport

POLL = 0.25
DRAIN_WAIT = 30.0  # seconds a node srun saw fail its prolog may take to show its drain (a bound, not a wait)
_PROLOG_FAILED = [re.compile(r"Task launch for \S+ failed on node (\S+?):.*prolog", re.IGNORECASE),
                  re.compile(r"Prolog failure on node (\S+)", re.IGNORECASE)]


@dataclass
class Settled:
    """Slurm's view once settled (or at the bound), and what was still unsettled then (node -> why)."""

    view: SlurmView
    unsettled: dict[str, str] = field(default_factory=dict)
    jobs: list[str] = field(default_factory=list)  # our jobs still in squeue at the bound: "id state nodes"


def prolog_failures(output: str) -> set[str]:
    """Nodes srun says the job's prolog failed on (Slurm will drain them: "Prolog error")."""
    return {hit.group(1) for line in output.splitlines() for pattern in _PROLOG_FAILED
            if (hit := pattern.search(line)) is not None}


def jobs_command(job_name: str, reservation: str) -> str:
    """squeue of our smoke jobs not yet ended (pending, running, completing): id, state, nodes."""
    return shlex.join(["squeue", "-h", f"--name={job_name}", f"--reservation={reservation}", "-o", "%i %T %N"])


def settle_command(job_name: str, reservation: str) -> str:
    """One command on the controller: our jobs still in squeue, then Slurm's view. In that order: a job seen
    gone by squeue has had its epilog drains recorded before the view is read (the other way round, the view
    could be read while a node was still COMPLETING, and squeue a moment later find the job gone)."""
    return script([("ours", jobs_command(job_name, reservation))]) + VIEW_COMMAND


def parse_settle(output: str) -> tuple[SlurmView, list[str] | None]:
    """Slurm's view and our jobs left (None when squeue failed)."""
    view = parse_view(output)
    ours = split_sections(output).get("ours")
    if ours is None or ours.rc != 0:
        if view.error is None:
            view.error = "squeue of the smoke jobs: " + (ours.lines[-1] if ours and ours.lines else "no output")
        return view, None
    return view, ours.lines


def _waiting(view: SlurmView, jobs: list[str] | None, expect_drain: set[str]) -> dict[str, str]:
    """What is not settled yet: node (or "jobs") -> why."""
    if view.error is not None or jobs is None:
        return {"slurm": view.error or "squeue failed"}
    left = {f"job {line.split()[0]}": f"still {line.split()[1]}" for line in jobs if len(line.split()) >= 2}
    for node in sorted(expect_drain):
        fact = view.nodes.get(node)
        if fact is None or not fact.drained:
            left[node] = "its task did not run, a drain may follow"
    return left


def settle(transport: Transport, controller: NodeSpec, job_name: str, reservation: str, expect: set[str],
           limit: float, should_stop: Callable[[], bool] = lambda: False) -> Settled:
    """Poll until our jobs left squeue and every node of EXPECT (may be drained) shows a drain; LIMIT bounds it."""
    started = time.monotonic()
    while True:
        result = transport.run(controller, settle_command(job_name, reservation))
        if result.error is not None:
            view, jobs = SlurmView(error=f"controller {controller.name}: {result.error}"), None
        else:
            view, jobs = parse_settle(result.stdout + result.stderr)
        elapsed = time.monotonic() - started
        # A drain Slurm never records (another version's behaviour) must not hold the gate past DRAIN_WAIT.
        waiting = _waiting(view, jobs, expect if elapsed < DRAIN_WAIT else set())
        if not waiting:
            return Settled(view)
        if elapsed >= limit or should_stop():
            return Settled(view, waiting, list(jobs or []))
        time.sleep(POLL)


def unsettled_nodes(jobs: Sequence[str], nodes: Sequence[str]) -> dict[str, str]:
    """The wave's nodes a job of ours still held at the bound ("id state nodes" lines), with why."""
    out: dict[str, str] = {}
    for line in jobs:
        words = line.split()
        if len(words) >= 3:
            for node in sorted(hostlist.expand_set(words[2]) & set(nodes)):
                out[node] = f"smoke job {words[0]} still {words[1]}"
    return out
