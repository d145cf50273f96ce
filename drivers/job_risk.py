"""What slurm.conf changes do to running jobs, as observed on real daemons; said in the plan, never silent.

Observed on 22.05 and 24.11 (tests/params/test_job_kill_steps_testbed.py, a job on a node whose CPUs go 16 -> 32):
slurmctld ends a running job whose node's socket/core count changed when it loads the new slurm.conf with the job
in its state: at a slurmctld restart (both releases) and at `scontrol reconfigure` from 24.11 (it re-executes
slurmctld; 22.05's reconfigure keeps the old count, the job lives). Its log says "Aborting JobId=N due to change in
socket/core configuration of allocated nodes"; a requeueable batch job is requeued (it runs again from the start,
Restarts=1), any other ends NODE_FAIL. A restart of the node's slurmd, drained or not, ends nothing (slurmstepd
survives it). So the controller step gets the node drained and emptied first (FollowUp.protect), then resumed.
"""

from __future__ import annotations

from dataclasses import dataclass

from reconciler.drivers.slurm_consequences import RESTARTS_SLURMD, change_kind, parse_slurm_conf
from reconciler.facts.models import ClusterFacts

# Only CPUs was observed. The other keys define the same CPU count (CPUs = Boards x SocketsPerBoard x CoresPerSocket
# x ThreadsPerCore; Sockets is Boards x SocketsPerBoard; Procs is CPUs' old name) and the driver treats them as one
# hardware definition (CURATED_NODE_RESTART_KEYS; Procs aside); RealMemory, Gres, CpuSpecList and MemSpecLimit
# were not observed killing jobs and are left out. Lower case: slurm.conf keys are case-insensitive.
CPU_KEYS = ("cpus", "procs", "boards", "sockets", "socketsperboard", "corespersocket", "threadspercore")
OBSERVED = "observed on 22.05 and 24.11: tests/params/test_job_kill_steps_testbed.py"
# A slurmd restart keeps running job steps, so a change whose only consequence is one restarts slurmd in place
# (slurmd_only): slurmstepd "is spawned by the slurmd daemon when a job step is launched and terminates when the job
# step does" (slurmstepd.8, 22.05), it lives as long as the step, not as slurmd (slurmd.8 says nothing of restarts).
# Observed on 22.05 and 24.11 with a job longer than SlurmdTimeout across a SlurmdPort change applied by the product
# (tests/params/test_job_kill_steps_testbed.py).


def cpu_keys_changed(before: str, after: str) -> dict[str, list[str]]:
    """Node -> the CPU-defining keys of its NodeName= line that differ between two slurm.conf texts (nodes in both)."""
    old, new = parse_slurm_conf(before).nodes, parse_slurm_conf(after).nodes
    out: dict[str, list[str]] = {}
    for node in sorted(old.keys() & new.keys()):
        was = {k.lower(): v for k, v in old[node].items()}
        now = {k.lower(): v for k, v in new[node].items()}
        if keys := [k for k in CPU_KEYS if was.get(k) != now.get(k)]:
            out[node] = keys
    return out


def _spelled(keys: list[str]) -> str:
    names = {"cpus": "CPUs", "procs": "Procs", "boards": "Boards", "sockets": "Sockets",
             "socketsperboard": "SocketsPerBoard", "corespersocket": "CoresPerSocket",
             "threadspercore": "ThreadsPerCore"}
    return ", ".join(names[k] for k in keys)


@dataclass
class JobKill:
    """A node whose CPU definition changes while jobs run on it."""

    node: str
    keys: list[str]
    jobs: list[str]

    def warning(self, step: str, protected: bool = True) -> str:
        """The plan's warning: the node, its jobs, the STEP that would end them and what apply does about it."""
        node, many = self.node, len(self.jobs) > 1
        them = "them" if many else "it"
        head = (f"{node}: changing {_spelled(self.keys)} while job{'s' if many else ''} {', '.join(self.jobs)} "
                f"run{'' if many else 's'} there: {step} would end {them} (requeued to run again from the start, "
                f"or NODE_FAIL where it cannot be requeued; {OBSERVED})")
        if protected:
            return (f"{head}; apply first drains {node} and waits (at most --drain-timeout) until "
                    f"{'they end' if many else 'it ends'}, then runs {step} and resumes {node}")
        return f"{head}; slurmctld is not running, so nothing can drain {node} before {step}"

    def reason(self, step: str, protected: bool = True) -> str:
        """The controller STEP's reason: whose jobs it would end (reasons print under all steps: it is named)."""
        kept = f": {self.node} is drained and emptied first" if protected else ""
        return (f"{step} would end running jobs {', '.join(self.jobs)} on {self.node} "
                f"({_spelled(self.keys)} changed){kept}")


def slurmd_only(before: str | None, after: str, family: str) -> bool:
    """True when every change between two readable slurm.conf texts that restarts slurmd is a global key whose
    only consequence is that restart (SlurmdPort): the restart can be done in place, undrained."""
    if before is None:
        return False
    old, new = parse_slurm_conf(before), parse_slurm_conf(after)
    if old.error or new.error or set(old.nodes) != set(new.nodes):
        return False
    changed = {k for k in old.globals.keys() | new.globals.keys() if old.globals.get(k) != new.globals.get(k)}
    kinds = [change_kind(key, family) for key in changed]
    return "restart_slurmd" in kinds and not any(kind in RESTARTS_SLURMD and kind != "restart_slurmd"
                                                 for kind in kinds)


def job_kills(before: str | None, after: str, facts: ClusterFacts) -> list[JobKill]:
    """The nodes whose CPU definition changes between the controller's slurm.conf BEFORE and AFTER while jobs run
    on them (none when the controller's file is new: nothing runs against it)."""
    if before is None:
        return []
    found = ((node, keys, [job.job_id for job in facts.jobs_on(node)])
             for node, keys in cpu_keys_changed(before, after).items())
    return [JobKill(node, keys, jobs) for node, keys, jobs in found if jobs]
