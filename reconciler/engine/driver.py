"""The driver protocol: what the engine asks of every managed kind. Drivers (drivers/) implement it; the engine
imports no driver, its callers pass the list (`drivers.all_drivers()`)."""

from __future__ import annotations

from typing import Protocol

from reconciler.engine.context import Context
from reconciler.engine.plan import Change
from reconciler.facts.gather import FactRequest
from reconciler.facts.models import NodeFacts


class Driver(Protocol):
    """A managed thing: says which facts it needs, and turns facts into changes."""

    name: str
    phase: int

    def request(self, ctx: Context, node: str, req: FactRequest) -> None:
        """Add to the node's fact request what this driver needs."""

    def plan(self, ctx: Context, node: str, facts: NodeFacts) -> list[Change]:
        """Compare facts with the desired state and return the node's changes."""
