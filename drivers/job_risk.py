"""slurm.conf changes that end running jobs whatever the plan does: said in the plan, never silent.

Observed on real daemons (tests/params/test_observed_consequences_testbed.py, docs/slurm-parameters.md):
changing a node's CPUs kills a job running on that node however the change is applied, at the controller's step
(the slurmctld restart on 22.05, `scontrol reconfigure` on 24.11). That step runs before the node's drained slurmd
restart, so draining cannot save the job: the plan names the node and its jobs instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from reconciler.drivers.slurm_consequences import parse_slurm_conf
from reconciler.facts.models import ClusterFacts

# Only CPUs was observed. The other keys define the same CPU count (CPUs = Boards x SocketsPerBoard x CoresPerSocket
# x ThreadsPerCore; Sockets is Boards x SocketsPerBoard; Procs is CPUs' old name) and the driver treats them as one
# hardware definition (CURATED_NODE_RESTART_KEYS; Procs aside); RealMemory, Gres, CpuSpecList and MemSpecLimit
# were not observed killing jobs and are left out. Lower case: slurm.conf keys are case-insensitive.
CPU_KEYS = ("cpus", "procs", "boards", "sockets", "socketsperboard", "corespersocket", "threadspercore")
OBSERVED = "observed on 22.05 and 24.11"


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

    def warning(self, step: str) -> str:
        """The plan's warning: the node, its jobs, the STEP that kills them and how to keep them."""
        node, many = self.node, len(self.jobs) > 1
        return (f"{node}: changing {_spelled(self.keys)} kills its running job{'s' if many else ''} "
                f"{', '.join(self.jobs)} at {step} on the controller, before {node} is drained (Slurm ends "
                f"{'them' if many else 'it'} however the change is applied: {OBSERVED}); to keep "
                f"{'them' if many else 'it'}, drain {node} and let {'them' if many else 'it'} finish before applying")

    def reason(self, step: str) -> str:
        """The controller STEP's reason: what it kills (reasons print under all steps: the step is named)."""
        return f"{step} kills running jobs {', '.join(self.jobs)} on {self.node} ({_spelled(self.keys)} changed)"


def job_kills(before: str | None, after: str, facts: ClusterFacts) -> list[JobKill]:
    """The nodes whose CPU definition changes between the controller's slurm.conf BEFORE and AFTER while jobs run
    on them (none when the controller's file is new: nothing runs against it)."""
    if before is None:
        return []
    found = ((node, keys, [job.job_id for job in facts.jobs_on(node)])
             for node, keys in cpu_keys_changed(before, after).items())
    return [JobKill(node, keys, jobs) for node, keys, jobs in found if jobs]
