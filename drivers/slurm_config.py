"""Driver for slurm.conf, gres.conf and cgroup.conf: the same files on every Slurm node (configless: on the
controllers, and slurmd elsewhere started with --conf-server)."""

from __future__ import annotations

import shlex

from reconciler.desired.inventory import slurm_node_set, slurm_nodes
from reconciler.drivers.base import file_change
from reconciler.drivers.job_risk import JobKill, cpu_keys_changed, job_kills, slurmd_only
from reconciler.drivers.node_state import drain_steps, responding_command
from reconciler.drivers.phases import phase as phase_of
from reconciler.drivers.slurm_consequences import (
    Consequence,
    conf_file_consequence,
    node_definition_changed,
    slurm_conf_consequence,
)
from reconciler.drivers.slurmctld_steps import RECONFIGURE, controller_steps_ready, reconfigure_step
from reconciler.drivers.step_order import ORDER_COMPUTE, ORDER_CONTROLLER
from reconciler.engine.context import Context
from reconciler.engine.driver import DriverDefaults
from reconciler.engine.followups import ORDER_COMMAND, FollowUp, command, followup_key, service
from reconciler.engine.ops import RunCommand
from reconciler.engine.plan import Change, Plan
from reconciler.engine.remote_write import BACKUP_SUFFIX
from reconciler.engine.review import PlanEdit, Warn
from reconciler.facts.gather import FactRequest
from reconciler.facts.models import ClusterFacts, NodeFacts
from reconciler.facts.parsers import family_of, parse_slurm_version
from reconciler.facts.slurmconf import same_meaning, same_pairs
from reconciler.render import configless, managed_files_for, render_file
from reconciler.render.files import file_path, is_slurm_node

# supervisord: read the changed program files, then (re)start slurmd with its new command line.
SUPERVISOR_UPDATE = "supervisorctl reread && supervisorctl update slurmd"

SLURM_FILES = ("slurm.conf", "gres.conf", "cgroup.conf")
# A slurmctld restart does not make the slurmds re-read their files (nor push a configless node's copy): only
# `scontrol reconfigure` does ("Instruct all slurmctld and slurmd daemons to re-read the configuration file",
# scontrol.1 of every release), so a restart that not every slurmd follows is followed by one. Without it the
# other keys of the commit never reached them, and an added node stayed unknown to them: a job across forwarded
# nodes failed ("Can't find an address"; tests/params/test_forwarding_testbed.py, 22.05 and 24.11).
AFTER_RESTART = ": after the slurmctld restart, so that every slurmd not restarted re-reads it"


# Asked of the controller only: its slurmctld parses slurm.conf (slurmd may be up to two releases older, as
# Slurm allows, and asking every node cost each a process start).
VERSION_COMMAND = "slurmctld -V 2>/dev/null || sinfo -V"
VERSION_KEY = "slurm_version"  # the command's name in the node's answers


def version_mismatch(ctx: Context) -> str | None:
    """A warning when the controller runs another Slurm release family than `cluster.slurm_version` says."""
    facts = ctx.facts.nodes.get(ctx.controller)
    running = facts.slurm_version if facts is not None and facts.reachable else None
    if not running:
        return None
    family = family_of(running)
    if family == ctx.state.cluster.slurm_version:
        return None
    return (f"cluster.slurm_version is {ctx.state.cluster.slurm_version} but slurmctld on {ctx.controller} is "
            f"{running}: parameters are checked, and reconfigure vs restart decided, for "
            f"{ctx.state.cluster.slurm_version}; set cluster.slurm_version: \"{family}\"")


NODE_INDEPENDENT = ("slurm.conf", "gres.conf", "cgroup.conf")


def shared_render(ctx: Context, node: str, name: str) -> str:
    """Render a managed file; the Slurm files, byte-identical on every node, once per plan (ctx.renders)."""
    if name not in NODE_INDEPENDENT:
        return render_file(ctx.state, node, name, ctx.source)
    key = (name, ctx.source)
    text = ctx.renders.get(key)
    if text is None:
        text = ctx.renders[key] = render_file(ctx.state, node, name, ctx.source)
    return text


class SlurmConfigDriver(DriverDefaults):
    """Keeps the Slurm configuration files in step with the desired state."""

    name = "slurm_config"
    scope = "cluster"  # Slurm's files are read by slurmctld too: they change everywhere at once
    phase = phase_of("slurm_config")

    def files_for(self, ctx: Context, node: str) -> list[str]:
        """The Slurm files a node gets."""
        return [f for f in managed_files_for(ctx.state, node) if f in SLURM_FILES]

    def request(self, ctx: Context, node: str, req: FactRequest) -> None:
        """Ask for the content of the node's Slurm files and its Slurm version; on a configless node, for the
        Slurm files it must not hold and the file that starts its slurmd with --conf-server."""
        req.files += [file_path(ctx.state, f) for f in self.files_for(ctx, node)]
        req.services += slurm_services(ctx, node)
        if configless.is_client(ctx.state, node):
            req.files += [file_path(ctx.state, f) for f in SLURM_FILES]
            path = _slurmd_start_file(ctx, node)
            if path:
                req.files.append(path)
        if node == ctx.controller:  # the version slurm.conf is parsed by; slurmd may lag (Slurm allows it)
            req.commands[VERSION_KEY] = VERSION_COMMAND

    def absorb(self, ctx: Context, cluster: ClusterFacts, node: str, facts: NodeFacts,
               commands: dict[str, dict]) -> None:
        """The Slurm version the controller's commands print, on its node facts."""
        if VERSION_KEY in commands:
            facts.slurm_version = parse_slurm_version(commands[VERSION_KEY]["stdout"])

    def plan(self, ctx: Context, node: str, facts: NodeFacts) -> list[Change]:
        """A change per Slurm file whose content (header aside) or mode differs; configless nodes: removal of
        Slurm files left from files mode and the slurmd start file (--conf-server)."""
        if configless.is_client(ctx.state, node):
            return self._plan_configless(ctx, node, facts)
        changes = []
        for name in self.files_for(ctx, node):
            path = file_path(ctx.state, name)
            desired = shared_render(ctx, node, name)
            changes.append(file_change(self.name, node, path, facts.files.get(path), desired,
                                       phase=self.phase, ignore_header=True,
                                       equivalent=same_meaning if name == "slurm.conf" else same_pairs))
        return changes

    def _plan_configless(self, ctx: Context, node: str, facts: NodeFacts) -> list[Change]:
        changes = []
        for name in SLURM_FILES:
            path = file_path(ctx.state, name)
            fact = facts.files.get(path)
            if fact is None or not fact.exists:
                continue
            why = ("slurmd uses a local slurm.conf when one exists, instead of the controller's"
                   if name == "slurm.conf" else "configless slurmd gets it from the controller")
            backup = path + BACKUP_SUFFIX
            changes.append(Change(
                node=node, driver=self.name, resource=path, action="delete", phase=self.phase,
                summary=f"remove {path} (cluster.mode is configless: {why}; kept as {backup})",
                ops=[RunCommand(command=f"mv -f {shlex.quote(path)} {shlex.quote(backup)}",
                                description=f"remove {path} (configless)")]))
        start_file = _slurmd_start_file(ctx, node)
        if start_file is None:
            changes.append(Change(
                node=node, driver=self.name, resource="slurmd --conf-server", action="error", phase=self.phase,
                summary="configless Slurm needs slurmd started with --conf-server: done for systemd and "
                        "supervisord nodes only, this node's service manager is custom"))
            return changes
        changes.append(file_change(self.name, node, start_file, facts.files.get(start_file),
                                   _slurmd_start_content(ctx, node), phase=self.phase, ignore_header=True))
        return changes

    def review(self, ctx: Context, plan: Plan) -> list[PlanEdit]:
        """Says when the cluster's Slurm version family and the nodes' installed Slurm differ."""
        mismatch = version_mismatch(ctx)
        return [Warn(mismatch)] if mismatch else []

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
        configless_steps: list[FollowUp] = []
        kills: list[JobKill] = []  # the controller's own file decides what slurmctld does to running jobs
        cpu_nodes: list[str] = []  # nodes whose CPU count changes: the controller step ends their running jobs
        in_place: set[str] = set()  # reasons whose only consequence is a slurmd restart: it keeps the steps
        for node, path in sorted({(c.node, c.resource) for c in plan.changing() if c.driver == self.name}):
            name = path.rsplit("/", 1)[-1]
            if configless.is_client(ctx.state, node):
                if node in compute_set:
                    configless_steps += self._configless_followups(ctx, node, path, slurmd)
                continue
            if name != "slurm.conf":  # gres.conf, cgroup.conf: by the keys that changed for the node, per family
                self._conf_file(ctx, node, name, compute, slurmd, ctld, reconfigure)
                continue
            desired = desired or shared_render(ctx, node, "slurm.conf")
            before = _current(ctx, node, "slurm.conf")
            if before not in classified:
                classified[before] = slurm_conf_consequence(before, desired, family)
            consequence = classified[before]
            if consequence.reconfigure and not reconfigure:
                reconfigure.append("slurm.conf changed")
            if node == ctl:
                kills = job_kills(before, desired, ctx.facts)
                cpu_nodes = [n for n in cpu_keys_changed(before, desired) if n in compute_set] if before else []
            if consequence.restart_slurmctld and node == ctl:
                ctld += [r for r in consequence.reasons if r not in ctld]
            if consequence.restart_all_slurmd:
                if slurmd_only(before, desired, family):
                    in_place.update(consequence.reasons)
                for other in compute:
                    slurmd.setdefault(other, []).extend(r for r in consequence.reasons
                                                        if r not in slurmd.get(other, []))
            if node in compute_set and node_definition_changed(before, desired, node, family):
                slurmd.setdefault(node, []).append(f"{node}: hardware or GRES definition changed")
            if node == ctl and ctx.state.cluster.mode == "configless":  # its slurmds read the controller's file
                for other in compute:
                    if configless.is_client(ctx.state, other) and node_definition_changed(before, desired, other,
                                                                                           family):
                        slurmd.setdefault(other, []).append(f"{other}: hardware or GRES definition changed")
        ctl_facts = ctx.facts.nodes.get(ctl)
        ctl_service = ctl_facts.services.get("slurmctld") if ctl_facts and ctl_facts.reachable else None
        ctl_down = ctl_service is not None and not ctl_service.running and (ctx.limit is None or ctl in ctx.limit)
        if ctl_down:
            ctld.append("slurmctld is not running")
        steps: list[FollowUp] = []
        if ctld:
            ready, gone = controller_steps_ready(ctx)
            step = service(ctl, "start" if ctl_down else "restart", "slurmctld", self.phase, ctld[0],
                           order=ORDER_CONTROLLER, ready=ready)
            step.reasons, step.gone = ctld, gone
            steps.append(step)
            if set(slurm_nodes(ctx.state)) <= slurmd.keys():  # every slurmd restarts: it reads the new files
                step.supersedes = [followup_key(ctl, "command", RECONFIGURE)]
            elif reconfigure:
                steps.append(reconfigure_step(ctx, self.phase, reconfigure[0] + AFTER_RESTART))
        elif reconfigure:
            steps.append(reconfigure_step(ctx, self.phase, reconfigure[0]))
        if cpu_nodes and steps:  # the controller step ends their jobs: drained and emptied before it, said
            when = f"the slurmctld {'start' if ctl_down else 'restart'}" if ctld else f"`{RECONFIGURE}`"
            if not ctl_down:  # a stopped slurmctld cannot drain: nothing keeps them
                steps[0].protect = {n: drain_steps(ctl, n) for n in cpu_nodes}
            steps[0].warnings = [k.warning(when, protected=not ctl_down) for k in kills]
            steps[0].reasons += [k.reason(when, protected=not ctl_down) for k in kills]
        for node in compute:
            unit = ctx.facts.nodes[node].services.get("slurmd")
            down = unit is not None and not unit.running
            if down:
                slurmd.setdefault(node, []).append(f"slurmd is not running on {node}")
            if node not in slurmd:
                continue
            keeps = not down and all(r in in_place for r in slurmd[node])  # restarted in place, not drained
            step = service(node, "start" if down else "restart", "slurmd", self.phase, slurmd[node][0],
                           order=ORDER_COMPUTE, rolling=True, drain=None if keeps else drain_steps(ctl, node),
                           ready=responding_command(node), ready_on=ctl,
                           jobs=[job.job_id for job in ctx.facts.jobs_on(node)])
            step.reasons = slurmd[node]
            steps.append(step)
        return steps + configless_steps

    def _conf_file(self, ctx: Context, node: str, name: str, compute: list[str], slurmd: dict[str, list[str]],
                   ctld: list[str], reconfigure: list[str]) -> None:
        """A gres.conf/cgroup.conf change on NODE: reconfigure, and the restarts its changed keys need in this
        family (23.11+ reconfigure re-reads gres.conf; before, that node's slurmd restarts). On a configless
        controller the file is every client's: each client whose lines changed is judged too."""
        family = ctx.state.cluster.slurm_version
        before, after = _current(ctx, node, name), shared_render(ctx, node, name)
        judged = [node] + ([n for n in compute if n != node and configless.is_client(ctx.state, n)]
                           if node == ctx.controller and ctx.state.cluster.mode == "configless" else [])
        for other in judged:
            consequence = conf_file_consequence(name, before, after, other, family)
            if consequence.reconfigure and not reconfigure:
                reconfigure.append(f"{name} changed")
            if consequence.restart_slurmctld:
                ctld += [r for r in consequence.reasons if r not in ctld and "slurmctld" in r]
            if consequence.restart_slurmd_here and other in compute:
                slurmd.setdefault(other, []).append(f"{name} changed on {other}: slurmd must restart")

    def _configless_followups(self, ctx: Context, node: str, path: str, slurmd: dict[str, list[str]]) -> list[FollowUp]:
        """A configless node's file changed: systemd reloads its units and slurmd restarts (rolling); supervisord
        rereads its programs and `update` (re)starts slurmd with the new command line (rolling, drained first)."""
        if path in (file_path(ctx.state, name) for name in SLURM_FILES):
            slurmd.setdefault(node, []).append(f"{path} removed on {node}: slurmd must restart to go configless")
            return []
        manager = ctx.specs[node].service_manager.type
        reason = f"{path} changed on {node}: slurmd must start with --conf-server"
        if manager == "systemd":
            slurmd.setdefault(node, []).append(reason)
            return [command(node, "systemctl daemon-reload", self.phase, reason, order=ORDER_COMMAND)]
        ctl = ctx.controller
        step = FollowUp(node=node, kind="command", target=SUPERVISOR_UPDATE, phase=self.phase, order=ORDER_COMPUTE,
                        rolling=True, drain=drain_steps(ctl, node), ready=responding_command(node), ready_on=ctl,
                        jobs=[job.job_id for job in ctx.facts.jobs_on(node)], reasons=[reason],
                        supersedes=[followup_key(node, "restart", "slurmd"), followup_key(node, "start", "slurmd")])
        return [step]


def _slurmd_start_file(ctx: Context, node: str) -> str | None:
    """Where the node's service manager reads how slurmd starts (None: a custom manager)."""
    manager = ctx.specs[node].service_manager.type
    return {"systemd": configless.SYSTEMD_DROPIN, "supervisord": configless.SUPERVISORD_PROGRAM}.get(manager)


def _slurmd_start_content(ctx: Context, node: str) -> str:
    cluster = ctx.state.cluster
    if ctx.specs[node].service_manager.type == "systemd":
        return configless.systemd_dropin(cluster, ctx.source)
    return configless.supervisord_program(cluster, ctx.source)


def slurm_services(ctx: Context, node: str) -> list[str]:
    """The Slurm daemons (and munge) whose state the Slurm follow-ups need on a node."""
    names = []
    controllers = ctx.state.cluster.controller_names
    if node in controllers:
        names += ["munge", "slurmctld"]
    elif is_slurm_node(ctx.state, node):
        names.append("munge")
    if node in slurm_node_set(ctx.state):
        names.append("slurmd")
    return names


def _current(ctx: Context, node: str, name: str) -> str | None:
    facts = ctx.facts.nodes.get(node)
    fact = facts.files.get(file_path(ctx.state, name)) if facts else None
    return fact.content if fact and fact.exists else None
