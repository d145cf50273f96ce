"""The plan: per node and resource, what would change, why, and with what consequence."""

from __future__ import annotations

from collections import Counter
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from reconciler.engine import followups as followup_text
from reconciler.engine.followups import FollowUp
from reconciler.engine.ops import Op
from reconciler.engine.undo import Restore
from reconciler.model.upgrade import Needs
from reconciler.model.values import visible

Action = Literal["ok", "create", "update", "delete", "unknown", "error"]
# What a change needs before it takes effect, beyond its own ops (`Needs`, from the model: declared by drivers as
# data; the engine applies such a change only when the caller allows that consequence, and never performs the
# reboot or reload itself).
NEEDS_TEXT: dict[str, str] = {"reboot": "needs a reboot", "driver-reload": "needs a driver reload"}
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
    followups: list[FollowUp] = Field(default_factory=list, description="What must follow when this changes")
    scope: Literal["node", "cluster", "lead"] = Field(default="node", description="cluster: must be the same "
                                                      "everywhere (goes out to every node in one gated wave); lead: "
                                                      "its node goes first, in a gated wave of its own, before the "
                                                      "waves of the rest; node: may go in waves")
    needs: Needs | None = Field(default=None, description="Takes effect only after a reboot or a driver reload: "
                                "applied only when the caller allows it (apply --allow reboot|driver-reload)")
    restore: Restore | None = Field(default=None, exclude=True, description="Set by a driver whose ops are "
                                    "commands: how to undo them (files: reconciler/engine/before_image.py)")

    @field_validator("summary", "diff")
    @classmethod
    def _shown_safely(cls, value: str | None) -> str | None:
        """Summaries and diffs carry text read from nodes: no escape sequence or bidi override reaches a report."""
        return None if value is None else visible(value)

    @property
    def changing(self) -> bool:
        """True for create, update and delete."""
        return self.action in CHANGING


class Plan(BaseModel):
    """Every change of a reconcile, the steps that must follow them, and the nodes that could not be reached."""

    source: str
    commit: str | None = None
    changes: list[Change] = Field(default_factory=list)
    followups: list[FollowUp] = Field(default_factory=list, description="Merged, in run order")
    unreachable: dict[str, str] = Field(default_factory=dict)
    errors: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    rollout: dict[str, Any] | None = Field(default=None, description="How the changes go out (set by the rollout "
                                           "layer): mode, waves with their node sets, gates, soak; `lines` to show")

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
        return bool(self.changing()) or bool(self.followups)

    def consequences(self) -> list[str]:
        """The follow-up steps as sentences, node sets folded (`restarts slurmd on gpu[01-16] (rolling)`)."""
        return followup_text.describe(self.followups)

    def consequence_reasons(self) -> list[str]:
        """Why the follow-ups are needed, folded by node."""
        return followup_text.folded_reasons(self.followups)

    def verdict(self) -> str:
        """One line: no changes / N changes on M nodes, plus unreachable nodes."""
        changing = self.changing()
        text = (f"{len(changing)} change(s) on {len(self.nodes_changing())} node(s)" if changing
                else "no changes")
        if self.followups and not changing:  # owed by an earlier apply (reconciler/engine/owed.py)
            text += f"; {len(self.followups)} follow-up step(s) to run"
        if self.unreachable:
            text += f"; {len(self.unreachable)} node(s) unreachable"
        if self.errors:
            text += f"; {len(self.errors)} error(s)"
        return text
