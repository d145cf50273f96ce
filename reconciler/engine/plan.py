"""The plan: per node and resource, what would change, why, and with what consequence."""

from __future__ import annotations

from collections import Counter
from typing import Literal

from pydantic import BaseModel, Field

from reconciler.engine.fold import SHORT_CAP, cap_nodeset, fold_mentions, fold_names, node_key, nodes_phrase
from reconciler.engine.ops import Op

Action = Literal["ok", "create", "update", "delete", "unknown", "error"]
CHANGING: tuple[Action, ...] = ("create", "update", "delete")


class Change(BaseModel):
    """One resource on one node: its action, diff and the operations that apply it."""

    node: str
    driver: str
    resource: str
    action: Action
    summary: str = ""
    diff: str | None = None
    ops: list[Op] = Field(default_factory=list)
    phase: int = 0
    run_on: str | None = Field(default=None, description="Node whose shell runs the ops (default: node)")
    drift: bool = Field(default=False, description="The node differs from what was last applied (not from Git)")

    @property
    def changing(self) -> bool:
        """True for create, update and delete."""
        return self.action in CHANGING


class SlurmActions(BaseModel):
    """What a Slurm configuration change needs after the files are written."""

    reconfigure: bool = False
    restart_slurmctld: bool = False
    restart_slurmd: list[str] = Field(default_factory=list)
    reasons: list[str] = Field(default_factory=list)
    drain_first: dict[str, list[str]] = Field(default_factory=dict, description="node -> running job ids")

    @property
    def any(self) -> bool:
        """True when some action is needed."""
        return self.reconfigure or self.restart_slurmctld or bool(self.restart_slurmd)

    def describe(self) -> list[str]:
        """Human sentences for the report; node sets folded (`gpu[001-1024]`) and capped in length."""
        out = []
        if self.restart_slurmctld:
            out.append("restarts slurmctld on the controller")
        if self.restart_slurmd:
            text = f"restarts slurmd on {nodes_phrase(self.restart_slurmd)}"
            if self.drain_first:
                drained = sorted(self.drain_first, key=node_key)
                jobs = sorted({j for js in self.drain_first.values() for j in js}, key=_job_key)
                shown = ", ".join(jobs[:10]) + (", ..." if len(jobs) > 10 else "")
                verb = "has" if len(drained) == 1 else "have"
                text += (f"; {len(drained):,} {verb} running jobs and will be drained first: "
                         f"{cap_nodeset(fold_names(drained), SHORT_CAP)} (jobs {shown})")
            out.append(text)
        if self.reconfigure and not self.restart_slurmctld:
            out.append("runs `scontrol reconfigure`")
        return out

    def folded_reasons(self) -> list[str]:
        """The reasons, those that differ only by a node's name folded into one (`... on gpu[01-16]`)."""
        return fold_mentions(self.reasons, [*self.restart_slurmd, *self.drain_first])


def _job_key(job: str) -> tuple[int, str]:
    head = job.split("_")[0]
    return (int(head) if head.isdigit() else 0, job)


class Plan(BaseModel):
    """Every change of a reconcile, the Slurm actions, and the nodes that could not be reached."""

    source: str
    commit: str | None = None
    changes: list[Change] = Field(default_factory=list)
    slurm: SlurmActions = Field(default_factory=SlurmActions)
    unreachable: dict[str, str] = Field(default_factory=dict)
    errors: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)

    def changing(self) -> list[Change]:
        """The changes that would modify something."""
        return [c for c in self.changes if c.changing]

    def nodes_changing(self) -> list[str]:
        """Nodes with at least one change, sorted."""
        return sorted({c.node for c in self.changing()})

    def counts(self) -> Counter[str]:
        """How many resources have each action."""
        return Counter(c.action for c in self.changes)

    @property
    def has_changes(self) -> bool:
        """True when applying would change something."""
        return bool(self.changing()) or self.slurm.any

    def verdict(self) -> str:
        """One line: no changes / N changes on M nodes, plus unreachable nodes."""
        changing = self.changing()
        text = (f"{len(changing)} change(s) on {len(self.nodes_changing())} node(s)" if changing
                else "no changes")
        if self.unreachable:
            text += f"; {len(self.unreachable)} node(s) unreachable"
        if self.errors:
            text += f"; {len(self.errors)} error(s)"
        return text
