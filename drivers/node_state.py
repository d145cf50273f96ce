"""Driver for Slurm node state: desired drains, and resuming only drains the reconciler set itself."""

from __future__ import annotations

import shlex

from reconciler.desired.inventory import slurm_nodes
from reconciler.drivers import slurm_running as running
from reconciler.drivers.phases import phase as phase_of
from reconciler.engine.context import Context
from reconciler.engine.drain import DrainSteps
from reconciler.engine.driver import DriverDefaults
from reconciler.engine.ops import RunCommand
from reconciler.engine.plan import Change, Plan
from reconciler.engine.review import PlanEdit, Refuse, Warn
from reconciler.engine.undo import Restore
from reconciler.facts.gather import FactRequest
from reconciler.facts.models import ClusterFacts, NodeFacts, SlurmNodeFact
from reconciler.facts.parsers import SCONTROL_NODES_COMMAND, SQUEUE_COMMAND, parse_scontrol_nodes, parse_squeue

REASON_PREFIX = "reconciler:"
ROLLOUT_REASON = "reconciler: rolling restart of slurmd"
# Drains owned by the health checks: only a passing check resumes them.
GPU_REASON_PREFIX = "reconciler: gpu "
CHECK_PREFIXES = ("reconciler: nccl", "reconciler: check", GPU_REASON_PREFIX.rstrip())
# Drains owned by an upgrade (reconciler/rollout/upgrade.py): only the upgrade lifts them; a failed one stays.
UPGRADE_PREFIX = "reconciler: upgrade"


def drain_command(node: str, reason: str) -> str:
    """scontrol command draining a node with a reason."""
    return f"scontrol update nodename={shlex.quote(node)} state=drain reason={shlex.quote(reason)}"


def resume_command(node: str) -> str:
    """scontrol command resuming a node."""
    return f"scontrol update nodename={shlex.quote(node)} state=resume"


def state_command(node: str, flags: str) -> str:
    """Exits 0 when NODE's own State field (not its NextState) holds one of FLAGS (an ERE alternation).

    Slurm 24.11 shows `NextState=UNDRAIN` on a node while an ASAP reboot is pending (scontrol.1 of 24.11: ASAP
    "will set nextstate=UNDRAIN if nextstate isn't specified"; seen on the testbed), and a bare `State=[^ ]*DRAIN`
    matched it: a node an admin undrained while its reboot waited read as drained
    (tests/rollout/test_upgrade_asap_testbed.py)."""
    return f"scontrol show node -o {shlex.quote(node)} | grep -Eq ' State=[^ ]*({flags})'"


# Which jobs hold a node, for every drain that waits for jobs (a rolling restart, a step that would end other nodes'
# jobs, the upgrade's reboot): RUNNING, COMPLETING, CONFIGURING and SUSPENDED. A suspended job "has an allocation,
# but execution has been suspended and CPUs have been released for other jobs" (squeue.1, the same words in 22.05,
# 24.11 and 26.05); its processes stay on the node, stopped, and carry on there (scontrol.1 `suspend`/`resume`:
# SIGSTOP, SIGCONT; slurm.conf.5 PreemptMode=SUSPEND: "the suspended jobs will still use memory on the allocated
# nodes"; all three releases). So a step that ends the running jobs of a node (a reboot ends every process) ends a
# suspended one too, and with its CPUs released the node's state does not show it (drained, a node with only a
# suspended job reads IDLE+DRAIN, DRAINED: observed on 22.05.8 and 24.11.5): squeue does. Before, the
# apply's drains left SUSPENDED out (a rolling restart or a protected step ran beside a suspended job) and the
# upgrade's counted it, neither saying why; now every drain counts it: waited for like a running job, bounded by
# drain_timeout, never ended by our step (tests/engine/test_drain_suspended_testbed.py: a suspended job on the
# testbed is seen by both kinds of steps).
JOB_STATES = "RUNNING,COMPLETING,CONFIGURING,SUSPENDED"


def jobs_command(node: str) -> str:
    """Prints one line per job holding NODE (JOB_STATES: suspended ones included); empty when none."""
    return f"squeue -h -w {shlex.quote(node)} -t {JOB_STATES} -o %A"


def drain_steps(controller: str, node: str, reason: str = ROLLOUT_REASON, ours: str | None = None) -> DrainSteps:
    """How NODE is drained with REASON, waited empty and resumed (as data): around a rolling restart by default."""
    return DrainSteps(
        run_on=controller,
        jobs=jobs_command(node),
        drained=state_command(node, "DRAIN"),
        drain=drain_command(node, reason),
        resume=resume_command(node),
        ours=ours)


def responding_command(node: str) -> str:
    """Exits 0 once slurmctld sees the node's slurmd answer (not DOWN, NOT_RESPONDING, UNKNOWN, ...)."""
    quoted = shlex.quote(node)
    # ' State=': the node's own state, not a pending reboot's `NextState=DOWN` (scontrol(1): reboot nextstate=)
    return (f"s=$(scontrol show node -o {quoted}) && printf '%s' \"$s\" | grep -q 'State=' && "
            f"! printf '%s' \"$s\" | grep -Eq ' State=[^ ]*(NOT_RESPONDING|DOWN|UNKNOWN|FUTURE|INVAL|[*])'")


CONTROLLER_UP = "scontrol ping | grep -q 'is UP'"


def ours(reason: str | None) -> bool:
    """True when a drain reason was written by the reconciler."""
    return bool(reason) and str(reason).startswith(REASON_PREFIX)


def desired_reason(reason: str) -> str:
    """The Slurm reason for a drain asked for in the YAML."""
    return f"{REASON_PREFIX} {reason}"


class NodeStateDriver(DriverDefaults):
    """Drains nodes the YAML wants drained; resumes nodes it drained itself when no longer wanted."""

    name = "node_state"
    phase = phase_of("node_state")

    def request(self, ctx: Context, node: str, req: FactRequest) -> None:
        """The controller reports Slurm's view of every node and the running jobs."""
        if node == ctx.controller:
            req.commands["scontrol_nodes"] = SCONTROL_NODES_COMMAND
            req.commands["squeue"] = SQUEUE_COMMAND

    def absorb(self, ctx: Context, cluster: ClusterFacts, node: str, facts: NodeFacts,
               commands: dict[str, dict]) -> None:
        """From the controller's answers: Slurm's view of every node and the running jobs (or why not)."""
        if node != ctx.controller:
            return
        if not facts.reachable:
            cluster.slurm_view_error = f"controller unreachable: {facts.error}"
            return
        nodes = commands.get("scontrol_nodes", {})
        if nodes.get("rc") != 0:
            cluster.slurm_view_error = f"scontrol failed: {nodes.get('stderr', '').strip()[:200]}"
            return
        cluster.slurm_nodes = parse_scontrol_nodes(nodes.get("stdout", ""))
        cluster.jobs = parse_squeue(commands.get("squeue", {}).get("stdout", ""))

    def review(self, ctx: Context, plan: Plan) -> list[PlanEdit]:
        """Says when Slurm's view of the nodes could not be read (an error, unless the plan writes the first
        slurm.conf: then there is no Slurm to ask yet)."""
        if ctx.facts.slurm_view_error and ctx.facts.slurm_nodes == {}:
            message = f"Slurm's view unavailable ({ctx.facts.slurm_view_error.strip()}): node states not planned"
            first_config = any(c.node == ctx.controller and c.resource.endswith("/slurm.conf")
                               and c.action == "create" for c in plan.changes)
            # an interrupted Slurm upgrade: the controller's commands moved with slurmdbd's packages and cannot
            # talk to the older slurmctld still running (`Protocol authentication error`, observed 26.05 -> 24.11);
            # the plan restarts slurmctld at the new release first
            restarts = [c for c in plan.changing()
                        if c.node == ctx.controller and running.restarts(c.resource, c.driver, "slurmctld")]
            if restarts:
                message += f"; this plan restarts slurmctld first ({restarts[0].summary})"
            return [Warn(message) if first_config or restarts else Refuse(message)]
        return []

    def plan(self, ctx: Context, node: str, facts: NodeFacts) -> list[Change]:
        """Node-state changes are planned once, on the controller, for every Slurm node."""
        if node != ctx.controller or ctx.facts.slurm_view_error:
            return []
        changes = []
        for name in slurm_nodes(ctx.state):
            if ctx.limit is not None and name not in ctx.limit:
                continue
            view = ctx.facts.slurm_nodes.get(name)
            if view is not None:
                changes.append(self._plan_node(ctx, name, view))
        return changes

    def _plan_node(self, ctx: Context, name: str, view: SlurmNodeFact) -> Change:
        spec = ctx.specs.get(name)
        wanted = desired_reason(spec.drain) if spec and spec.drain else None

        def change(summary: str = "", command: str | None = None) -> Change:
            return Change(node=name, driver=self.name, resource="slurm node state", phase=self.phase,
                          run_on=ctx.controller, action="update" if command else "ok", summary=summary,
                          ops=[RunCommand(command=command)] if command else [],
                          restore=_as_before(name, view) if command else None)

        if wanted:
            if view.drained and view.reason == wanted:
                return change()
            if view.drained and not ours(view.reason):
                return change(f"already drained by someone else ({view.reason})")
            return change(f"drain ({wanted})", drain_command(name, wanted))
        if view.drained and ours(view.reason) and not str(view.reason).startswith((*CHECK_PREFIXES, UPGRADE_PREFIX)):
            if view.next_state:
                # a pending reboot's drain (`scontrol reboot ASAP`: NextState=UNDRAIN), which Slurm lifts itself;
                # 24.11 keeps a resumed node's last Reason until a job starts, so our old reason may be on it, and
                # a resume would cancel the reboot (scontrol.1, 24.11: resume changes a node from REBOOT to IDLE)
                return change(f"drained for a pending reboot (NextState={view.next_state}): Slurm lifts it")
            return change(f"resume (drain '{view.reason}' is no longer wanted)", resume_command(name))
        return change()


def _as_before(name: str, view: SlurmNodeFact) -> Restore:
    """How to put a node's drain back as Slurm showed it before a change: drained with its old reason, or not."""
    drained = state_command(name, "DRAIN")
    if view.drained and view.reason:
        return Restore(summary=f"drained again ({view.reason})",
                       ops=[RunCommand(command=drain_command(name, view.reason))])
    return Restore(summary="resumed (not drained before)", check=f"! {drained}",
                   ops=[RunCommand(command=resume_command(name))])
