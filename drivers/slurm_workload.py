"""Slurm as the rollout's workload manager (engine/workload.py `WorkloadManager`): the nodes it schedules, a node's
status read from `scontrol show node`'s State and Reason, which drains a rollback may lift, and a resume.

The rollout (reconciler/rollout) knows none of this: the callers pass `SlurmWorkload()` in (checks/rollout_site.py).
"""

from __future__ import annotations

from reconciler.desired.inventory import node_specs, slurm_nodes
from reconciler.drivers.node_state import UPGRADE_PREFIX, ours, resume_command
from reconciler.engine.workload import NodeStatus, NodesView
from reconciler.facts.models import ClusterFacts, SlurmNodeFact
from reconciler.model import DesiredState
from reconciler.transport.base import Transport

# Drains Slurm sets itself when a job's scripts fail on a node: a rollback may resume these (set during a gate).
SLURM_SCRIPT_DRAINS = ("Prolog error", "Epilog error", "Kill task failed", "prolog failed", "epilog failed")


def script_drain(reason: str | None) -> bool:
    """True for a drain Slurm sets when a job's prolog/epilog failed (what a bad commit causes)."""
    return bool(reason) and any(mark.lower() in (reason or "").lower() for mark in SLURM_SCRIPT_DRAINS)


def node_status(fact: SlurmNodeFact) -> NodeStatus:
    """A node of `scontrol show node` as the rollout reads it: down when not responding or INVAL."""
    return NodeStatus(state=fact.state, reason=fact.reason, drained=fact.drained, responding=fact.responding,
                      down=not fact.responding or "INVAL" in fact.flags)


def nodes_view(nodes: dict[str, SlurmNodeFact], error: str | None) -> NodesView:
    """Slurm's nodes (and why they could not be read) as the rollout's view."""
    return NodesView(nodes={name: node_status(fact) for name, fact in nodes.items()}, error=error)


class SlurmWorkload:
    """Slurm as the workload manager of a rollout."""

    def scheduled(self, state: DesiredState) -> list[str]:
        """The nodes slurm.conf defines, in inventory order."""
        return slurm_nodes(state)

    def planned_view(self, facts: ClusterFacts) -> NodesView:
        """Slurm's view as the plan's facts read it (`scontrol show node` on the controller)."""
        return nodes_view(dict(facts.slurm_nodes), facts.slurm_view_error)

    def status(self, state: str, reason: str | None) -> NodeStatus:
        """A node's status from a State and Reason a journal kept."""
        return node_status(SlurmNodeFact(name="", state=state, reason=reason))

    def resumable(self, reason: str | None) -> bool:
        """A failed job script's drain (Slurm's) or the reconciler's own, never an upgrade's."""
        return (script_drain(reason) or ours(reason)) and not (reason or "").startswith(UPGRADE_PREFIX)

    def resume(self, transport: Transport, state: DesiredState, node: str) -> str | None:
        """`scontrol update nodename=NODE state=resume` on the first controller: None, or why it failed."""
        result = transport.run(node_specs(state)[state.cluster.controller_names[0]], resume_command(node))
        return None if result.ok else (result.error or result.stderr.strip())
