"""The driver contract as the planner uses it (reconciler/engine/driver.py): a cluster-scoped driver makes its
changes cluster-wide, and a change's own scope is kept otherwise (issue 45 item 7: `make_plan` used to reset every
change to its driver's class scope, so the accounting driver's explicit `scope="cluster"` became `node`)."""

from __future__ import annotations

from pathlib import Path

from reconciler.desired.loader import load_dir
from reconciler.engine.context import Context
from reconciler.engine.driver import DriverDefaults
from reconciler.engine.plan import Change
from reconciler.engine.planner import make_plan
from reconciler.facts.gather import FactRequest
from reconciler.facts.models import ClusterFacts, NodeFacts
from tests.drivers.base_state import write_state


class Kind(DriverDefaults):
    """A kind with one change per node, of the scope it is given."""

    name = "kind"
    phase = 45

    def __init__(self, change_scope: str) -> None:
        self.change_scope = change_scope

    def request(self, ctx: Context, node: str, req: FactRequest) -> None:
        """Nothing."""

    def plan(self, ctx: Context, node: str, facts: NodeFacts) -> list[Change]:
        """One change on NODE."""
        return [Change(node=node, driver=self.name, resource="thing", action="update",
                       scope=self.change_scope)]  # type: ignore[arg-type]


class ClusterKind(Kind):
    """The same, every change cluster-wide by its driver's word."""

    scope = "cluster"


def scopes(tmp_path: Path, driver: Kind) -> set[str]:
    """The scopes of the changes DRIVER plans on every node of a small state."""
    ctx = Context(loaded=load_dir(write_state(tmp_path / driver.change_scope / type(driver).__name__, "")),
                  source="test")
    ctx.facts = ClusterFacts(controller=ctx.controller)
    for spec in ctx.targets():
        ctx.facts.nodes[spec.name] = NodeFacts(node=spec.name, reachable=True)
    return {c.scope for c in make_plan(ctx, [driver]).changes if c.driver == "kind"}


def test_a_changes_own_scope_is_kept_and_a_cluster_driver_makes_it_cluster(tmp_path: Path) -> None:
    assert scopes(tmp_path, Kind("cluster")) == {"cluster"}  # was reset to node
    assert scopes(tmp_path, Kind("lead")) == {"lead"}
    assert scopes(tmp_path, Kind("node")) == {"node"}
    assert scopes(tmp_path, ClusterKind("node")) == {"cluster"}
    assert Kind("node").followups(None, None) == []  # type: ignore[arg-type]  # the defaults, callable
