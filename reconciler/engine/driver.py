"""The driver contract, whole: everything the engine may call on a managed kind. Drivers (drivers/) implement it;
the engine imports no driver, its callers pass the list (`drivers.all_drivers()`).

Required: `name`, `phase` (its place in drivers/phases.py), `request` (the facts it needs on a node) and `plan`
(the node's changes). Optional, with their defaults in `DriverDefaults` (a driver subclasses it and overrides
what it needs): `scope` (`cluster`: every change of the driver must be the same everywhere, one gated wave),
`absorb` (its own facts parsed from a node's answers, kept typed: `cluster.keep(node, obj)`, read back with
`ctx.facts.kept_of(Type, node)`), `review` (what it concludes from the whole plan, as edits the engine makes:
engine/review.py), `followups` (the steps that follow from the whole plan; it changes nothing) and `converged`
(a node's facts as they read once the desired state holds: planning without SSH, drivers/converged.py).
The engine calls these directly; nothing is looked up with getattr (tests/test_layout.py).

In `make_plan`: every driver's `plan` per node; then each driver's `review`, in the drivers' order, its edits
made before the next reviews; then every driver's `followups`, merged with the changes' own.
"""

from __future__ import annotations

from typing import Literal, Protocol

from reconciler.engine.context import Context
from reconciler.engine.followups import FollowUp
from reconciler.engine.plan import Change, Plan
from reconciler.engine.review import PlanEdit
from reconciler.facts.gather import FactRequest
from reconciler.facts.models import ClusterFacts, NodeFacts

Scope = Literal["node", "cluster"]


class Driver(Protocol):
    """A managed thing: says which facts it needs, and turns facts into changes."""

    name: str
    phase: int

    @property
    def scope(self) -> Scope:
        """`cluster` when the driver's changes must be the same on every node."""

    def request(self, ctx: Context, node: str, req: FactRequest) -> None:
        """Add to the node's fact request what this driver needs."""

    def plan(self, ctx: Context, node: str, facts: NodeFacts) -> list[Change]:
        """Compare facts with the desired state and return the node's changes."""

    def absorb(self, ctx: Context, cluster: ClusterFacts, node: str, facts: NodeFacts,
               commands: dict[str, dict]) -> None:
        """Keep this driver's typed facts from one node's answers (`cluster.keep`; ValueError etc.: unreadable)."""

    def review(self, ctx: Context, plan: Plan) -> list[PlanEdit]:
        """Edits from the whole plan: warnings, refusals, changes added, changes replaced (ordered, refused)."""

    def followups(self, ctx: Context, plan: Plan) -> list[FollowUp]:
        """Steps that follow from the whole plan (the plan itself is not changed)."""

    def converged(self, ctx: Context, node: str, facts: NodeFacts) -> None:
        """Add to FACTS what NODE reports of this driver's things once they match the desired state."""


class DriverDefaults:
    """The optional parts of the contract with their defaults."""

    scope: Scope = "node"

    def absorb(self, ctx: Context, cluster: ClusterFacts, node: str, facts: NodeFacts,
               commands: dict[str, dict]) -> None:
        """No facts of its own to keep."""

    def review(self, ctx: Context, plan: Plan) -> list[PlanEdit]:
        """No edits."""
        return []

    def followups(self, ctx: Context, plan: Plan) -> list[FollowUp]:
        """No steps from the whole plan."""
        return []

    def converged(self, ctx: Context, node: str, facts: NodeFacts) -> None:
        """Nothing of its own beyond what drivers/converged.py makes."""
