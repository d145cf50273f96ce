"""The driver contract as the planner uses it (reconciler/engine/driver.py): a cluster-scoped driver makes its
changes cluster-wide, and a change's own scope is kept otherwise (issue 45 item 7: `make_plan` used to reset every
change to its driver's class scope, so the accounting driver's explicit `scope="cluster"` became `node`); a
driver's review returns edits the engine makes (engine/review.py); a driver's own facts are kept typed."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from reconciler.desired.loader import load_dir
from reconciler.engine.context import Context
from reconciler.engine.driver import DriverDefaults
from reconciler.engine.plan import Change, Plan
from reconciler.engine.planner import make_plan
from reconciler.engine.review import Add, PlanEdit, Replace, Warn, apply_edits
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


class Refuser(Kind):
    """Reviews the plan: every change of `kind` on the first node becomes an error, and a warning is said twice."""

    name = "refuser"

    def plan(self, ctx: Context, node: str, facts: NodeFacts) -> list[Change]:
        """Nothing of its own."""
        return []

    def review(self, ctx: Context, plan: Plan) -> list[PlanEdit]:
        """Replace the first node's `kind` changes by errors."""
        first = min(c.node for c in plan.changes)
        return [Warn("said once"), Warn("said once"),
                *(Replace(c, [c.model_copy(update={"action": "error", "summary": "refused"})])
                  for c in plan.changes if c.node == first and c.driver == "kind")]


class Watcher(Kind):
    """Reviews after the refuser: sees its edits already made (the drivers' order)."""

    name = "watcher"
    seen: list[str] = []

    def plan(self, ctx: Context, node: str, facts: NodeFacts) -> list[Change]:
        """Nothing of its own."""
        return []

    def review(self, ctx: Context, plan: Plan) -> list[PlanEdit]:
        """Note the actions it sees; add one change."""
        Watcher.seen = sorted(c.action for c in plan.changes)
        return [Add(Change(node=plan.changes[0].node, driver=self.name, resource="seen", action="error",
                           summary="added"))]


def _plan(tmp_path: Path, drivers: list) -> Plan:
    ctx = Context(loaded=load_dir(write_state(tmp_path / "review", "")), source="test")
    ctx.facts = ClusterFacts(controller=ctx.controller)
    for spec in ctx.targets():
        ctx.facts.nodes[spec.name] = NodeFacts(node=spec.name, reachable=True)
    return make_plan(ctx, drivers)


def test_review_edits_are_made_by_the_engine_in_the_drivers_order(tmp_path: Path) -> None:
    """A driver's review returns edits; the engine makes them before the next driver reviews, and keeps the plan's
    errors in step with its error changes (a replaced error's message goes, a new one's comes)."""
    plan = _plan(tmp_path, [Kind("node"), Refuser("node"), Watcher("node")])
    nodes = sorted({c.node for c in plan.changes if c.driver == "kind"})
    assert Watcher.seen == ["error"] + ["update"] * (len(nodes) - 1)  # the refuser's edit was made before
    assert plan.warnings.count("said once") == 1
    assert sorted(plan.errors) == sorted([f"{nodes[0]}: refused", f"{plan.changes[0].node}: added"])
    assert [c.action for c in plan.changes if c.node == nodes[0] and c.driver == "kind"] == ["error"]
    back = plan.changes[[c.driver for c in plan.changes].index("kind")]
    apply_edits(plan, [Replace(back, [back.model_copy(update={"action": "update"})])])
    assert f"{back.node}: refused" not in plan.errors  # replacing an error change takes its error away


def test_a_replace_of_a_change_not_in_the_plan_is_refused() -> None:
    """Edits name the plan's own change objects: an equal copy is not the change (a driver's bug, said)."""
    plan = Plan(source="test", changes=[Change(node="a", driver="k", resource="r", action="update")])
    with pytest.raises(ValueError, match="not in the plan"):
        apply_edits(plan, [Replace(plan.changes[0].model_copy(), [])])


@dataclass(frozen=True)
class Seen:
    """A driver's own facts of a node."""

    names: frozenset[str]

    def to_json(self) -> dict:
        """Sorted."""
        return {"names": sorted(self.names)}


def test_kept_facts_are_typed_per_kind_and_dump_stably() -> None:
    """A driver keeps its own typed object per node and reads the same type back; another type of the same name is
    refused; the JSON form (the PR report's facts fingerprint, `reconciler facts`) is the object's own, sorted."""
    facts = ClusterFacts()
    facts.keep("b", Seen(frozenset({"z", "y", "x"})))
    facts.keep("a", Seen(frozenset({"q"})))
    assert facts.kept_of(Seen, "b") == Seen(frozenset({"x", "y", "z"})) and facts.kept_of(Seen, "c") is None
    assert json.loads(facts.model_dump_json())["kept"] == {"Seen": {"a": {"names": ["q"]},
                                                                    "b": {"names": ["x", "y", "z"]}}}

    class Other:  # a different type under the same name
        pass

    Other.__name__ = "Seen"
    with pytest.raises(TypeError, match="are a Seen"):
        facts.kept_of(Other, "a")
