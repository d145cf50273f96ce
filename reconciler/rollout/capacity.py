"""Capacity an upgrade may not go below: `max_unavailable` (a count or a percentage of the cluster's nodes) counting
every node that is not available, and `min_available` per partition.

NVIDIA's GPU Operator counts nodes already unavailable against its `maxUnavailable`, which takes a count or a
percentage (a Kubernetes IntOrString: a percentage is rounded up and never 0, as for a DaemonSet's
maxUnavailable); here likewise: a node DOWN, DRAINED or DRAINING by anyone, or not responding, is as unavailable
as one the upgrade took out. Slurm's words for those states are the workload manager's (drivers/slurm_workload.py
`node_status`: the State flags of `scontrol show node`, scontrol(1) of 22.05 and 24.11); this module sees only
`NodeStatus`. A node the machine took out and a node a human drained count alike; which drain is whose to lift is
not decided here (the machine resumes only its own: engine/drain.py `ours`).

`CapacityAdmission` is the upgrade machine's admission (admission.py): a node waits while taking it out would pass
`max_unavailable` or leave one of its partitions below its `min_available` (a node of another partition may go
meanwhile). `headroom` says the same for the plan: how many nodes can go at once now, and why.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from reconciler.common import hostlist
from reconciler.engine.workload import NodeStatus, NodesView
from reconciler.model import DesiredState
from reconciler.model.upgrade import Upgrade, scaled
from reconciler.rollout.admission import GO, Verdict

SHOWN = 4  # unavailable nodes named in a reason (the rest counted)


def unavailable(view: NodesView, nodes: Sequence[str], out: Sequence[str] = ()) -> dict[str, str]:
    """Of NODES, those not available now, with why: OUT (the upgrade's own, in flight) and what the view says."""
    found = {n: "out for the upgrade" for n in out}
    for name in nodes:
        status = view.nodes.get(name)
        if name in found or status is None:
            continue
        why = _why(status)
        if why is not None:
            found[name] = why
    return found


def _why(status: NodeStatus) -> str | None:
    if status.drained:
        return f"{status.state}" + (f": {status.reason!r}" if status.reason else "")
    if status.down or not status.responding:
        return status.state
    return None


def _named(found: dict[str, str]) -> str:
    items = [f"{n} {why}" for n, why in sorted(found.items())]
    return ", ".join(items[:SHOWN]) + (f" and {len(items) - SHOWN} more" if len(items) > SHOWN else "")


@dataclass(frozen=True)
class Capacity:
    """The limits of one upgrade over the cluster's nodes and partitions."""

    config: Upgrade
    nodes: Sequence[str]  # the workload manager's nodes (the percentage's whole)
    partitions: dict[str, list[str]]  # partition -> its nodes

    def limit(self) -> int:
        """max_unavailable as a node count."""
        return max(1, scaled(self.config.max_unavailable, len(self.nodes)))

    def why_not(self, node: str, down: dict[str, str]) -> str | None:
        """Why NODE may not go out with DOWN (node -> why) unavailable already; None: it may."""
        if node in down:  # already unavailable: taking it changes no count
            return None
        limit = self.limit()
        if len(down) + 1 > limit:
            return (f"max_unavailable {self.config.max_unavailable} of {len(self.nodes)} = {limit}: {len(down)} "
                    f"unavailable ({_named(down)})")
        for name, want in sorted(self.config.min_available.items()):
            members = self.partitions.get(name, [])
            if node not in members:
                continue
            need = scaled(want, len(members))
            left = len(members) - len([n for n in members if n in down]) - 1
            if left < need:
                return (f"partition {name}: min_available {want} of {len(members)} = {need}; taking {node} would "
                        f"leave {left} available")
        return None


def headroom(capacity: Capacity, view: NodesView, candidates: Sequence[str]) -> tuple[int, str]:
    """How many of CANDIDATES could go out at once now (taken in order), and why no more: for the plan."""
    if view.error:
        return 0, f"Slurm's view could not be read ({view.error}): none until it can"
    already = unavailable(view, capacity.nodes)
    down = dict(already)
    taken, partition = 0, ""
    for node in candidates:
        blocked = capacity.why_not(node, down)
        if blocked is None and node not in down:
            down[node] = "out for the upgrade"
            taken += 1
        elif blocked is not None and blocked.startswith("partition ") and not partition:
            partition = blocked
    head = f"max_unavailable {capacity.config.max_unavailable} of {len(capacity.nodes)} = {capacity.limit()}"
    head += f", {len(already)} unavailable already: {_named(already)}" if already else ", none unavailable now"
    return taken, head + (f"; {partition}" if partition else "")


@dataclass
class CapacityAdmission:
    """The machine's admission for capacity, reading the workload manager's view at most every MAX_AGE seconds."""

    capacity: Capacity
    view: Callable[[], NodesView]
    max_age: float = 1.0
    _seen: tuple[float, NodesView] | None = field(default=None, repr=False)

    def _now(self) -> NodesView:
        if self._seen is None or time.monotonic() - self._seen[0] >= self.max_age:
            self._seen = (time.monotonic(), self.view())
        return self._seen[1]

    def admit(self, node: str, out: Sequence[str]) -> Verdict:
        """Wait while taking NODE out would pass max_unavailable or a partition's min_available."""
        view = self._now()
        if view.error:  # fail closed: no node goes out on a guess
            return Verdict("wait", f"Slurm's view could not be read: {view.error}")
        why = self.capacity.why_not(node, unavailable(view, self.capacity.nodes, out))
        return GO if why is None else Verdict("wait", why)


def capacity_of(state: DesiredState, config: Upgrade, nodes: Sequence[str]) -> Capacity:
    """The capacity limits of CONFIG over NODES (the workload manager's) and STATE's partitions."""
    known = set(nodes)  # once: a partition of thousands of nodes is checked against it name by name
    partitions: dict[str, list[str]] = {}
    for partition in state.cluster.partitions:
        text = partition.nodes or ""
        members = list(nodes) if text.strip().upper() == "ALL" else hostlist.expand(text) if text else []
        partitions[partition.name] = [n for n in members if n in known]
    return Capacity(config, list(nodes), partitions)
