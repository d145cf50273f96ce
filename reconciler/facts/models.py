"""Typed facts about a node."""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, Field, field_serializer


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


class Kept(Protocol):
    """A driver's own typed facts of one node (packages, live sysctls, the accounting database's answer)."""

    def to_json(self) -> dict[str, Any]:
        """Plain values, in a stable order (the facts' fingerprint and `reconciler facts`)."""


K = TypeVar("K")


class ClusterFacts(BaseModel):
    """Facts of every node plus Slurm's view from the controller."""

    nodes: dict[str, NodeFacts] = Field(default_factory=dict)
    slurm_nodes: dict[str, SlurmNodeFact] = Field(default_factory=dict)
    jobs: list[JobFact] = Field(default_factory=list)
    controller: str | None = None
    slurm_view_error: str | None = None
    kept: dict[str, dict[str, Any]] = Field(default_factory=dict, description="Each driver's own typed facts: "
                                            "type name -> node -> the object its absorb kept (cluster.keep)")

    @field_serializer("kept")
    def _kept_json(self, kept: dict[str, dict[str, Kept]]) -> dict[str, dict[str, Any]]:
        return {kind: {node: value.to_json() for node, value in sorted(by_node.items())}
                for kind, by_node in sorted(kept.items())}

    def keep(self, node: str, value: Kept) -> None:
        """Keep a driver's typed facts of NODE, under their type (one object per type and node)."""
        self.kept.setdefault(type(value).__name__, {})[node] = value

    def kept_of(self, kind: type[K], node: str) -> K | None:
        """NODE's facts of type KIND, as their absorb kept them (None: not gathered)."""
        value = self.kept.get(kind.__name__, {}).get(node)
        if value is not None and not isinstance(value, kind):
            raise TypeError(f"facts kept as {kind.__name__} for {node} are a {type(value).__name__}")
        return value

    def jobs_on(self, node: str) -> list[JobFact]:
        """Running jobs that use a node."""
        return [job for job in self.jobs if node in job.nodes]
