"""The waves a plan would go out in, from the facts the plan already gathered: what `plan`, the PR comment and
`apply`'s preview show. Kept apart from the runner so that a plan does not import the gates, the checks and the
upgrade machine it never runs (~40 ms of every cold `reconciler plan`). The workload manager's view comes through
its interface (engine/workload.py), passed in by the caller."""

from __future__ import annotations

from reconciler.common import clock
from reconciler.engine.context import Context
from reconciler.engine.plan import Plan
from reconciler.engine.workload import NodesView, WorkloadManager
from reconciler.model.upgrade import gate_label
from reconciler.rollout.capacity import capacity_of, headroom
from reconciler.rollout.waves import WavePlan, plan_waves
from reconciler.rollout.windows import describe, holds, state_at


def bootstrap_reason(before: NodesView, slurm: list[str]) -> str | None:
    """Why nothing can be gated: Slurm does not answer, or none of its nodes responds (a cluster being built)."""
    if before.error:
        return f"bootstrap: Slurm does not answer before the apply ({before.error.splitlines()[0][:120]})"
    if slurm and not any(before.nodes.get(n) is not None and before.nodes[n].responding for n in slurm):
        return "bootstrap: no Slurm node responds before the apply"
    return None


def plan_rollout(ctx: Context, plan: Plan, workload: WorkloadManager) -> WavePlan:
    """The waves PLAN would go out in, from the facts already gathered (Slurm's view included): no round trip."""
    state = ctx.state
    view = workload.planned_view(ctx.facts)
    slurm = workload.scheduled(state)
    return plan_waves(plan, state.rollout, list(ctx.specs), slurm, has_node_checks=bool(state.checks.node),
                      bootstrap=bootstrap_reason(view, slurm))


def annotate(ctx: Context, plan: Plan, workload: WorkloadManager) -> WavePlan:
    """Attach the waves to the plan (`Plan.rollout`), for the text and JSON plans and the PR comment."""
    waves = plan_rollout(ctx, plan, workload)
    plan.rollout = {**waves.as_dict(), "lines": waves.lines()}
    upgrade = ctx.state.rollout.upgrade
    if upgrade is not None:  # changes needing a reboot/driver reload go out node by node (the plan says how)
        plan.rollout["upgrade"] = {"max_unavailable": upgrade.max_unavailable,
                                   "gates": [gate_label(g) for g in upgrade.gates],
                                   "mode": upgrade.mode, "requeue": list(upgrade.requeue)}
        needing = sorted({c.node for c in plan.changing() if c.needs is not None})
        if needing:  # how many can go at once now, by Slurm's view as the plan read it, and why no more
            capacity = capacity_of(ctx.state, upgrade, workload.scheduled(ctx.state))
            count, why = headroom(capacity, workload.planned_view(ctx.facts), needing)
            plan.rollout["upgrade"]["now"] = {"count": count, "why": why}
    windows = ctx.state.rollout.windows
    state = state_at(windows, clock.utcnow())
    if state is not None:  # when the windows let what (the plan, the PR comment: as of when it was planned)
        plan.rollout["windows"] = {"windows": describe(windows), "holds": holds(ctx.state.rollout.windows_apply_to),
                                   "open": state.inside,
                                   "text": state.text()}
    return waves
