"""Build the plan: every driver's changes per node, then the Slurm actions they need."""

from __future__ import annotations

from collections.abc import Sequence

from drivers import Driver
from drivers.slurm_consequences import Consequence, node_definition_changed, slurm_conf_consequence
from reconciler.engine.context import Context, shared_render
from reconciler.engine.plan import Change, Plan, SlurmActions
from reconciler.inventory import slurm_nodes
from reconciler.render.files import file_path
from reconciler.risks import risk_warnings


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
            plan.changes.extend(driver.plan(ctx, spec.name, facts))
    if ctx.facts.slurm_view_error and ctx.facts.slurm_nodes == {}:
        message = f"Slurm's view unavailable ({ctx.facts.slurm_view_error.strip()}): node states not planned"
        first_config = any(c.node == ctx.controller and c.resource.endswith("/slurm.conf") and c.action == "create"
                           for c in plan.changes)
        (plan.warnings if first_config else plan.errors).append(message)
    plan.errors += [f"{c.node}: {c.summary}" for c in plan.changes if c.action == "error"]
    plan.warnings += [str(w) for w in risk_warnings(ctx.loaded)]
    plan.slurm = slurm_actions(ctx, plan)
    return plan


def _current(ctx: Context, node: str, name: str) -> str | None:
    facts = ctx.facts.nodes.get(node)
    fact = facts.files.get(file_path(ctx.state, name)) if facts else None
    return fact.content if fact and fact.exists else None


def slurm_actions(ctx: Context, plan: Plan) -> SlurmActions:
    """Decide reconfigure vs restarts from what changes on each node, and who must be drained first."""
    actions = SlurmActions()
    family = ctx.state.cluster.slurm_version
    compute = [n for n in slurm_nodes(ctx.state) if n in ctx.facts.nodes and ctx.facts.nodes[n].reachable
               and (ctx.limit is None or n in ctx.limit)]
    compute_set = set(compute)
    restart: set[str] = set()
    changed_files = {(c.node, c.resource) for c in plan.changing() if c.driver == "slurm_config"}
    desired = None
    consequences: dict[str | None, Consequence] = {}  # most nodes hold the same old file: classify it once
    for node, path in sorted(changed_files):
        name = path.rsplit("/", 1)[-1]
        if name != "slurm.conf":
            if node in compute_set:
                restart.add(node)
                actions.reasons.append(f"{name} changed on {node}: slurmd must restart")
            continue
        desired = desired or shared_render(ctx, node, "slurm.conf")
        before = _current(ctx, node, "slurm.conf")
        if before not in consequences:
            consequences[before] = slurm_conf_consequence(before, desired, family)
        consequence = consequences[before]
        actions.reconfigure |= consequence.reconfigure
        actions.restart_slurmctld |= consequence.restart_slurmctld and node == ctx.controller
        if consequence.restart_all_slurmd:
            restart.update(compute)
        if node in compute_set and node_definition_changed(before, desired, node, family):
            restart.add(node)
            actions.reasons.append(f"{node}: hardware or GRES definition changed")
        actions.reasons += [r for r in consequence.reasons if r not in actions.reasons]
    _not_running(ctx, actions, compute, restart)
    actions.restart_slurmd = sorted(restart)
    _drain_first(ctx, actions, actions.restart_slurmd)
    return actions


def _drain_first(ctx: Context, actions: SlurmActions, nodes: list[str]) -> None:
    """Nodes among these with running jobs are drained (and waited for) before slurmd restarts."""
    for node in nodes:
        jobs = [j.job_id for j in ctx.facts.jobs_on(node)]
        if jobs:
            actions.drain_first[node] = jobs


def _not_running(ctx: Context, actions: SlurmActions, compute: list[str], restart: set[str]) -> None:
    """Daemons that should run but do not are started (e.g. the first apply on a fresh cluster)."""
    ctl = ctx.facts.nodes.get(ctx.controller)
    if ctl and ctl.reachable and (ctx.limit is None or ctx.controller in ctx.limit):
        service = ctl.services.get("slurmctld")
        if service is not None and not service.running:
            actions.restart_slurmctld = True
            actions.reasons.append("slurmctld is not running")
    for node in compute:
        service = ctx.facts.nodes[node].services.get("slurmd")
        if service is not None and not service.running:
            restart.add(node)
            actions.reasons.append(f"slurmd is not running on {node}")


def carry_over(ctx: Context, plan: Plan, pending: SlurmActions) -> None:
    """Add Slurm actions an interrupted apply left undone (its files were written, its restarts were not)."""
    if not pending.any:
        return
    compute = {n for n in slurm_nodes(ctx.state) if n in ctx.facts.nodes and ctx.facts.nodes[n].reachable}
    actions = plan.slurm
    actions.reconfigure |= pending.reconfigure
    actions.restart_slurmctld |= pending.restart_slurmctld
    carried = sorted((set(pending.restart_slurmd) & compute) - set(actions.restart_slurmd))
    actions.restart_slurmd = sorted(set(actions.restart_slurmd) | set(carried))
    if carried or pending.restart_slurmctld or pending.reconfigure:
        actions.reasons.append("Slurm steps left undone by an interrupted apply")
    _drain_first(ctx, actions, carried)
