"""Build the plan: every driver's changes per node, each driver's review of the whole plan (edits the engine makes),
then the follow-up steps they declare, merged."""

from __future__ import annotations

from collections.abc import Sequence

from reconciler.desired.risks import risk_warnings
from reconciler.engine.context import Context
from reconciler.engine.driver import Driver
from reconciler.engine.followups import FollowUp, carried, merge
from reconciler.engine.owed import owed_followups, read_owed
from reconciler.engine.plan import Change, Plan
from reconciler.engine.review import apply_edits, error_of


def make_plan(ctx: Context, drivers: Sequence[Driver]) -> Plan:
    """Compare facts with the desired state for every target node."""
    plan = Plan(source=ctx.source, commit=ctx.loaded.commit)
    ctx.renders.clear()  # the state may have changed since the last plan
    for spec in ctx.targets():
        facts = ctx.facts.nodes.get(spec.name)
        if facts is None or not facts.reachable:
            why = facts.error if facts and facts.error else "no facts"
            plan.unreachable[spec.name] = why
            plan.changes.append(Change(node=spec.name, driver="ssh", resource="node", action="unknown",
                                       summary=f"unreachable: {why}"))
            continue
        for driver in drivers:
            for change in driver.plan(ctx, spec.name, facts):
                if driver.scope == "cluster":  # a driver whose resources must match cluster-wide says so
                    change.scope = "cluster"  # (a change's own scope, e.g. accounting's cluster, is kept)
                plan.changes.append(change)
    owed, unreadable = read_owed(ctx)
    plan.changes += [c for c in unreadable if ctx.limit is None or c.node in ctx.limit]
    plan.errors += [error_of(c) for c in plan.changes if c.action == "error"]
    plan.warnings += [str(w) for w in risk_warnings(ctx.loaded)]
    for driver in drivers:  # in order: a driver reviews the plan as the drivers before it left it
        apply_edits(plan, driver.review(ctx, plan))
    plan.followups = merge([*plan_followups(ctx, plan, drivers), *owed_followups(ctx, owed)])
    return plan


def plan_followups(ctx: Context, plan: Plan, drivers: Sequence[Driver]) -> list[FollowUp]:
    """What the changing resources asked for, plus the steps each driver concludes from the whole plan, merged.

    A driver's optional `followups(ctx, plan)` sees every change (a slurm.conf written on the controller
    restarts slurmd on every compute node) and changes nothing; what a step does that the plan must warn of
    (running jobs it ends) it carries in its `warnings`, which the plan shows.
    """
    steps = [step for change in plan.changing() for step in change.followups]
    for driver in drivers:
        steps += driver.followups(ctx, plan)
    plan.warnings += [w for w in dict.fromkeys(w for step in steps for w in step.warnings) if w not in plan.warnings]
    return merge(steps)


def carry_over(ctx: Context, plan: Plan, pending: Sequence[FollowUp]) -> None:
    """Add the steps an interrupted apply left undone (its files were written, its restarts were not)."""
    if not pending:
        return
    reachable = {name for name, facts in ctx.facts.nodes.items() if facts.reachable}
    if ctx.limit is not None:
        reachable &= set(ctx.limit)
    plan.followups = merge([*plan.followups, *carried(pending, reachable)])
