"""Which nodes get a commit in which wave: the canary first, then the steps, from the plan of the whole commit.

Pure: a plan and the desired state's `rollout:` in, waves out. The engine's `Change.scope` decides what may go
in waves: a change the drivers mark `cluster` (Slurm's files, the munge key, NFS exports: what must be the same
everywhere) makes the whole commit one `cluster` wave, still gated. A change marked `lead` (a Slurm upgrade's
slurmdbd and controllers, which every slurmd must wait for) puts its node in a gated `lead` wave before the others;
the rest then go in the usual waves. Slurm nodes go first (the canary is where a smoke job can run), then the other
changing nodes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from reconciler.common import hostlist
from reconciler.engine.plan import Plan
from reconciler.model import Rollout, parse_duration


@dataclass
class Wave:
    """One step of a rollout: its nodes, and whether gates follow it."""

    index: int
    name: str
    nodes: list[str]
    gated: bool = True
    cluster: bool = False  # the whole commit at once (a cluster-wide change), still gated
    why: str = ""

    @property
    def nodeset(self) -> str:
        """The nodes folded (`gpu[01-04]`)."""
        return hostlist.compress(self.nodes) if self.nodes else ""

    def as_dict(self) -> dict[str, object]:
        """For JSON, the journal and the status page."""
        return {"index": self.index, "name": self.name, "nodes": self.nodes, "nodeset": self.nodeset,
                "gated": self.gated, "cluster": self.cluster, "why": self.why}

    @classmethod
    def from_dict(cls, data: dict) -> Wave:
        """The inverse of as_dict."""
        return cls(index=int(data["index"]), name=str(data["name"]), nodes=list(data["nodes"]),
                   gated=bool(data.get("gated", True)), cluster=bool(data.get("cluster", False)),
                   why=str(data.get("why", "")))


@dataclass
class WavePlan:
    """The waves of a commit and what gates them."""

    waves: list[Wave] = field(default_factory=list)
    gates: list[str] = field(default_factory=list)
    soak: int = 0
    mode: str = "progressive"

    def as_dict(self) -> dict[str, object]:
        """For the JSON plan and the journal."""
        return {"mode": self.mode, "waves": [w.as_dict() for w in self.waves], "gates": self.gates,
                "soak_seconds": self.soak}

    def lines(self) -> list[str]:
        """One line per wave, for the text plan, the PR comment and the status page."""
        if not self.waves:
            return []
        out = []
        for wave in self.waves:
            gates = ", ".join(self.gates) if wave.gated and self.gates else "no gates"
            extra = f" ({wave.why})" if wave.why else ""
            out.append(f"wave {wave.index}/{len(self.waves)} {wave.name}: {wave.nodeset} "
                       f"[{len(wave.nodes)} node(s)]; then {gates}{extra}")
        return out


def changing_nodes(plan: Plan) -> list[str]:
    """Nodes with a change or a follow-up step, in no particular order."""
    return sorted({c.node for c in plan.changing()} | {f.node for f in plan.followups})


def _size(step: str | int, total: int) -> int:
    """A step's cumulative node count: a count, or a percentage of TOTAL rounded up (at least 1)."""
    if isinstance(step, int):
        return min(step, total)
    return min(total, max(1, math.ceil(total * float(step.rstrip("%")) / 100.0)))


def gate_names(rollout: Rollout, has_node_checks: bool) -> list[str]:
    """The gates every gated wave passes, in the order they run."""
    gates = []
    if rollout.gates.node_checks and has_node_checks:
        gates.append("node-checks")
    if rollout.gates.smoke_job:
        gates.append("smoke-job")
    if rollout.gates.nccl:
        gates.append("nccl")
    return gates


def plan_waves(plan: Plan, rollout: Rollout, order: Sequence[str], slurm_nodes: Sequence[str], *,
               has_node_checks: bool = False, bootstrap: str | None = None) -> WavePlan:
    """The waves of PLAN. ORDER: the inventory order; SLURM_NODES: the nodes a job can run on (they go first).

    BOOTSTRAP: why nothing can be gated (e.g. Slurm does not answer before the apply): one ungated wave.
    """
    nodes = set(changing_nodes(plan))
    if not nodes:
        return WavePlan(mode=rollout.waves)
    slurm = set(slurm_nodes)
    ordered = [n for n in order if n in nodes and n in slurm] + [n for n in order if n in nodes and n not in slurm]
    ordered += sorted(nodes - set(ordered))
    soak = parse_duration(rollout.soak)
    if rollout.waves == "all":
        return WavePlan([Wave(1, "all", ordered, gated=False, why="rollout.waves: all")], [], 0, "all")
    leading = {c.node for c in plan.changing() if c.scope == "lead"}
    if bootstrap and not (leading and set(ordered) - leading):
        return WavePlan([Wave(1, "all", ordered, gated=False, why=bootstrap)], [], 0, "bootstrap")
    gates = gate_names(rollout, has_node_checks)
    cluster_wide = sorted({c.resource for c in plan.changing() if c.scope == "cluster"})
    if cluster_wide:
        why = "cluster-wide: " + ", ".join(cluster_wide[:3]) + (" ..." if len(cluster_wide) > 3 else "")
        return WavePlan([Wave(1, "cluster", ordered, cluster=True, why=why)], ["slurm", *gates], soak)
    waves: list[Wave] = []
    if leading:  # bootstrap: Slurm answers only once the lead wave restarted it; the later waves are gated
        lead_why = "goes first: " + ", ".join(sorted({c.resource for c in plan.changing() if c.scope == "lead"})[:3])
        waves.append(Wave(1, "lead", [n for n in ordered if n in leading], gated=not bootstrap,
                          why=f"{lead_why}; {bootstrap}" if bootstrap else lead_why))
        ordered = [n for n in ordered if n not in leading]
        if not ordered:
            return WavePlan(waves, gates, soak)
    left = list(ordered)
    if isinstance(rollout.canary, str) and not rollout.canary.endswith("%"):
        named = set(hostlist.expand(rollout.canary))
        canary = [n for n in left if n in named] or left[:1]
    else:
        canary = left[:_size(rollout.canary, len(ordered))]
    waves.append(Wave(len(waves) + 1, "canary", canary))
    left = [n for n in left if n not in canary]
    done = len(canary)
    for step in rollout.steps:
        if not left:
            break
        take = max(0, _size(step, len(ordered)) - done)
        if take == 0:
            continue
        waves.append(Wave(len(waves) + 1, f"step {len(waves)}", left[:take]))
        done += take
        left = left[take:]
    if left:
        waves.append(Wave(len(waves) + 1, f"step {len(waves)}", left))
    return WavePlan(waves, gates, soak)
