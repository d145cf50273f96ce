"""What the rollout needs of the workload manager and of the cluster's gates, as interfaces beside the driver
contract (engine/driver.py): the nodes it schedules, its view of their states and drains, which drains a rollback
may lift, and a resume (`WorkloadManager`); the gates run after a wave (`GateRunner`) and the upgrade machine's
hooks (engine/upgrade_steps.py). How a node is drained and waited empty is data its driver writes
(engine/drain.py `DrainSteps`).

Slurm implements the workload manager in drivers/slurm_workload.py, the gates in checks/gates.py and
checks/upgrade_gates.py; the callers (reconciler/cli, reconciler/daemon) pass them in with the drivers as one
`RolloutSite` (checks/rollout_site.py builds it). reconciler/rollout imports nothing from drivers/ or checks/ and no
module that says slurm (tests/test_layout.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from reconciler.common import hostlist
from reconciler.desired.loader import LoadedState
from reconciler.engine.apply import ApplyOptions
from reconciler.engine.driver import Driver
from reconciler.engine.upgrade_steps import Hooks
from reconciler.facts.models import ClusterFacts
from reconciler.model import DesiredState
from reconciler.model.upgrade import Upgrade
from reconciler.transport.base import Transport

Log = Callable[[str], None]


@dataclass(frozen=True)
class NodeStatus:
    """One node as the workload manager sees it: its state in the manager's words, its drain and whether it
    answers."""

    state: str
    reason: str | None = None
    drained: bool = False
    responding: bool = True
    down: bool = False  # not responding, or marked unusable by the manager: a gate watches for it


@dataclass
class NodesView:
    """The workload manager's nodes (name -> status), or why it could not be read (`error`)."""

    nodes: dict[str, NodeStatus] = field(default_factory=dict)
    error: str | None = None


def new_drains(before: NodesView, after: NodesView, nodes: Sequence[str]) -> dict[str, str]:
    """Nodes of NODES drained in AFTER that were not drained in BEFORE (or with another reason), with reasons."""
    out = {}
    for name in nodes:
        now = after.nodes.get(name)
        if now is None or not now.drained:
            continue
        was = before.nodes.get(name)
        if was is not None and was.drained and was.reason == now.reason:
            continue
        out[name] = now.reason or now.state
    return out


@dataclass
class GateResult:
    """What one gate found."""

    gate: str
    ok: bool
    message: str
    nodes: list[str] = field(default_factory=list)  # the nodes it failed on
    drained: dict[str, str] = field(default_factory=dict)  # wave nodes drained during the gate: reason
    seconds: float = 0.0
    skipped: bool = False
    failed: list[dict[str, str]] = field(default_factory=list)  # apply: each failed change (node, resource, error)

    def as_dict(self) -> dict[str, object]:
        """For the journal, the store and the status page."""
        return {"gate": self.gate, "ok": self.ok, "message": self.message, "nodes": self.nodes,
                "nodeset": hostlist.compress(self.nodes) if self.nodes else "", "drained": self.drained,
                "seconds": round(self.seconds, 2), "skipped": self.skipped,
                **({"failed": self.failed} if self.failed else {})}


class WorkloadManager(Protocol):
    """What the rollout needs of the workload manager."""

    def scheduled(self, state: DesiredState) -> list[str]:
        """The nodes of STATE the manager schedules jobs on, in inventory order."""

    def planned_view(self, facts: ClusterFacts) -> NodesView:
        """Its view of the nodes as the facts a plan gathered read it (no round trip)."""

    def status(self, state: str, reason: str | None) -> NodeStatus:
        """A node's status from the state and drain reason a journal kept."""

    def resumable(self, reason: str | None) -> bool:
        """True for a drain a rollback may lift: one the bad commit caused or the reconciler set, never an
        upgrade's (only the upgrade lifts those) nor anyone else's."""

    def resume(self, transport: Transport, state: DesiredState, node: str) -> str | None:
        """Resume NODE: None, or why it failed."""


class GateRunner(Protocol):
    """The gates of one rollout (checks/gates.py on a real cluster)."""

    def view(self) -> NodesView:
        """The workload manager's view now (one round trip)."""

    def run(self, name: str, nodes: list[str], before: NodesView) -> GateResult:
        """Run one gate by name on a wave's nodes; BEFORE: the view before the wave was applied."""

    def soak(self, nodes: list[str], before: NodesView, seconds: float) -> GateResult:
        """Wait SECONDS; a wave node drained meanwhile by a failing job fails the wave."""


GatesFactory = Callable[[LoadedState, Transport, Callable[[], bool], Log], GateRunner]  # (..., should_stop, log)
HooksFactory = Callable[[LoadedState, Upgrade, Transport, ApplyOptions, GateRunner, Log], Hooks]


@dataclass
class RolloutSite:
    """What a rollout is given of the cluster it runs on: the drivers, the workload manager, how its gates and
    the upgrade machine's hooks are made (the callers build it: checks/rollout_site.py)."""

    drivers: list[Driver]
    workload: WorkloadManager
    gates: GatesFactory
    hooks: HooksFactory
