"""Typed facts about a node."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class FileFact(BaseModel):
    """A file on a node: whether it exists, its hash, mode, owner and (small files) content."""

    exists: bool
    sha256: str | None = None
    mode: str | None = None
    owner: str | None = None
    group: str | None = None
    size: int | None = None
    content: str | None = None
    error: str | None = None


class StatFact(BaseModel):
    """A path's existence, size and mtime (enroot images)."""

    exists: bool
    size: int | None = None
    mtime: int | None = None


class MountFact(BaseModel):
    """One line of /proc/mounts."""

    source: str
    mountpoint: str
    fstype: str
    options: list[str]


class SlurmNodeFact(BaseModel):
    """Slurm's view of a node, from `scontrol show node -o` on the controller."""

    name: str
    state: str = Field(description="Full state, e.g. IDLE+DRAIN")
    reason: str | None = None
    version: str | None = Field(default=None, description="The Slurm version its slurmd registered with "
                                "(`Version=`, e.g. 26.05.5): the running daemon's, not the installed package's")
    next_state: str | None = Field(default=None, description="`NextState=` (24.11): the state Slurm gives the node "
                                   "after a pending reboot, e.g. UNDRAIN after `scontrol reboot ASAP`")

    @property
    def flags(self) -> set[str]:
        """The state split into its words: {'IDLE', 'DRAIN'}."""
        return set(self.state.replace("*", "").split("+"))

    @property
    def drained(self) -> bool:
        """True when the node is draining or drained."""
        return bool(self.flags & {"DRAIN", "DRAINING", "DRAINED"})

    @property
    def responding(self) -> bool:
        """True when slurmctld hears from the node's slurmd."""
        return not (self.flags & {"NOT_RESPONDING", "DOWN", "UNKNOWN", "FUTURE"}) and "*" not in self.state


class JobFact(BaseModel):
    """A running or completing job, from squeue."""

    job_id: str
    state: str
    nodes: list[str]
    user: str = ""
    name: str = ""


class ServiceFact(BaseModel):
    """Whether a service runs, by its service manager's word."""

    name: str
    running: bool
    detail: str = ""
    enabled: str | None = Field(default=None, description="systemd's is-enabled word, when asked for")


class NodeFacts(BaseModel):
    """Everything the drivers need to know about one node."""

    node: str
    reachable: bool
    error: str | None = None
    hostname: str | None = None
    files: dict[str, FileFact] = Field(default_factory=dict)
    stats: dict[str, StatFact] = Field(default_factory=dict)
    mounts: list[MountFact] = Field(default_factory=list)
    services: dict[str, ServiceFact] = Field(default_factory=dict)
    slurm_version: str | None = None
    python_missing: bool = False


class ClusterFacts(BaseModel):
    """Facts of every node plus Slurm's view from the controller."""

    nodes: dict[str, NodeFacts] = Field(default_factory=dict)
    slurm_nodes: dict[str, SlurmNodeFact] = Field(default_factory=dict)
    jobs: list[JobFact] = Field(default_factory=list)
    controller: str | None = None
    slurm_view_error: str | None = None
    extra: dict[str, Any] = Field(default_factory=dict, description="Cluster-wide facts a driver keeps under "
                                  "its own name (plain JSON values)")

    def jobs_on(self, node: str) -> list[JobFact]:
        """Running jobs that use a node."""
        return [job for job in self.jobs if node in job.nodes]
