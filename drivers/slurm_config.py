"""Driver for slurm.conf, gres.conf and cgroup.conf: the same files on every Slurm node."""

from __future__ import annotations

from reconciler.drivers.base import file_change
from reconciler.drivers.node_state import CONTROLLER_UP, drain_steps, responding_command
from reconciler.drivers.slurm_consequences import Consequence, node_definition_changed, slurm_conf_consequence
from reconciler.engine.context import Context, shared_render
from reconciler.engine.followups import ORDER_COMPUTE, ORDER_CONTROLLER, FollowUp, command, followup_key, service
from reconciler.engine.plan import Change, Plan
from reconciler.facts.gather import FactRequest
from reconciler.facts.models import NodeFacts
from reconciler.inventory import slurm_nodes
from reconciler.render import managed_files_for
from reconciler.render.files import file_path
from reconciler.slurmconf import same_meaning, same_pairs

RECONFIGURE = "scontrol reconfigure"

SLURM_FILES = ("slurm.conf", "gres.conf", "cgroup.conf")


class SlurmConfigDriver:
    """Keeps the Slurm configuration files in step with the desired state."""

    name = "slurm_config"
    phase = 30

    def files_for(self, ctx: Context, node: str) -> list[str]:
        """The Slurm files a node gets."""
        return [f for f in managed_files_for(ctx.state, node) if f in SLURM_FILES]

    def request(self, ctx: Context, node: str, req: FactRequest) -> None:
        """Ask for the content of the node's Slurm files and its Slurm version."""
        req.files += [file_path(ctx.state, f) for f in self.files_for(ctx, node)]
        if self.files_for(ctx, node):
            req.commands["slurm_version"] = "slurmd -V 2>/dev/null || slurmctld -V 2>/dev/null || sinfo -V"

    def plan(self, ctx: Context, node: str, facts: NodeFacts) -> list[Change]:
        """A change per Slurm file whose content (header aside) or mode differs."""
        changes = []
        for name in self.files_for(ctx, node):
            path = file_path(ctx.state, name)
            desired = shared_render(ctx, node, name)
            changes.append(file_change(self.name, node, path, facts.files.get(path), desired,
                                       phase=self.phase, ignore_header=True,
                                       equivalent=same_meaning if name == "slurm.conf" else same_pairs))
        return changes

    def followups(self, ctx: Context, plan: Plan) -> list[FollowUp]:
        """What the plan's Slurm file changes need: `scontrol reconfigure`, a slurmctld restart, slurmd restarts
        (rolling, drained first where jobs run), by the keys that changed and the Slurm version family; and
        daemons that should run but do not are started (the first apply on a fresh cluster)."""
        family = ctx.state.cluster.slurm_version
        ctl = ctx.controller
        compute = [n for n in slurm_nodes(ctx.state) if n in ctx.facts.nodes and ctx.facts.nodes[n].reachable
                   and (ctx.limit is None or n in ctx.limit)]
        compute_set = set(compute)
        slurmd: dict[str, list[str]] = {}
        ctld: list[str] = []
        reconfigure: list[str] = []
        desired = None
        classified: dict[str | None, Consequence] = {}  # most nodes hold the same old file: classify it once
        for node, path in sorted({(c.node, c.resource) for c in plan.changing() if c.driver == self.name}):
            name = path.rsplit("/", 1)[-1]
            if name != "slurm.conf":
                if node in compute_set:
                    slurmd.setdefault(node, []).append(f"{name} changed on {node}: slurmd must restart")
                continue
            desired = desired or shared_render(ctx, node, "slurm.conf")
            before = _current(ctx, node, "slurm.conf")
            if before not in classified:
                classified[before] = slurm_conf_consequence(before, desired, family)
            consequence = classified[before]
            if consequence.reconfigure and not reconfigure:
                reconfigure.append("slurm.conf changed")
            if consequence.restart_slurmctld and node == ctl:
                ctld += [r for r in consequence.reasons if r not in ctld]
            if consequence.restart_all_slurmd:
                for other in compute:
                    slurmd.setdefault(other, []).extend(r for r in consequence.reasons
                                                        if r not in slurmd.get(other, []))
            if node in compute_set and node_definition_changed(before, desired, node, family):
                slurmd.setdefault(node, []).append(f"{node}: hardware or GRES definition changed")
        ctl_facts = ctx.facts.nodes.get(ctl)
        ctl_service = ctl_facts.services.get("slurmctld") if ctl_facts and ctl_facts.reachable else None
        ctl_down = ctl_service is not None and not ctl_service.running and (ctx.limit is None or ctl in ctx.limit)
        if ctl_down:
            ctld.append("slurmctld is not running")
        steps: list[FollowUp] = []
        if ctld:
            step = service(ctl, "start" if ctl_down else "restart", "slurmctld", self.phase, ctld[0],
                           order=ORDER_CONTROLLER, ready=CONTROLLER_UP)
            step.reasons = ctld
            step.supersedes = [followup_key(ctl, "command", RECONFIGURE)]
            steps.append(step)
        elif reconfigure:
            steps.append(command(ctl, RECONFIGURE, self.phase, reconfigure[0], order=ORDER_CONTROLLER))
        for node in compute:
            unit = ctx.facts.nodes[node].services.get("slurmd")
            down = unit is not None and not unit.running
            if down:
                slurmd.setdefault(node, []).append(f"slurmd is not running on {node}")
            if node not in slurmd:
                continue
            step = service(node, "start" if down else "restart", "slurmd", self.phase, slurmd[node][0],
                           order=ORDER_COMPUTE, rolling=True, drain=drain_steps(ctl, node),
                           ready=responding_command(node), ready_on=ctl,
                           jobs=[job.job_id for job in ctx.facts.jobs_on(node)])
            step.reasons = slurmd[node]
            steps.append(step)
        return steps


def _current(ctx: Context, node: str, name: str) -> str | None:
    facts = ctx.facts.nodes.get(node)
    fact = facts.files.get(file_path(ctx.state, name)) if facts else None
    return fact.content if fact and fact.exists else None
